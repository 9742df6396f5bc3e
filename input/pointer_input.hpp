// Turns the pointer and key events of viewers and VNC clients (host side) -- absolute position plus
// a button mask, key down/up -- into input actions for the sandbox's input path. One per
// connection: it remembers the buttons that connection holds, so a mask change becomes exactly
// the presses and releases it means, and releases everything when the connection goes.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "input/actions.hpp"

namespace deskbox::input {

// What each bit of a connection's button mask means.
struct ButtonMap {
    // Bits that are buttons held down, and the X button each is.
    std::vector<std::pair<unsigned, input::Button>> buttons;
    // Bits that are wheel notches (RFB sends a press of "button 4/5/6/7" per notch).
    unsigned wheel_up = 0, wheel_down = 0, wheel_left = 0, wheel_right = 0;
};
// RFB: 1 left, 2 middle, 4 right, 8/16 wheel up/down, 32/64 wheel left/right, 128/256 back/fwd.
const ButtonMap& rfb_buttons();
// DOM MouseEvent.buttons: 1 left, 2 right, 4 middle, 8 back, 16 forward (wheel comes apart).
const ButtonMap& dom_buttons();

class PointerInput {
  public:
    static constexpr std::size_t kMaxHeldKeys = 32;  // distinct keys down at once
    PointerInput(const ButtonMap& map, int screen_width, int screen_height)
        : map_(map), width_(screen_width), height_(screen_height) {}

    // A pointer event at (x, y) (clamped onto the screen) with `mask` held.
    std::vector<input::Action> pointer(int x, int y, unsigned mask);
    // Wheel notches at (x, y): + is down / right.
    std::vector<input::Action> wheel(int x, int y, int dx, int dy);
    // Key down/up by keysym (0 and out-of-range keysyms give nothing).
    std::vector<input::Action> key(std::uint32_t keysym, bool down);
    // Releases every button and key this connection still holds (it is going away).
    std::vector<input::Action> release_all();

  private:
    input::Point clamp(int x, int y) const;

    const ButtonMap& map_;
    int width_, height_;
    unsigned held_mask_ = 0;
    std::optional<input::Point> last_;
    std::vector<std::uint32_t> held_keys_;
};

}  // namespace deskbox::input
