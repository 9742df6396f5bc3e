#include "streaming/region.hpp"

#include <algorithm>
#include <cstdint>
#include <tuple>

namespace deskbox::streaming {
namespace {

// Pairwise joining is quadratic; above this many rects go straight to the tile grid.
constexpr std::size_t kExactMergeLimit = 256;
// The first tile grid has at most this many tiles along the longer side.
constexpr int kMaxTilesPerSide = 64;
// Greedy merging is cubic; larger lists are first reduced on a tile grid.
constexpr std::size_t kGreedyMergeLimit = 64;

// True (and the union in `joined`) when a and b together form exactly one rectangle.
bool join_exactly(const Rect& a, const Rect& b, Rect& joined) {
    if (contains(a, b)) {
        joined = a;
        return true;
    }
    if (contains(b, a)) {
        joined = b;
        return true;
    }
    bool same_columns = a.x == b.x && a.width == b.width;
    bool same_rows = a.y == b.y && a.height == b.height;
    if ((same_columns && a.y <= b.bottom() && b.y <= a.bottom()) ||
        (same_rows && a.x <= b.right() && b.x <= a.right())) {
        joined = bounding(a, b);
        return true;
    }
    return false;
}

void merge_exactly(std::vector<Rect>& rects) {
    for (std::size_t i = 0; i < rects.size(); ++i) {
        std::size_t j = i + 1;
        while (j < rects.size()) {
            Rect joined;
            if (join_exactly(rects[i], rects[j], joined)) {
                rects[i] = joined;
                rects[j] = rects.back();
                rects.pop_back();
                j = i + 1;  // rects[i] grew: earlier non-matches may match now
            } else {
                ++j;
            }
        }
    }
}

// Tiles of `tile` pixels aligned to `box`, marked when any rect touches them; marked runs in a
// row become rects, and identical runs in consecutive rows are joined.
std::vector<Rect> tile_cover(const std::vector<Rect>& rects, const Rect& box, int tile) {
    int cols = (box.width + tile - 1) / tile;
    int rows = (box.height + tile - 1) / tile;
    std::vector<char> marked(static_cast<std::size_t>(cols) * rows, 0);
    for (const Rect& r : rects) {
        int c0 = (r.x - box.x) / tile, c1 = (r.right() - 1 - box.x) / tile;
        int r0 = (r.y - box.y) / tile, r1 = (r.bottom() - 1 - box.y) / tile;
        for (int row = r0; row <= r1; ++row)
            std::fill_n(marked.begin() + static_cast<std::ptrdiff_t>(row) * cols + c0, c1 - c0 + 1,
                        1);
    }
    std::vector<Rect> out;
    std::vector<std::size_t> previous_row, current_row;  // indices into out of each row's runs
    for (int row = 0; row < rows; ++row) {
        current_row.clear();
        int y = box.y + row * tile;
        int height = std::min(tile, box.bottom() - y);
        for (int col = 0; col < cols;) {
            if (!marked[static_cast<std::size_t>(row) * cols + col]) {
                ++col;
                continue;
            }
            int start = col;
            while (col < cols && marked[static_cast<std::size_t>(row) * cols + col]) ++col;
            int x = box.x + start * tile;
            int width = std::min(col * tile, box.width) - start * tile;
            auto above = std::find_if(previous_row.begin(), previous_row.end(), [&](std::size_t i) {
                return out[i].x == x && out[i].width == width;
            });
            if (above != previous_row.end()) {
                out[*above].height += height;
                current_row.push_back(*above);
            } else {
                out.push_back({x, y, width, height});
                current_row.push_back(out.size() - 1);
            }
        }
        std::swap(previous_row, current_row);
    }
    return out;
}

// Joins the pair that adds the least uncovered area until at most `max_rects` remain.
void merge_greedily(std::vector<Rect>& rects, std::size_t max_rects) {
    while (rects.size() > max_rects) {
        std::size_t best_i = 0, best_j = 1;
        std::int64_t best_cost = INT64_MAX;
        for (std::size_t i = 0; i < rects.size(); ++i) {
            for (std::size_t j = i + 1; j < rects.size(); ++j) {
                std::int64_t cost =
                    bounding(rects[i], rects[j]).area() - rects[i].area() - rects[j].area();
                if (cost < best_cost) {
                    best_cost = cost;
                    best_i = i;
                    best_j = j;
                }
            }
        }
        rects[best_i] = bounding(rects[best_i], rects[best_j]);
        rects[best_j] = rects.back();
        rects.pop_back();
    }
}

}  // namespace

std::vector<Rect> simplify_region(std::vector<Rect> rects, std::size_t max_rects) {
    if (max_rects == 0) max_rects = 1;
    std::erase_if(rects, [](const Rect& r) { return r.empty(); });
    auto key = [](const Rect& r) { return std::tie(r.y, r.x, r.height, r.width); };
    std::sort(rects.begin(), rects.end(),
              [&](const Rect& a, const Rect& b) { return key(a) < key(b); });
    rects.erase(std::unique(rects.begin(), rects.end()), rects.end());
    if (rects.size() <= 1) return rects;

    if (rects.size() <= kExactMergeLimit) {
        merge_exactly(rects);
        if (rects.size() <= max_rects) return rects;
    }
    if (rects.size() > kGreedyMergeLimit) {
        Rect box;
        for (const Rect& r : rects) box = bounding(box, r);
        int longest = std::max(box.width, box.height);
        std::vector<Rect> covered = {box};
        for (int tile = std::max(8, (longest + kMaxTilesPerSide - 1) / kMaxTilesPerSide);
             tile < longest; tile *= 2) {
            std::vector<Rect> candidate = tile_cover(rects, box, tile);
            if (candidate.size() <= kGreedyMergeLimit) {
                covered = std::move(candidate);
                break;
            }
        }
        rects = std::move(covered);
    }
    merge_greedily(rects, max_rects);
    return rects;
}

}  // namespace deskbox::streaming
