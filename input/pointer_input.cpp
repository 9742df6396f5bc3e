#include "input/pointer_input.hpp"

#include <algorithm>

namespace deskbox::input {

using input::Button;

const ButtonMap& rfb_buttons() {
    static const ButtonMap map{{{1, Button::left},
                                {2, Button::middle},
                                {4, Button::right},
                                {128, Button::back},
                                {256, Button::forward}},
                               8,
                               16,
                               32,
                               64};
    return map;
}

const ButtonMap& dom_buttons() {
    static const ButtonMap map{{{1, Button::left},
                                {2, Button::right},
                                {4, Button::middle},
                                {8, Button::back},
                                {16, Button::forward}},
                               0,
                               0,
                               0,
                               0};
    return map;
}

input::Point PointerInput::clamp(int x, int y) const {
    return {std::clamp(x, 0, width_ - 1), std::clamp(y, 0, height_ - 1)};
}

std::vector<input::Action> PointerInput::pointer(int x, int y, unsigned mask) {
    std::vector<input::Action> out;
    const input::Point at = clamp(x, y);
    if (!last_ || !(*last_ == at)) out.push_back(input::Move{at});
    last_ = at;
    for (const auto& [bit, button] : map_.buttons) {
        const bool was = held_mask_ & bit, is = mask & bit;
        if (is && !was) out.push_back(input::MouseDown{button, std::nullopt});
        if (!is && was) out.push_back(input::MouseUp{button, std::nullopt});
    }
    // Wheel bits: a notch per press (the bit going from clear to set).
    const auto notch = [&](unsigned bit, int dx, int dy) {
        if (bit && (mask & bit) && !(held_mask_ & bit))
            out.push_back(input::Scroll{std::nullopt, dx, dy, {}});
    };
    notch(map_.wheel_up, 0, -1);
    notch(map_.wheel_down, 0, 1);
    notch(map_.wheel_left, -1, 0);
    notch(map_.wheel_right, 1, 0);
    held_mask_ = mask;
    return out;
}

std::vector<input::Action> PointerInput::wheel(int x, int y, int dx, int dy) {
    std::vector<input::Action> out;
    dx = std::clamp(dx, -input::kMaxScrollNotches, input::kMaxScrollNotches);
    dy = std::clamp(dy, -input::kMaxScrollNotches, input::kMaxScrollNotches);
    if (dx == 0 && dy == 0) return out;
    const input::Point at = clamp(x, y);
    last_ = at;
    out.push_back(input::Scroll{at, dx, dy, {}});
    return out;
}

std::vector<input::Action> PointerInput::key(std::uint32_t keysym, bool down) {
    std::vector<input::Action> out;
    if (keysym == 0 || keysym > 0x1fffffff) return out;
    auto it = std::find(held_keys_.begin(), held_keys_.end(), keysym);
    if (down) {
        // More keys than hands hold is a flood: not remembered, not pressed.
        if (it == held_keys_.end() && held_keys_.size() >= kMaxHeldKeys) return out;
        if (it == held_keys_.end()) held_keys_.push_back(keysym);
        out.push_back(input::KeyDown{keysym});
    } else if (it != held_keys_.end()) {
        held_keys_.erase(it);
        out.push_back(input::KeyUp{keysym});
    }
    return out;
}

std::vector<input::Action> PointerInput::release_all() {
    std::vector<input::Action> out;
    for (const auto& [bit, button] : map_.buttons)
        if (held_mask_ & bit) out.push_back(input::MouseUp{button, std::nullopt});
    held_mask_ = 0;
    for (auto it = held_keys_.rbegin(); it != held_keys_.rend(); ++it)
        out.push_back(input::KeyUp{*it});
    held_keys_.clear();
    return out;
}

}  // namespace deskbox::input
