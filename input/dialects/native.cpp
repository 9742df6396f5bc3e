// The native dialect: {"type":"click",...}, the OpenAPI document's Native* schemas (rules in
// parse.hpp).
#include "input/dialects/fields.hpp"
#include "input/keynames.hpp"

namespace deskbox::input::dialects {

namespace {

Button read_native_button(const Fields& f) {
    const json* value = f.optional("button");
    if (!value) return Button::left;
    const std::string& name = read_string(*value, f.field("button"));
    if (name == "left") return Button::left;
    if (name == "right") return Button::right;
    if (name == "middle") return Button::middle;
    if (name == "back") return Button::back;
    if (name == "forward") return Button::forward;
    throw ActionError(f.field("button"), "unknown button " + quote_for_error(name) +
                                             " (expected left, right, middle, back or forward)");
}

std::optional<Point> read_optional_xy(const Fields& f) {
    const json* x = f.optional("x");
    const json* y = f.optional("y");
    if (!x && !y) return std::nullopt;
    if (!x) throw ActionError(f.field("x"), "required when y is given");
    if (!y) throw ActionError(f.field("y"), "required when x is given");
    return Point{read_coordinate(*x, f.field("x")), read_coordinate(*y, f.field("y"))};
}

// "target": an object (the server checks what is in it); not together with x / y.
std::optional<Target> read_target(const Fields& f) {
    const json* value = f.optional("target");
    if (!value) return std::nullopt;
    if (!value->is_object())
        throw ActionError(f.field("target"), "expected an object, " + got(*value));
    for (const char* axis : {"x", "y"})
        if (f.optional(axis)) throw ActionError(f.field(axis), "not allowed together with target");
    return Target{value->dump()};
}

std::vector<Keysym> read_native_hold_keys(const Fields& f) {
    const json* value = f.optional("hold_keys");
    return value ? read_key_list(*value, f.field("hold_keys"), KeyCase::exact)
                 : std::vector<Keysym>{};
}

int read_scroll_notches(const Fields& f, const char* name) {
    const json* value = f.optional(name);
    return value ? static_cast<int>(
                       read_integer(*value, f.field(name), -kMaxScrollNotches, kMaxScrollNotches))
                 : 0;
}

// key_down / key_up: exactly one key, no chord.
Keysym read_single_key(const Fields& f) {
    const KeyChord chord = read_chord(f, "key");
    if (chord.keys.size() != 1)
        throw ActionError(f.field("key"),
                          "expected one key, got a chord of " + std::to_string(chord.keys.size()));
    return chord.keys.front();
}

// ---- one parser per action with more than a line to it ----

Action parse_click(const Fields& f) {
    Click click;
    click.target = read_target(f);
    click.at = read_optional_xy(f);
    click.button = read_native_button(f);
    if (const json* count = f.optional("count")) {
        click.count = static_cast<int>(read_integer(*count, f.field("count"), 1, 3));
    }
    click.hold_keys = read_native_hold_keys(f);
    return click;
}

Action parse_move(const Fields& f) {
    if (auto target = read_target(f))
        return Move{Point{}, read_native_hold_keys(f), std::move(target)};
    return Move{read_required_xy(f), read_native_hold_keys(f)};
}

Action parse_drag(const Fields& f) {
    Drag drag;
    if (const json* from_pointer = f.optional("from_pointer")) {
        if (!from_pointer->is_boolean())
            throw ActionError(f.field("from_pointer"),
                              "expected true or false, " + got(*from_pointer));
        drag.from_pointer = from_pointer->get<bool>();
    }
    drag.path = read_path(f, read_pair, drag.from_pointer ? 1 : 2);
    drag.button = read_native_button(f);
    drag.hold_keys = read_native_hold_keys(f);
    return drag;
}

Action parse_scroll(const Fields& f) {
    Scroll scroll;
    scroll.target = read_target(f);
    scroll.at = read_optional_xy(f);
    scroll.dx = read_scroll_notches(f, "dx");
    scroll.dy = read_scroll_notches(f, "dy");
    if (scroll.dx == 0 && scroll.dy == 0) {
        throw ActionError(f.field("dy"), "dx and dy are both 0: nothing to scroll");
    }
    scroll.hold_keys = read_native_hold_keys(f);
    return scroll;
}

Action parse_hold_key(const Fields& f) {
    HoldKey hold;
    hold.keys = read_chord(f, "keys");
    hold.duration_ms = static_cast<int>(
        read_integer(f.required("duration_ms"), f.field("duration_ms"), 0, kMaxHoldMs));
    return hold;
}

Action parse_wait(const Fields& f) {
    return Wait{static_cast<int>(
        read_integer(f.required("duration_ms"), f.field("duration_ms"), 0, kMaxWaitMs))};
}

}  // namespace

const std::vector<ActionSpec>& native_specs() {
    static const std::vector<ActionSpec> specs = {
        {"click", {"x", "y", "button", "count", "hold_keys", "target"}, parse_click},
        {"move", {"x", "y", "hold_keys", "target"}, parse_move},
        {"mouse_down",
         {"button", "x", "y", "target"},
         [](const Fields& f) -> Action {
             auto target = read_target(f);
             return MouseDown{read_native_button(f), read_optional_xy(f), std::move(target)};
         }},
        {"mouse_up",
         {"button", "x", "y", "target"},
         [](const Fields& f) -> Action {
             auto target = read_target(f);
             return MouseUp{read_native_button(f), read_optional_xy(f), std::move(target)};
         }},
        {"drag", {"path", "button", "hold_keys", "from_pointer"}, parse_drag},
        {"scroll", {"x", "y", "dx", "dy", "hold_keys", "target"}, parse_scroll},
        {"type", {"text"}, read_type_action},
        {"key",
         {"keys"},
         [](const Fields& f) -> Action { return Key{read_key_sequence(f, "keys")}; }},
        {"hold_key", {"keys", "duration_ms"}, parse_hold_key},
        {"key_down",
         {"key"},
         [](const Fields& f) -> Action { return KeyDown{read_single_key(f)}; }},
        {"key_up", {"key"}, [](const Fields& f) -> Action { return KeyUp{read_single_key(f)}; }},
        {"wait", {"duration_ms"}, parse_wait},
        {"cursor_position", {}, [](const Fields&) -> Action { return CursorPosition{}; }},
        {"screenshot", {}, [](const Fields&) -> Action { return Screenshot{}; }},
        {"zoom", {"region"}, read_zoom_action},
    };
    return specs;
}

}  // namespace deskbox::input::dialects
