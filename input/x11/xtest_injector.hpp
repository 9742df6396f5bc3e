// Executes actions on an X display with XTest. Each call returns after the X server has
// processed the events (XSync). Modifiers and buttons it pressed are released even on failure.
//
// Keys: a keysym is typed with a keycode of the current keymap and group (keymap.hpp), pressing
// Shift or Level3/Level5 keys as the level needs; keysyms the layout lacks (é on "us", 日, 😀)
// go to spare keycodes remapped on demand, in batches, and reused only once clients have read
// the events that used them (spare_keycodes.hpp). Typing that needs no reuse is never slowed
// down. Spare keycodes are emptied again on destruction. A client whose Xlib has not yet taken
// up XKB (it does so lazily, at the first key it decodes) misses keymap changes made before
// that: toolkits take XKB up at start, and the tests' event window does too.
//
// Text is typed with the user's held and locked modifiers (Shift, CapsLock) lifted for the
// action and restored after it, so CapsLock does not turn "a" into "A".
//
// Not thread-safe: one injector per desktop, used by one thread at a time.
#pragma once

#include <X11/Xlib.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "input/injector.hpp"

namespace deskbox::input {

struct XTestInjectorOptions {
    // Margin between the modelled client having read the last event of a spare keycode and
    // mapping that keycode to another keysym.
    // Measured on 2 loaded cores (load average 10): 50 ms + 0.5 ms/key let a test client fall
    // behind; 100 ms + 1 ms/key did not.
    std::chrono::milliseconds spare_reuse_interval{100};
    // How long the slowest client we wait for takes per key press (1 ms: 1000 keys/s).
    std::chrono::microseconds client_key_cost{1000};
};

class XTestInjector final : public Injector {
  public:
    // Opens its own connection to `display_name` (an x11::XConnection; losing the X server ends
    // the process), so keymap notifications never consume another client's events.
    // Throws std::runtime_error if the display cannot be opened or XTest/XKB are missing.
    explicit XTestInjector(const std::string& display_name, XTestInjectorOptions options = {});
    ~XTestInjector() override;

    // Coordinates off the screen are an ActionError: XTest would clamp them silently. An X
    // protocol error the action's requests raised (caught by the X layer's error trap) is a
    // std::runtime_error once the action has ended, keys and buttons released.
    nlohmann::json execute(const Action& action) override;
    Point cursor_position() override;

    // The keycodes the injector may remap (empty in the keymap when it started).
    std::vector<KeyCode> spare_keycodes() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace deskbox::input
