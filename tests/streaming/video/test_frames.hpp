// Synthetic desktop-like frames for the video tests (text-like strokes, gradients, a moving
// rectangle) and a PSNR to compare decoded pictures with them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "streaming/types.hpp"

namespace deskbox::streaming::test {

// BGRX, tightly packed: a colour gradient wallpaper, a white "document" with black glyph-like
// strokes (sharp edges, as text has), and a solid rectangle that moves right with `step`.
inline std::vector<std::uint8_t> make_frame(int width, int height, int step) {
    std::vector<std::uint8_t> pixels(static_cast<std::size_t>(width) * height * 4);
    auto put = [&](int x, int y, std::uint8_t b, std::uint8_t g, std::uint8_t r) {
        std::uint8_t* p = &pixels[(static_cast<std::size_t>(y) * width + x) * 4];
        p[0] = b;
        p[1] = g;
        p[2] = r;
        p[3] = 0;
    };
    for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x)
            put(x, y, static_cast<std::uint8_t>(x * 255 / width),
                static_cast<std::uint8_t>(y * 255 / height), 120);
    // The document: rows of 6x10 "glyphs" made of 1-2 px strokes chosen by a hash.
    int doc_x = width / 2, doc_y = height / 8, doc_w = width / 2 - 8, doc_h = height * 3 / 4;
    for (int y = doc_y; y < doc_y + doc_h; ++y)
        for (int x = doc_x; x < doc_x + doc_w; ++x) put(x, y, 250, 250, 250);
    for (int row = 0; (row + 1) * 14 < doc_h - 4; ++row) {
        for (int col = 0; (col + 1) * 7 < doc_w - 4; ++col) {
            unsigned hash = static_cast<unsigned>(row * 7919 + col * 104729) * 2654435761u;
            if ((hash >> 28) < 3) continue;  // spaces
            int gx = doc_x + 4 + col * 7, gy = doc_y + 4 + row * 14;
            for (int k = 0; k < 10; ++k) {
                if (hash & 1u) put(gx, gy + k, 20, 20, 20);                  // left stem
                if (hash & 2u) put(gx + 4, gy + k, 20, 20, 20);              // right stem
                if (k < 5 && (hash & 4u)) put(gx + k, gy, 20, 20, 20);       // top bar
                if (k < 5 && (hash & 8u)) put(gx + k, gy + 5, 20, 20, 20);   // middle bar
                if (k < 5 && (hash & 16u)) put(gx + k, gy + 9, 20, 20, 20);  // bottom bar
            }
        }
    }
    // The moving rectangle (a dragged window), over the wallpaper.
    int rect_w = width / 6, rect_h = height / 5;
    int rect_x = (step * 8) % std::max(1, doc_x - rect_w);
    int rect_y = height / 3;
    for (int y = rect_y; y < rect_y + rect_h && y < height; ++y)
        for (int x = rect_x; x < rect_x + rect_w && x < width; ++x) put(x, y, 200, 60, 30);
    return pixels;
}

inline ImageView view_of(const std::vector<std::uint8_t>& bgrx, int width, int height) {
    return {bgrx.data(), width, height, static_cast<std::size_t>(width) * 4};
}

// PSNR over B, G, R of the top-left width x height of two BGRX images.
inline double psnr(const ImageView& a, const ImageView& b, int width, int height) {
    double squared = 0;
    for (int y = 0; y < height; ++y) {
        const std::uint8_t* ra = a.row(y);
        const std::uint8_t* rb = b.row(y);
        for (int x = 0; x < width; ++x)
            for (int c = 0; c < 3; ++c) {
                double d = static_cast<double>(ra[x * 4 + c]) - rb[x * 4 + c];
                squared += d * d;
            }
    }
    double mse = squared / (3.0 * width * height);
    if (mse == 0) return std::numeric_limits<double>::infinity();
    return 10.0 * std::log10(255.0 * 255.0 / mse);
}

// Box-filter halving, the reference for scaled output.
inline std::vector<std::uint8_t> halve(const std::vector<std::uint8_t>& bgrx, int width,
                                       int height) {
    int w = width / 2, h = height / 2;
    std::vector<std::uint8_t> out(static_cast<std::size_t>(w) * h * 4);
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
            for (int c = 0; c < 4; ++c) {
                int sum = 0;
                for (int dy = 0; dy < 2; ++dy)
                    for (int dx = 0; dx < 2; ++dx)
                        sum +=
                            bgrx[((static_cast<std::size_t>(2 * y + dy) * width) + 2 * x + dx) * 4 +
                                 c];
                out[(static_cast<std::size_t>(y) * w + x) * 4 + c] =
                    static_cast<std::uint8_t>((sum + 2) / 4);
            }
    return out;
}

}  // namespace deskbox::streaming::test
