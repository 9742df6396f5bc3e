// The pointer's image (XFixes; the cursor is not part of captured pixels) and position.
#pragma once

#include <X11/Xlib.h>

#include <cstdint>
#include <optional>
#include <string>

#include "guest-desktop/capture/types.hpp"

namespace deskbox::capture {

class CursorWatcher {
  public:
    // Throws CaptureError if XFIXES is missing.
    explicit CursorWatcher(Display* display);
    ~CursorWatcher();
    CursorWatcher(const CursorWatcher&) = delete;
    CursorWatcher& operator=(const CursorWatcher&) = delete;

    // True if the event says the displayed cursor changed; the next
    // shape_if_changed() then fetches it.
    bool handle_event(const XEvent& event);
    // The current image if it differs from the last one returned (the first call always
    // returns one).
    std::optional<CursorImage> shape_if_changed(bool force = false);
    // The position if it differs from the last one returned (the first call always does).
    std::optional<CursorPosition> position_if_changed(bool force = false);
    std::optional<CursorPosition> last_position() const { return last_position_; }

  private:
    Display* display_;
    Window root_;
    int event_base_ = 0;
    bool shape_dirty_ = true;
    std::optional<std::uint64_t> last_serial_;
    std::optional<CursorPosition> last_position_;
};

}  // namespace deskbox::capture
