// The OpenAI dialect: computer-use-preview computer_call.action, {"type":...}. Rules in
// parse.hpp.
#include <algorithm>
#include <cstdlib>

#include "input/dialects/fields.hpp"
#include "input/keynames.hpp"

namespace deskbox::input::dialects {

namespace {

// OpenAI's `wait` carries no duration; its sample app waits 1000 ms.
constexpr int kOpenAiWaitMs = 1000;
// OpenAI's scroll_x/scroll_y are pixels (the sample app passes them to window.scrollBy), X scrolls
// in wheel notches. One notch scrolls about 100 px in Chromium and a few lines elsewhere, so
// notches = round(px / 100), halves away from zero, and at least one for any nonzero distance.
constexpr long long kOpenAiPixelsPerNotch = 100;

std::vector<Keysym> read_openai_keys(const Fields& f) {
    const json* value = f.optional("keys");
    return value ? read_key_list(*value, f.field("keys"), KeyCase::openai) : std::vector<Keysym>{};
}

// "wheel" is the middle button.
Button read_openai_button(const Fields& f) {
    const std::string field = f.field("button");
    const std::string& button = read_string(f.required("button"), field);
    if (button == "left") return Button::left;
    if (button == "right") return Button::right;
    if (button == "wheel") return Button::middle;
    if (button == "back") return Button::back;
    if (button == "forward") return Button::forward;
    throw ActionError(field, "unknown button " + quote_for_error(button) +
                                 " (expected left, right, wheel, back or forward)");
}

Point read_openai_point(const json& value, const std::string& field) {
    if (!value.is_object()) throw ActionError(field, "expected an object {x, y}, " + got(value));
    for (const auto& [key, _] : value.items()) {
        if (key != "x" && key != "y") {
            throw ActionError(join(field, key), "not a field of a path point (allowed: x, y)");
        }
    }
    if (!value.contains("x")) throw ActionError(join(field, "x"), "required");
    if (!value.contains("y")) throw ActionError(join(field, "y"), "required");
    return {read_coordinate(value["x"], join(field, "x")),
            read_coordinate(value["y"], join(field, "y"))};
}

int pixels_to_notches(const json& value, const std::string& field) {
    // Wide bounds here; the notch limit below gives the meaningful error.
    const long long pixels = read_integer(value, field, -1'000'000'000, 1'000'000'000);
    if (pixels == 0) return 0;
    const long long magnitude = std::max<long long>(
        1, (std::llabs(pixels) + kOpenAiPixelsPerNotch / 2) / kOpenAiPixelsPerNotch);
    if (magnitude > kMaxScrollNotches) {
        throw ActionError(field, std::to_string(pixels) + " px is " + std::to_string(magnitude) +
                                     " wheel notches at " + std::to_string(kOpenAiPixelsPerNotch) +
                                     " px per notch; at most " + std::to_string(kMaxScrollNotches) +
                                     " allowed");
    }
    return static_cast<int>(pixels < 0 ? -magnitude : magnitude);
}

// ---- one parser per action with more than a line to it ----

Action parse_openai_click(const Fields& f) {
    Click click;
    click.button = read_openai_button(f);
    click.at = read_required_xy(f);
    click.hold_keys = read_openai_keys(f);
    return click;
}

Action parse_openai_double_click(const Fields& f) {
    Click click;
    click.at = read_required_xy(f);
    click.count = 2;
    click.hold_keys = read_openai_keys(f);
    return click;
}

Action parse_openai_scroll(const Fields& f) {
    Scroll scroll;
    scroll.at = read_required_xy(f);
    scroll.dx = pixels_to_notches(f.required("scroll_x"), f.field("scroll_x"));
    scroll.dy = pixels_to_notches(f.required("scroll_y"), f.field("scroll_y"));
    if (scroll.dx == 0 && scroll.dy == 0) {
        throw ActionError(f.field("scroll_y"),
                          "scroll_x and scroll_y are both 0: nothing to scroll");
    }
    scroll.hold_keys = read_openai_keys(f);
    return scroll;
}

// One chord: ["CTRL", "C"].
Action parse_openai_keypress(const Fields& f) {
    const std::string field = f.field("keys");
    KeyChord chord{read_key_list(f.required("keys"), field, KeyCase::openai)};
    if (chord.keys.empty()) throw ActionError(field, "must name at least one key");
    return Key{{std::move(chord)}};
}

Action parse_openai_drag(const Fields& f) {
    Drag drag;
    drag.path = read_path(f, read_openai_point);
    drag.hold_keys = read_openai_keys(f);
    return drag;
}

}  // namespace

const std::vector<ActionSpec>& openai_specs() {
    static const std::vector<ActionSpec> specs = {
        {"click", {"button", "x", "y", "keys"}, parse_openai_click},
        {"double_click", {"x", "y", "keys"}, parse_openai_double_click},
        {"scroll", {"x", "y", "scroll_x", "scroll_y", "keys"}, parse_openai_scroll},
        {"keypress", {"keys"}, parse_openai_keypress},
        {"type", {"text"}, read_type_action},
        {"wait", {}, [](const Fields&) -> Action { return Wait{kOpenAiWaitMs}; }},
        {"screenshot", {}, [](const Fields&) -> Action { return Screenshot{}; }},
        {"move",
         {"x", "y", "keys"},
         [](const Fields& f) -> Action {
             return Move{read_required_xy(f), read_openai_keys(f)};
         }},
        {"drag", {"path", "keys"}, parse_openai_drag},
    };
    return specs;
}

}  // namespace deskbox::input::dialects
