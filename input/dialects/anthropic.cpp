// The Anthropic dialect: computer use tool_use input (computer_20241022, computer_20250124,
// computer_20251124), {"action":...}. Rules in parse.hpp.
#include "input/dialects/fields.hpp"
#include "input/keynames.hpp"

namespace deskbox::input::dialects {

namespace {

std::optional<Point> read_optional_coordinate(const Fields& f, const char* name = "coordinate") {
    const json* value = f.optional(name);
    if (!value) return std::nullopt;
    return read_pair(*value, f.field(name));
}

// Modifier keys held during a click, drag or scroll: `text` ("shift", "ctrl+shift"). The
// reference implementation of computer_20250124 (anthropic-quickstarts) reads them from `key`
// instead, so that is accepted too, but not both at once. An empty string holds nothing.
std::vector<Keysym> read_anthropic_modifiers(const Fields& f, bool allow_key_field) {
    const json* text = f.optional("text");
    const json* key = allow_key_field ? f.optional("key") : nullptr;
    if (text && key)
        throw ActionError(f.field("key"), "give the modifier keys in text or key, not both");
    const char* name = text ? "text" : "key";
    const json* value = text ? text : key;
    if (!value) return {};
    const std::string field = f.field(name);
    const std::string& keys = read_key_string(*value, field);
    if (keys.find_first_not_of(" \t") == std::string::npos) return {};
    return parse_chord(keys, field).keys;
}

ActionSpec anthropic_click(std::string_view name, Button button, int count) {
    return {name, {"coordinate", "text", "key"}, [button, count](const Fields& f) -> Action {
                Click click;
                click.at = read_optional_coordinate(f);
                click.button = button;
                click.count = count;
                click.hold_keys = read_anthropic_modifiers(f, true);
                return click;
            }};
}

Action parse_left_click_drag(const Fields& f) {
    // computer_20241022 dragged from wherever the pointer was; that needs the pointer
    // position at parse time, which one self-contained action cannot have.
    if (!f.optional("start_coordinate")) {
        throw ActionError(f.field("start_coordinate"),
                          "required for left_click_drag (dragging from the current "
                          "pointer position is not supported)");
    }
    Drag drag;
    drag.path = {*read_optional_coordinate(f, "start_coordinate"),
                 read_pair(f.required("coordinate"), f.field("coordinate"))};
    drag.button = Button::left;
    drag.hold_keys = read_anthropic_modifiers(f, false);
    return drag;
}

// scroll_direction + scroll_amount: notches along one axis.
Action parse_scroll(const Fields& f) {
    Scroll scroll;
    scroll.at = read_optional_coordinate(f);
    const std::string direction_field = f.field("scroll_direction");
    const std::string& direction = read_string(f.required("scroll_direction"), direction_field);
    const int amount = static_cast<int>(
        read_integer(f.required("scroll_amount"), f.field("scroll_amount"), 1, kMaxScrollNotches));
    if (direction == "up") {
        scroll.dy = -amount;
    } else if (direction == "down") {
        scroll.dy = amount;
    } else if (direction == "left") {
        scroll.dx = -amount;
    } else if (direction == "right") {
        scroll.dx = amount;
    } else {
        throw ActionError(direction_field, "unknown direction " + quote_for_error(direction) +
                                               " (expected up, down, left or right)");
    }
    scroll.hold_keys = read_anthropic_modifiers(f, false);
    return scroll;
}

Action parse_hold_key(const Fields& f) {
    HoldKey hold;
    hold.keys = read_chord(f, "text");
    hold.duration_ms = seconds_to_ms(f.required("duration"), f.field("duration"), kMaxHoldMs);
    return hold;
}

Action parse_wait(const Fields& f) {
    return Wait{seconds_to_ms(f.required("duration"), f.field("duration"), kMaxWaitMs)};
}

}  // namespace

const std::vector<ActionSpec>& anthropic_specs() {
    static const std::vector<ActionSpec> specs = {
        {"screenshot", {}, [](const Fields&) -> Action { return Screenshot{}; }},
        {"cursor_position", {}, [](const Fields&) -> Action { return CursorPosition{}; }},
        anthropic_click("left_click", Button::left, 1),
        anthropic_click("right_click", Button::right, 1),
        anthropic_click("middle_click", Button::middle, 1),
        anthropic_click("double_click", Button::left, 2),
        anthropic_click("triple_click", Button::left, 3),
        {"left_click_drag", {"start_coordinate", "coordinate", "text"}, parse_left_click_drag},
        {"left_mouse_down",
         {"coordinate"},
         [](const Fields& f) -> Action {
             return MouseDown{Button::left, read_optional_coordinate(f)};
         }},
        {"left_mouse_up",
         {"coordinate"},
         [](const Fields& f) -> Action {
             return MouseUp{Button::left, read_optional_coordinate(f)};
         }},
        {"mouse_move",
         {"coordinate"},
         [](const Fields& f) -> Action {
             return Move{read_pair(f.required("coordinate"), f.field("coordinate"))};
         }},
        {"scroll", {"coordinate", "scroll_direction", "scroll_amount", "text"}, parse_scroll},
        {"type", {"text"}, read_type_action},
        {"key",
         {"text"},
         [](const Fields& f) -> Action { return Key{read_key_sequence(f, "text")}; }},
        {"hold_key", {"text", "duration"}, parse_hold_key},
        {"wait", {"duration"}, parse_wait},
        // computer_20251124 (with enable_zoom): an image of region [x0, y0, x1, y1].
        {"zoom", {"region"}, read_zoom_action},
    };
    return specs;
}

}  // namespace deskbox::input::dialects
