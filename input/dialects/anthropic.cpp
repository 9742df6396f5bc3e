// The Anthropic dialect: computer use tool_use input (computer_20241022, computer_20250124,
// computer_20251124), {"action":...}, and the members of the computer toolset
// (computer_toolset_20260801), one tool_use block each. Rules in parse.hpp.
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

// start_coordinate -> coordinate. Without start_coordinate (computer_20241022) the drag starts
// where the pointer is, which the agent knows when it runs the drag.
Action parse_left_click_drag(const Fields& f) {
    Drag drag;
    const Point to = read_pair(f.required("coordinate"), f.field("coordinate"));
    if (auto from = read_optional_coordinate(f, "start_coordinate")) {
        drag.path = {*from, to};
    } else {
        drag.path = {to};
        drag.from_pointer = true;
    }
    drag.button = Button::left;
    drag.hold_keys = read_anthropic_modifiers(f, false);
    return drag;
}

// The toolset's member always names both ends.
Action parse_toolset_drag(const Fields& f) {
    f.required("start_coordinate");
    return parse_left_click_drag(f);
}

// The toolset's `key`: the keys, pressed `repeat` times (default 1).
Action parse_toolset_key(const Fields& f) {
    Key key{read_key_sequence(f, "text")};
    const json* repeat = f.optional("repeat");
    if (!repeat) return key;
    const auto times = static_cast<std::size_t>(
        read_integer(*repeat, f.field("repeat"), 1, static_cast<long long>(kMaxKeyChords)));
    if (times * key.chords.size() > kMaxKeyChords)
        throw ActionError(f.field("repeat"),
                          std::to_string(times) + " times " + std::to_string(key.chords.size()) +
                              " keys is more than " + std::to_string(kMaxKeyChords) + " presses");
    const std::vector<KeyChord> once = key.chords;
    for (std::size_t i = 1; i < times; ++i)
        key.chords.insert(key.chords.end(), once.begin(), once.end());
    return key;
}

// scroll_direction + scroll_amount: notches along one axis.
Action parse_anthropic_scroll(const Fields& f) {
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

Action parse_anthropic_hold_key(const Fields& f) {
    HoldKey hold;
    hold.keys = read_chord(f, "text");
    hold.duration_ms = seconds_to_ms(f.required("duration"), f.field("duration"), kMaxHoldMs);
    return hold;
}

Action parse_anthropic_wait(const Fields& f) {
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
        {"scroll",
         {"coordinate", "scroll_direction", "scroll_amount", "text"},
         parse_anthropic_scroll},
        {"type", {"text"}, read_type_action},
        {"key",
         {"text"},
         [](const Fields& f) -> Action { return Key{read_key_sequence(f, "text")}; }},
        {"hold_key", {"text", "duration"}, parse_anthropic_hold_key},
        {"wait", {"duration"}, parse_anthropic_wait},
        // computer_20251124 (with enable_zoom): an image of region [x0, y0, x1, y1].
        {"zoom", {"region"}, read_zoom_action},
    };
    return specs;
}

// The members of computer_toolset_20260801, by the Anthropic SDKs' Computer*Input types: the
// tool versions' actions, but the clicks take no `key`, left_click_drag needs both ends,
// left_mouse_down / left_mouse_up act where the pointer is, and `key` takes `repeat`.
const std::vector<ActionSpec>& anthropic_toolset_specs() {
    static const std::vector<ActionSpec> specs = [] {
        std::vector<ActionSpec> members;
        for (const ActionSpec& action : anthropic_specs()) {
            const std::string_view name = action.name;
            if (name == "left_click_drag")
                members.push_back(
                    {name, {"start_coordinate", "coordinate", "text"}, parse_toolset_drag});
            else if (name == "key")
                members.push_back({name, {"text", "repeat"}, parse_toolset_key});
            else if (name == "left_mouse_down" || name == "left_mouse_up")
                members.push_back({name, {}, action.parse});
            else if (name.ends_with("_click"))  // modifiers only in `text`
                members.push_back({name, {"coordinate", "text"}, action.parse});
            else
                members.push_back(action);
        }
        return members;
    }();
    return specs;
}

}  // namespace deskbox::input::dialects
