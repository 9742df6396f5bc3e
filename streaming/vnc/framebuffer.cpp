// Mirror frames into libvncserver's framebuffer: damage rects copied row by row, a new size
// reallocating it, and every client told the size it has to know.
#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>

#include "streaming/vnc/server_impl.hpp"

// After rfb.h (in server_impl.hpp), which defines the rfbBool it uses; it declares C functions
// without saying so.
extern "C" {
#include <rfb/rfbregion.h>
}

namespace deskbox::streaming {

static_assert(std::endian::native == std::endian::little,
              "the BGRX server pixel format below assumes a little-endian host");

void VncServer::Impl::set_bgrx_format(rfbScreenInfoPtr screen) {
    rfbPixelFormat& format = screen->serverFormat;
    format.bitsPerPixel = 32;
    format.depth = 24;
    format.bigEndian = FALSE;
    format.trueColour = TRUE;
    format.redMax = format.greenMax = format.blueMax = 255;
    // Little-endian pixel value B | G << 8 | R << 16: memory order B, G, R, X.
    format.redShift = 16;
    format.greenShift = 8;
    format.blueShift = 0;
}

void VncServer::Impl::apply(const FrameUpdate& update) {
    if (update.frame_changed || update.cursor_changed) counters.mirror_updates.fetch_add(1);
    if (update.frame_changed && update.snapshot.frame) apply_frame(update.snapshot, update.changes);
    if (update.cursor_changed || update.frame_changed) apply_cursor(update.snapshot.cursor);
    if (update.closed && !mirror_closed) {
        mirror_closed = true;
        counters.mirror_closed.store(true);
        disconnect_all();
    }
}

void VncServer::Impl::apply_frame(const FrameSnapshot& snapshot, const FrameChanges& changes) {
    const Frame& frame = *snapshot.frame;
    if (frame.width != screen->width || frame.height != screen->height) {
        resize_framebuffer(frame);
    } else if (changes.full || !have_frame || snapshot.generation != generation) {
        std::memcpy(framebuffer.data(), frame.pixels.data(), framebuffer.size());
        rfbMarkRectAsModified(screen, 0, 0, frame.width, frame.height);
        counters.rects_copied.fetch_add(1);
    } else {
        const Rect screen_rect{0, 0, frame.width, frame.height};
        for (const Rect& changed : changes.rects) {
            Rect rect = intersect(changed, screen_rect);
            if (rect.empty()) continue;
            std::size_t row_bytes = static_cast<std::size_t>(rect.width) * kBytesPerPixel;
            for (int y = rect.y; y < rect.bottom(); ++y) {
                std::size_t offset =
                    (static_cast<std::size_t>(y) * frame.width + rect.x) * kBytesPerPixel;
                std::memcpy(framebuffer.data() + offset, frame.pixels.data() + offset, row_bytes);
            }
            rfbMarkRectAsModified(screen, rect.x, rect.y, rect.right(), rect.bottom());
            counters.rects_copied.fetch_add(1);
        }
    }
    have_frame = true;
    generation = snapshot.generation;
}

void VncServer::Impl::resize_framebuffer(const Frame& frame) {
    std::vector<std::uint8_t> fresh(frame.pixels.begin(), frame.pixels.end());
    // Tells NewFBSize clients the new size and marks everything modified. It also resets the
    // server pixel format to libvncserver's RGB default, so BGRX is put back and every client's
    // translation rebuilt before anything is sent.
    rfbNewFramebuffer(screen, reinterpret_cast<char*>(fresh.data()), frame.width, frame.height, 8,
                      3, 4);
    set_bgrx_format(screen);
    for (const auto& entry : clients) screen->setTranslateFunction(entry.first);
    framebuffer.swap(fresh);  // the old pixels go only now that libvncserver stopped using them
    if (have_frame) counters.resizes.fetch_add(1);
    counters.rects_copied.fetch_add(1);
}

void VncServer::Impl::after_events() {
    bool closed_any = false;
    for (auto& [client, client_state] : clients) {
        if (client->sock == RFB_INVALID_SOCKET) continue;
        // ServerInit happens inside rfbProcessEvents and resizes only outside it, so a client
        // that just got there was told the current size.
        if (client_state.known_width == 0 && client->state == _rfbClientRec::RFB_NORMAL) {
            client_state.known_width = screen->width;
            client_state.known_height = screen->height;
        }
        // It would show a clipped or garbled picture; a viewer can reconnect.
        if (client_state.cannot_resize) {
            rfbCloseClient(client);
            closed_any = true;
        }
    }
    if (closed_any) rfbProcessEvents(screen, 0);  // frees them now, not at the next wake-up
}

// ---- hooks ----

// Called for each client just before libvncserver sends it an update.
void VncServer::Impl::on_display(rfbClientPtr client) {
    drop_empty_rects(client->modifiedRegion);
    drop_empty_rects(client->requestedRegion);
    drop_empty_rects(client->copyRegion);
    of(client).announce_resize(client);
    fall_back_to_drawn_cursor(client);
}

namespace {

struct RegionDeleter {
    void operator()(sraRegion* region) const { sraRgnDestroy(region); }
};
struct IteratorDeleter {
    void operator()(sraRectangleIterator* iterator) const { sraRgnReleaseIterator(iterator); }
};

}  // namespace

void VncServer::Impl::drop_empty_rects(sraRegion* region) {
    // A FramebufferUpdateRequest of width or height 0 puts a rect of that size into the
    // client's regions (libvncserver 0.9.14 does not drop it). With Zlib or Ultra preferred,
    // rfbSendFramebufferUpdate then divides by the rect's width: SIGFPE, the whole process
    // gone, from one logged-in client. Rebuild the region without such rects first.
    if (!region) return;
    bool found = false;
    std::unique_ptr<sraRegion, RegionDeleter> kept(sraRgnCreate());
    {
        std::unique_ptr<sraRectangleIterator, IteratorDeleter> rects(sraRgnGetIterator(region));
        sraRect rect;
        while (rects && sraRgnIteratorNext(rects.get(), &rect)) {
            if (rect.x2 <= rect.x1 || rect.y2 <= rect.y1) {
                found = true;
                continue;
            }
            std::unique_ptr<sraRegion, RegionDeleter> one(
                sraRgnCreateRect(rect.x1, rect.y1, rect.x2, rect.y2));
            sraRgnOr(kept.get(), one.get());
        }
    }
    if (!found) return;
    sraRgnMakeEmpty(region);
    sraRgnOr(region, kept.get());
}

void VncServer::Impl::announce_resize(rfbClientPtr client) {
    // libvncserver announces a new size only to clients that had asked for NewFBSize when the
    // framebuffer changed; one whose SetEncodings came after (a resize right after it
    // connected) would keep the old size. Announce it now, before this update's pixels.
    ClientState& client_state = state(client);
    if (client_state.known_width != 0 && (client_state.known_width != screen->width ||
                                          client_state.known_height != screen->height)) {
        if (client->useNewFBSize)
            client->newFBSizePending = TRUE;
        else
            client_state.cannot_resize = true;
        client_state.known_width = screen->width;
        client_state.known_height = screen->height;
    }
}

}  // namespace deskbox::streaming
