#include "guest-desktop/capture/tile_differ.hpp"

#include <algorithm>
#include <cstring>
#include <tuple>

namespace deskbox::capture {
namespace {

int ceil_div(int a, int b) {
    return (a + b - 1) / b;
}

}  // namespace

TileGrid::TileGrid(int width, int height, int tile)
    : width_(width),
      height_(height),
      tile_(tile),
      columns_(ceil_div(width, tile)),
      rows_(ceil_div(height, tile)),
      flags_(static_cast<std::size_t>(columns_) * static_cast<std::size_t>(rows_), 0) {}

void TileGrid::mark(int column, int row) {
    auto& flag = flags_[index(column, row)];
    if (!flag) {
        flag = 1;
        ++marked_;
    }
}

void TileGrid::mark_rect(const Rect& rect) {
    Rect r = intersect(rect, {0, 0, width_, height_});
    if (r.empty()) return;
    int c1 = (r.right() - 1) / tile_, r1 = (r.bottom() - 1) / tile_;
    for (int row = r.y / tile_; row <= r1; ++row)
        for (int column = r.x / tile_; column <= c1; ++column) mark(column, row);
}

void TileGrid::mark_all() {
    std::fill(flags_.begin(), flags_.end(), 1);
    marked_ = static_cast<int>(flags_.size());
}

void TileGrid::clear() {
    std::fill(flags_.begin(), flags_.end(), 0);
    marked_ = 0;
}

Rect TileGrid::tile_rect(int column, int row) const {
    return intersect({column * tile_, row * tile_, tile_, tile_}, {0, 0, width_, height_});
}

std::vector<Rect> TileGrid::merged_rects() const {
    std::vector<Rect> done;
    if (!any()) return done;
    // Rects still growing downwards, keyed by their column span.
    struct Open {
        int first_column, end_column, first_row, end_row;
    };
    std::vector<Open> open, next;
    auto close = [&](const Open& o) {
        Rect a = tile_rect(o.first_column, o.first_row);
        Rect b = tile_rect(o.end_column - 1, o.end_row - 1);
        done.push_back({a.x, a.y, b.right() - a.x, b.bottom() - a.y});
    };
    for (int row = 0; row < rows_; ++row) {
        next.clear();
        for (int column = 0; column < columns_;) {
            if (!marked(column, row)) {
                ++column;
                continue;
            }
            int end = column;
            while (end < columns_ && marked(end, row)) ++end;
            auto same_span = std::find_if(open.begin(), open.end(), [&](const Open& o) {
                return o.first_column == column && o.end_column == end;
            });
            if (same_span != open.end()) {
                Open grown = *same_span;
                grown.end_row = row + 1;
                next.push_back(grown);
                open.erase(same_span);
            } else {
                next.push_back({column, end, row, row + 1});
            }
            column = end;
        }
        for (const auto& o : open) close(o);  // spans that did not continue into this row
        open.swap(next);
    }
    for (const auto& o : open) close(o);
    return done;
}

Rect TileGrid::bounds() const {
    Rect b;
    for (int row = 0; row < rows_; ++row)
        for (int column = 0; column < columns_; ++column)
            if (marked(column, row)) b = bounding(b, tile_rect(column, row));
    return b;
}

TileDiffer::TileDiffer(int width, int height, int tile)
    : width_(width),
      height_(height),
      tile_(tile),
      stride_(static_cast<std::size_t>(width > 0 ? width : 0) * 4),
      shadow_(stride_ * static_cast<std::size_t>(height > 0 ? height : 0)),
      changed_(width > 0 ? width : 1, height > 0 ? height : 1, tile > 0 ? tile : 1) {
    if (width <= 0 || height <= 0)
        throw CaptureError("screen size must be positive, got " + std::to_string(width) + "x" +
                           std::to_string(height));
    if (tile <= 0) throw CaptureError("tile_size: must be positive, got " + std::to_string(tile));
}

void TileDiffer::reset(const ImageView& full) {
    if (full.area != Rect{0, 0, width_, height_})
        throw CaptureError("TileDiffer::reset needs a full-screen image");
    for (int y = 0; y < height_; ++y) std::memcpy(shadow_row_mut(y), full.row(y), stride_);
    changed_.clear();
}

int TileDiffer::compare(const ImageView& image, const TileGrid& candidates) {
    const Rect area = intersect(image.area, {0, 0, width_, height_});
    if (area.empty()) return 0;
    int compared = 0;
    const int first_column = area.x / tile_, end_column = (area.right() + tile_ - 1) / tile_;
    const int end_row = (area.bottom() + tile_ - 1) / tile_;
    // Walks pixel rows in memory order, comparing whole runs of still-equal candidate tiles
    // with one memcmp: an unchanged screen costs about one pass over both buffers.
    enum : std::uint8_t { skip, equal_so_far, copying };
    tile_state_.assign(static_cast<std::size_t>(changed_.columns()), skip);
    for (int row = area.y / tile_; row < end_row; ++row) {
        for (int column = first_column; column < end_column; ++column) {
            bool candidate = candidates.marked(column, row);
            tile_state_[static_cast<std::size_t>(column)] = candidate ? equal_so_far : skip;
            compared += candidate;
        }
        Rect band = intersect({0, row * tile_, width_, tile_}, area);
        for (int y = band.y; y < band.bottom(); ++y) {
            const std::uint8_t* source = image.row(y);
            std::uint8_t* shadow = shadow_row_mut(y);
            // Pixels [x0, x1) of this row: compare or copy them.
            auto span = [&](int x0, int x1) {
                return std::tuple(shadow + static_cast<std::size_t>(x0) * 4,
                                  source + static_cast<std::size_t>(x0 - area.x) * 4,
                                  static_cast<std::size_t>(x1 - x0) * 4);
            };
            for (int column = first_column; column < end_column;) {
                auto state = tile_state_[static_cast<std::size_t>(column)];
                int end = column + 1;
                while (end < end_column && tile_state_[static_cast<std::size_t>(end)] == state)
                    ++end;
                if (state != skip) {
                    auto [to, from, bytes] =
                        span(std::max(column * tile_, area.x), std::min(end * tile_, area.right()));
                    if (state == copying) {
                        std::memcpy(to, from, bytes);
                    } else if (std::memcmp(to, from, bytes) != 0) {
                        // Some tile of the run differs from this row on: find which.
                        for (int c = column; c < end; ++c) {
                            auto [tile_to, tile_from, tile_bytes] =
                                span(std::max(c * tile_, area.x),
                                     std::min((c + 1) * tile_, area.right()));
                            if (std::memcmp(tile_to, tile_from, tile_bytes) == 0) continue;
                            tile_state_[static_cast<std::size_t>(c)] = copying;
                            std::memcpy(tile_to, tile_from, tile_bytes);
                            changed_.mark(c, row);
                        }
                    }
                }
                column = end;
            }
        }
    }
    return compared;
}

void TileDiffer::overwrite(const ImageView& image) {
    Rect area = intersect(image.area, {0, 0, width_, height_});
    std::size_t bytes = static_cast<std::size_t>(area.width) * 4;
    for (int y = area.y; y < area.bottom(); ++y)
        std::memcpy(shadow_row_mut(y) + static_cast<std::size_t>(area.x) * 4,
                    image.pixel(area.x, y), bytes);
    changed_.mark_rect(area);
}

std::vector<Rect> TileDiffer::take_changed_rects() {
    auto rects = changed_.merged_rects();
    changed_.clear();
    return rects;
}

std::string TileDiffer::copy_pixels(const Rect& rect) const {
    std::string out;
    std::size_t bytes = static_cast<std::size_t>(rect.width) * 4;
    out.resize(bytes * static_cast<std::size_t>(rect.height));
    char* dst = out.data();
    for (int y = rect.y; y < rect.bottom(); ++y, dst += bytes)
        std::memcpy(dst, shadow_row(y) + static_cast<std::size_t>(rect.x) * 4, bytes);
    return out;
}

}  // namespace deskbox::capture
