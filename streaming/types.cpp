#include "streaming/types.hpp"

#include <algorithm>

namespace deskbox::streaming {

Rect intersect(const Rect& a, const Rect& b) {
    int x0 = std::max(a.x, b.x);
    int y0 = std::max(a.y, b.y);
    int x1 = std::min(a.right(), b.right());
    int y1 = std::min(a.bottom(), b.bottom());
    if (x1 <= x0 || y1 <= y0) return {};
    return {x0, y0, x1 - x0, y1 - y0};
}

Rect bounding(const Rect& a, const Rect& b) {
    if (a.empty()) return b;
    if (b.empty()) return a;
    int x0 = std::min(a.x, b.x);
    int y0 = std::min(a.y, b.y);
    int x1 = std::max(a.right(), b.right());
    int y1 = std::max(a.bottom(), b.bottom());
    return {x0, y0, x1 - x0, y1 - y0};
}

bool contains(const Rect& outer, const Rect& inner) {
    return inner.x >= outer.x && inner.y >= outer.y && inner.right() <= outer.right() &&
           inner.bottom() <= outer.bottom();
}

std::string to_string(const Rect& rect) {
    return std::to_string(rect.width) + "x" + std::to_string(rect.height) + "+" +
           std::to_string(rect.x) + "+" + std::to_string(rect.y);
}

void composite_cursor(std::uint8_t* bgrx, int width, int height, std::size_t stride, int origin_x,
                      int origin_y, const CursorState& cursor) {
    const CursorImage* shape = cursor.shape.get();
    if (!shape || !cursor.position_known || bgrx == nullptr) return;
    // The cursor's top-left in buffer coordinates.
    int left = cursor.x - shape->xhot - origin_x;
    int top = cursor.y - shape->yhot - origin_y;
    Rect visible = intersect({left, top, shape->width, shape->height}, {0, 0, width, height});
    if (visible.empty()) return;
    for (int y = visible.y; y < visible.bottom(); ++y) {
        const std::uint32_t* src = shape->argb.data() +
                                   static_cast<std::size_t>(y - top) * shape->width +
                                   (visible.x - left);
        std::uint8_t* dst =
            bgrx + static_cast<std::size_t>(y) * stride + visible.x * kBytesPerPixel;
        for (int x = 0; x < visible.width; ++x, ++src, dst += kBytesPerPixel) {
            std::uint32_t p = *src;
            std::uint32_t alpha = p >> 24;
            if (alpha == 0 && (p & 0xffffffu) == 0) continue;
            std::uint32_t keep = 255 - alpha;
            // Premultiplied "over": out = src + dst * (1 - alpha), rounded; saturate in case a
            // guest sends colour above its alpha.
            auto blend = [keep](std::uint32_t s, std::uint8_t d) {
                std::uint32_t v = s + (d * keep + 127) / 255;
                return static_cast<std::uint8_t>(v > 255 ? 255 : v);
            };
            dst[0] = blend(p & 0xff, dst[0]);
            dst[1] = blend((p >> 8) & 0xff, dst[1]);
            dst[2] = blend((p >> 16) & 0xff, dst[2]);
        }
    }
}

}  // namespace deskbox::streaming
