#include "guest-desktop/capture/cursor_watcher.hpp"

#include <X11/extensions/Xfixes.h>
#include <algorithm>

#include <cstring>

namespace deskbox::capture {

CursorWatcher::CursorWatcher(Display* display)
    : display_(display), root_(DefaultRootWindow(display)) {
    int error_base = 0;
    if (!XFixesQueryExtension(display_, &event_base_, &error_base))
        throw CaptureError("the X server has no XFIXES extension (needed for the cursor image)");
    int major = 0, minor = 0;
    XFixesQueryVersion(display_, &major, &minor);
    XFixesSelectCursorInput(display_, root_, XFixesDisplayCursorNotifyMask);
}

CursorWatcher::~CursorWatcher() {
    XFixesSelectCursorInput(display_, root_, 0);
    XFlush(display_);
}

bool CursorWatcher::handle_event(const XEvent& event) {
    if (event.type != event_base_ + XFixesCursorNotify) return false;
    shape_dirty_ = true;
    return true;
}

std::optional<CursorImage> CursorWatcher::shape_if_changed(bool force) {
    if (!shape_dirty_ && !force) return std::nullopt;
    shape_dirty_ = false;
    XFixesCursorImage* image = XFixesGetCursorImage(display_);
    if (!image) return std::nullopt;
    CursorImage shape;
    shape.width = image->width;
    shape.height = image->height;
    // Keep the hotspot on the image: X reports it on the far edge for some (blank) cursors.
    shape.xhot = std::min<int>(image->xhot, std::max<int>(image->width, 1) - 1);
    shape.yhot = std::min<int>(image->yhot, std::max<int>(image->height, 1) - 1);
    shape.serial = image->cursor_serial;
    if (!force && last_serial_ == shape.serial) {
        XFree(image);
        return std::nullopt;
    }
    // Xlib hands out each 32-bit pixel in an unsigned long (64 bits on LP64).
    std::size_t count = static_cast<std::size_t>(image->width) * image->height;
    shape.pixels.resize(count * 4);
    for (std::size_t i = 0; i < count; ++i) {
        auto argb = static_cast<std::uint32_t>(image->pixels[i]);
        std::memcpy(shape.pixels.data() + i * 4, &argb, 4);
    }
    XFree(image);
    last_serial_ = shape.serial;
    return shape;
}

std::optional<CursorPosition> CursorWatcher::position_if_changed(bool force) {
    Window root_return = 0, child = 0;
    int root_x = 0, root_y = 0, win_x = 0, win_y = 0;
    unsigned int mask = 0;
    if (!XQueryPointer(display_, root_, &root_return, &child, &root_x, &root_y, &win_x, &win_y,
                       &mask))
        return std::nullopt;  // the pointer is on another screen
    CursorPosition now{root_x, root_y};
    if (!force && last_position_ == now) return std::nullopt;
    last_position_ = now;
    return now;
}

}  // namespace deskbox::capture
