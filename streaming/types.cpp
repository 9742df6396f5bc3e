#include "streaming/types.hpp"

#include <algorithm>

namespace deskbox::streaming {

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
