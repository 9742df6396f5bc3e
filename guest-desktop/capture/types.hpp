// Small value types shared by the capture pieces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/rect.hpp"

namespace deskbox::capture {

// Any capture failure: bad options, unsupported pixel format, lost extension, timeout.
class CaptureError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

using ::deskbox::bounding;
using ::deskbox::intersect;
using ::deskbox::Rect;

struct CursorImage {
    int width = 0;
    int height = 0;
    int xhot = 0;
    int yhot = 0;
    std::uint64_t serial = 0;
    // width*height pixels, each a native-endian uint32 0xAARRGGBB, alpha-premultiplied as
    // XFixes gives it (little-endian bytes B, G, R, A).
    std::string pixels;
};

struct CursorPosition {
    int x = 0;
    int y = 0;
    friend bool operator==(const CursorPosition&, const CursorPosition&) = default;
};

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
