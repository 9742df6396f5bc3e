// What the agent needs of a screen capture, apart from how it is done: callbacks for damage and
// the cursor, start/stop, and sync/full_frame (capture now, from another thread). The X11
// implementation is CaptureEngine; tests use a fake (tests/support/fake_capture.hpp), as the
// input side does with input::Injector.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "guest-desktop/capture/types.hpp"

namespace deskbox::capture {

// One changed rectangle; `pixels` is width*height BGRX pixels, rows tightly packed.
struct DamageRect {
    std::uint64_t seq = 0;  // 1, 2, 3... per capture, across start/stop
    int x = 0;
    int y = 0;
    int width = 0;
    int height = 0;
    std::string pixels;
};

struct CaptureCallbacks {
    // All are called on the capture's thread; set them before start().
    std::function<void(DamageRect&&)> on_damage;
    std::function<void(CursorImage&&)> on_cursor_shape;
    std::function<void(CursorPosition)> on_cursor_position;
    std::function<void(const std::string&)> on_error;  // recoverable trouble, e.g. a failed grab
};

class ScreenCapture {
  public:
    virtual ~ScreenCapture() = default;

    virtual void set_callbacks(CaptureCallbacks callbacks) = 0;
    // Starts capturing: first one rect covering the screen, the cursor shape and position.
    virtual void start() = 0;
    // Stops; pending sync/full calls fail. Not from a callback.
    virtual void stop() = 0;
    // Captures now: every change the display has processed before this call is emitted
    // (on_damage returns before this does); returns the seq of the last rect emitted so far.
    // Throws CaptureError on timeout or once stopped.
    virtual std::uint64_t sync(std::chrono::milliseconds timeout = std::chrono::seconds(5)) = 0;
    // Like sync, but emits one rect covering the whole screen.
    virtual std::uint64_t full_frame(
        std::chrono::milliseconds timeout = std::chrono::seconds(5)) = 0;
    // Captures per second at most (sync/full excepted). Throws CaptureError outside 1..1000.
    virtual void set_max_fps(int max_fps) = 0;
    virtual int width() const = 0;
    virtual int height() const = 0;
};

}  // namespace deskbox::capture
