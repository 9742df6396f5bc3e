// Value types shared by the frame mirror and the encoders: rectangles, read-only BGRX image
// views, the cursor, and the error raised for a bad parameter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/rect.hpp"

namespace deskbox::streaming {

// A bad parameter from a guest or a client. `field` names it ("width", "quality", "seq"...);
// what() is "field: reason".
class ParameterError : public std::invalid_argument {
  public:
    ParameterError(std::string field, const std::string& reason)
        : std::invalid_argument(field + ": " + reason), field_(std::move(field)) {}
    const std::string& field() const { return field_; }

  private:
    std::string field_;
};

using ::deskbox::bounding;
using ::deskbox::contains;
using ::deskbox::intersect;
using ::deskbox::Rect;
using ::deskbox::to_string;

inline constexpr std::size_t kBytesPerPixel = 4;

// Read-only pixels, 4 bytes each in memory order B, G, R, X (X is ignored); row i starts at
// data + i * stride.
struct ImageView {
    const std::uint8_t* data = nullptr;
    int width = 0;
    int height = 0;
    std::size_t stride = 0;

    bool empty() const { return data == nullptr || width <= 0 || height <= 0; }
    const std::uint8_t* row(int y) const { return data + static_cast<std::size_t>(y) * stride; }
};

// The pointer image as XFixes gives it (not "CursorShape": X.h defines that as a macro):
// premultiplied ARGB32 values in native byte order (on little-endian hosts the bytes are B, G, R,
// A, like the frame).
struct CursorImage {
    int width = 0;
    int height = 0;
    int xhot = 0;
    int yhot = 0;
    std::uint64_t serial = 0;  // XFixes cursor serial: equal serials mean the same image
    std::vector<std::uint32_t> argb;
};

struct CursorState {
    std::shared_ptr<const CursorImage> shape;  // null until the guest sent one
    int x = 0;
    int y = 0;
    bool position_known = false;
    std::uint64_t version = 0;  // bumps on every shape or position change
};

// Blends the cursor over writable BGRX pixels. (origin_x, origin_y) is the screen position of
// pixel (0, 0) of the buffer, so a crop can be composited directly; parts outside are clipped.
void composite_cursor(std::uint8_t* bgrx, int width, int height, std::size_t stride, int origin_x,
                      int origin_y, const CursorState& cursor);

}  // namespace deskbox::streaming
