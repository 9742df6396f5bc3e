// The mirror's cursor for VNC clients: its premultiplied ARGB shape as a libvncserver rich
// cursor, its position, and which clients draw it themselves and which get it in their pixels.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "streaming/vnc/server_impl.hpp"

namespace deskbox::streaming {

namespace {

constexpr std::size_t kEchoMemory = 64;  // pointer positions remembered per client

struct CursorDeleter {
    void operator()(rfbCursor* cursor) const { rfbFreeCursor(cursor); }
};
using CursorPtr = std::unique_ptr<rfbCursor, CursorDeleter>;

// Bytes a cursor takes in one RFB message (header, XCursor colours, pixels at 4 bytes, mask).
std::size_t cursor_wire_bytes(int width, int height) {
    auto w = static_cast<std::size_t>(width), h = static_cast<std::size_t>(height);
    return 12 + 6 + w * h * 4 + (w + 7) / 8 * h;
}

// libvncserver frees cursors with free(), so every part is malloc'd.
CursorPtr make_cursor(const CursorImage& image) {
    // Larger cursors than one update buffer holds would make libvncserver give up mid-message.
    int factor = 1;
    while (cursor_wire_bytes((image.width + factor - 1) / factor,
                             (image.height + factor - 1) / factor) > UPDATE_BUF_SIZE - 64)
        ++factor;
    int width = (image.width + factor - 1) / factor;
    int height = (image.height + factor - 1) / factor;
    auto pixels = static_cast<std::size_t>(width) * height;
    int mask_stride = (width + 7) / 8;

    CursorPtr cursor(static_cast<rfbCursor*>(std::calloc(1, sizeof(rfbCursor))));
    if (!cursor) throw std::bad_alloc();
    cursor->cleanup = cursor->cleanupSource = cursor->cleanupMask = cursor->cleanupRichSource =
        TRUE;
    cursor->width = static_cast<unsigned short>(width);
    cursor->height = static_cast<unsigned short>(height);
    cursor->xhot = static_cast<unsigned short>(image.xhot / factor);
    cursor->yhot = static_cast<unsigned short>(image.yhot / factor);
    cursor->richSource = static_cast<unsigned char*>(std::malloc(pixels * 4));
    cursor->alphaSource = static_cast<unsigned char*>(std::malloc(pixels));
    cursor->mask =
        static_cast<unsigned char*>(std::calloc(static_cast<std::size_t>(mask_stride) * height, 1));
    if (!cursor->richSource || !cursor->alphaSource || !cursor->mask) throw std::bad_alloc();
    // Straight (not premultiplied) colour: the wire format has no alpha, only the 1-bit mask,
    // and libvncserver multiplies again when it blends into the pixels.
    cursor->alphaPreMultiplied = FALSE;

    for (int y = 0; y < height; ++y) {
        for (int x = 0; x < width; ++x) {
            std::uint32_t argb =
                image.argb[static_cast<std::size_t>(y * factor) * image.width + x * factor];
            std::uint32_t alpha = argb >> 24;
            auto straight = [alpha](std::uint32_t premultiplied) -> std::uint32_t {
                if (alpha == 0) return 0;
                return std::min<std::uint32_t>(255, (premultiplied * 255 + alpha / 2) / alpha);
            };
            std::uint32_t pixel = straight((argb >> 16) & 0xFF) << 16 |
                                  straight((argb >> 8) & 0xFF) << 8 | straight(argb & 0xFF);
            std::size_t index = static_cast<std::size_t>(y) * width + x;
            std::memcpy(cursor->richSource + index * 4, &pixel, 4);
            cursor->alphaSource[index] = static_cast<unsigned char>(alpha);
            if (alpha >= 128)
                cursor->mask[static_cast<std::size_t>(y) * mask_stride + x / 8] |=
                    static_cast<unsigned char>(0x80 >> (x % 8));
        }
    }
    return cursor;
}

}  // namespace

void VncServer::Impl::apply_cursor(const CursorState& cursor) {
    bool visible = cursor.shape && cursor.position_known && cursor.shape->width > 0 &&
                   cursor.shape->height > 0;
    if (!visible) {
        if (cursor_shape) {
            rfbSetCursor(screen, nullptr);  // frees ours; clients get an empty shape
            cursor_shape.reset();
        }
        return;
    }
    bool was_hidden = !cursor_shape;
    if (cursor.shape != cursor_shape) {
        CursorPtr made = make_cursor(*cursor.shape);
        rfbSetCursor(screen, made.release());  // frees the previous one (cleanup set)
        cursor_shape = cursor.shape;
    }
    if (was_hidden || cursor.x != screen->cursorX || cursor.y != screen->cursorY)
        move_cursor(cursor.x, cursor.y);
}

void VncServer::Impl::move_cursor(int x, int y) {
    x = std::clamp(x, 0, std::max(0, screen->width - 1));
    y = std::clamp(y, 0, std::max(0, screen->height - 1));
    screen->cursorX = x;
    screen->cursorY = y;
    // Clients that draw the cursor themselves (PointerPos) are told where it went, except a
    // client whose own pointer event put it there. Clients that don't notice the moved
    // screen->cursorX/Y and get the cursor redrawn in their pixels.
    for (auto& [client, client_state] : clients) {
        if (!client->enableCursorPosUpdates) continue;
        auto& echo = client_state.pointer_echo;
        auto own = std::find(echo.begin(), echo.end(), std::make_pair(x, y));
        if (own != echo.end()) {
            echo.erase(echo.begin(), own + 1);
            continue;
        }
        client->cursorWasMoved = TRUE;
    }
}

// ---- hooks ----

// Part of on_display, for each client just before libvncserver sends it an update.
void VncServer::Impl::fall_back_to_drawn_cursor(rfbClientPtr client) {
    // A client that takes cursor shapes but not positions (noVNC) would draw the agent's cursor
    // at its own mouse. Treat it as a client without cursor support, before this update decides
    // what to send: libvncserver then draws the cursor into its pixels, where the agent's
    // pointer really is.
    if (client->enableCursorShapeUpdates && !client->enableCursorPosUpdates) {
        client->enableCursorShapeUpdates = FALSE;
        client->useRichCursorEncoding = FALSE;
        client->cursorWasChanged = FALSE;
    }
}

void VncServer::Impl::remember_pointer(rfbClientPtr client, int x, int y) {
    auto& echo = state(client).pointer_echo;
    echo.emplace_back(x, y);
    if (echo.size() > kEchoMemory) echo.pop_front();
}

}  // namespace deskbox::streaming
