// Small value types shared by the capture pieces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace deskbox::capture {

// Any capture failure: bad options, unsupported pixel format, lost extension, timeout.
class CaptureError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

struct Rect {
    int x = 0;
    int y = 0;
    int width = 0;
    int height = 0;

    bool empty() const { return width <= 0 || height <= 0; }
    int right() const { return x + width; }
    int bottom() const { return y + height; }
    friend bool operator==(const Rect&, const Rect&) = default;
};

inline Rect intersect(const Rect& a, const Rect& b) {
    int x0 = a.x > b.x ? a.x : b.x;
    int y0 = a.y > b.y ? a.y : b.y;
    int x1 = a.right() < b.right() ? a.right() : b.right();
    int y1 = a.bottom() < b.bottom() ? a.bottom() : b.bottom();
    if (x1 <= x0 || y1 <= y0) return {};
    return {x0, y0, x1 - x0, y1 - y0};
}

inline Rect bounding(const Rect& a, const Rect& b) {
    if (a.empty()) return b;
    if (b.empty()) return a;
    int x0 = a.x < b.x ? a.x : b.x;
    int y0 = a.y < b.y ? a.y : b.y;
    int x1 = a.right() > b.right() ? a.right() : b.right();
    int y1 = a.bottom() > b.bottom() ? a.bottom() : b.bottom();
    return {x0, y0, x1 - x0, y1 - y0};
}

// Read-only BGRX pixels of `area` (screen coordinates); row i starts at data + i * stride.
// Valid until the producer's next grab.
struct ImageView {
    const std::uint8_t* data = nullptr;
    std::size_t stride = 0;
    Rect area;

    const std::uint8_t* row(int screen_y) const {
        return data + static_cast<std::size_t>(screen_y - area.y) * stride;
    }
    const std::uint8_t* pixel(int screen_x, int screen_y) const {
        return row(screen_y) + static_cast<std::size_t>(screen_x - area.x) * 4;
    }
};

}  // namespace deskbox::capture
