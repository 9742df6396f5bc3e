// The dialect rules are documented in parse.hpp.
#include "input/parse.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>

#include "common/utf8.hpp"
#include "input/keynames.hpp"

namespace deskbox::input {

namespace {

using nlohmann::json;

constexpr long long kMaxCoordinate = 32767;
// OpenAI's `wait` carries no duration; its sample app waits 1000 ms.
constexpr int kOpenAiWaitMs = 1000;
// OpenAI's scroll_x/scroll_y are pixels (the sample app passes them to window.scrollBy), X scrolls
// in wheel notches. One notch scrolls about 100 px in Chromium and a few lines elsewhere, so
// notches = round(px / 100), halves away from zero, and at least one for any nonzero distance.
constexpr long long kOpenAiPixelsPerNotch = 100;
// Keys held around one click or scroll.
constexpr std::size_t kMaxHeldKeys = 16;

std::string join(const std::string& prefix, std::string_view name) {
    return prefix.empty() ? std::string(name) : prefix + "." + std::string(name);
}

std::string indexed(const std::string& field, std::size_t index) {
    return field + "[" + std::to_string(index) + "]";
}

std::string got(const json& value) {
    return std::string("got ") + value.type_name();
}

std::string join_names(const std::vector<std::string_view>& names) {
    std::string out;
    for (const auto& name : names) {
        if (!out.empty()) out += ", ";
        out += name;
    }
    return out;
}

// ---- value readers: each takes the full field path for its errors ----

long long read_integer(const json& value, const std::string& field, long long min, long long max) {
    long long result = 0;
    if (value.is_number_unsigned()) {
        const auto unsigned_value = value.get<std::uint64_t>();
        result = unsigned_value > static_cast<std::uint64_t>(std::numeric_limits<long long>::max())
                     ? std::numeric_limits<long long>::max()
                     : static_cast<long long>(unsigned_value);
    } else if (value.is_number_integer()) {
        result = value.get<std::int64_t>();
    } else if (value.is_number_float()) {
        const double d = value.get<double>();
        if (!std::isfinite(d) || std::trunc(d) != d) {
            throw ActionError(field, "expected an integer, got " + value.dump());
        }
        if (d < static_cast<double>(min) || d > static_cast<double>(max)) {
            throw ActionError(field, "must be between " + std::to_string(min) + " and " +
                                         std::to_string(max) + ", got " + value.dump());
        }
        result = static_cast<long long>(d);
    } else {
        throw ActionError(field, "expected an integer, " + got(value));
    }
    if (result < min || result > max) {
        throw ActionError(field, "must be between " + std::to_string(min) + " and " +
                                     std::to_string(max) + ", got " + value.dump());
    }
    return result;
}

int read_coordinate(const json& value, const std::string& field) {
    return static_cast<int>(read_integer(value, field, 0, kMaxCoordinate));
}

const std::string& read_string(const json& value, const std::string& field) {
    if (!value.is_string()) throw ActionError(field, "expected a string, " + got(value));
    return value.get_ref<const std::string&>();
}

const json& read_array(const json& value, const std::string& field) {
    if (!value.is_array()) throw ActionError(field, "expected an array, " + got(value));
    return value;
}

std::string format_codepoint(char32_t cp) {
    char buffer[16];
    std::snprintf(buffer, sizeof buffer, "U+%04X", static_cast<unsigned>(cp));
    return buffer;
}

// Text to type: see the rules at the top of this file.
std::string read_typed_text(const json& value, const std::string& field) {
    const std::string& text = read_string(value, field);
    if (text.size() > kMaxTextBytes) {
        throw ActionError(field, "is " + std::to_string(text.size()) + " bytes; at most " +
                                     std::to_string(kMaxTextBytes) + " allowed");
    }
    std::size_t bad_offset = 0;
    const auto codepoints = utf8::code_points(text, &bad_offset);
    if (!codepoints) {
        throw ActionError(
            field, "is not valid UTF-8 (bad byte at offset " + std::to_string(bad_offset) + ")");
    }
    std::size_t offset = 0;
    for (char32_t cp : *codepoints) {
        const bool control = cp < 0x20 || (cp >= 0x7f && cp < 0xa0);
        if (control && cp != U'\n' && cp != U'\t') {
            throw ActionError(field, "contains control character " + format_codepoint(cp) +
                                         " at byte " + std::to_string(offset) +
                                         "; only \\n and \\t can be typed");
        }
        offset += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    }
    return text;
}

// A key string ("ctrl+a Delete"), bounded like typed text.
const std::string& read_key_string(const json& value, const std::string& field) {
    const std::string& text = read_string(value, field);
    if (text.size() > kMaxTextBytes) {
        throw ActionError(field, "is " + std::to_string(text.size()) + " bytes; at most " +
                                     std::to_string(kMaxTextBytes) + " allowed");
    }
    return text;
}

// OpenAI writes key names in capitals ("CTRL", "C"); a capital letter there means the letter key,
// not "shift+letter", so single ASCII capitals are lowered. Native names stay case-sensitive
// ("A" is the keysym A, as in xdotool).
enum class KeyCase { exact, openai };

Keysym read_key_name(const json& value, const std::string& field, KeyCase key_case) {
    std::string name = read_string(value, field);
    if (key_case == KeyCase::openai && name.size() == 1 && name[0] >= 'A' && name[0] <= 'Z') {
        name[0] = static_cast<char>(name[0] - 'A' + 'a');
    }
    const auto keysym = keysym_from_name(name);
    if (!keysym) {
        std::string reason = "unknown key " + quote_for_error(name);
        if (name.size() > 1 && name.find('+') != std::string::npos) {
            reason += " (one key per element, e.g. [\"CTRL\", \"C\"])";
        }
        throw ActionError(field, reason);
    }
    return *keysym;
}

// An array of key names held together: native hold_keys, OpenAI keys.
std::vector<Keysym> read_key_list(const json& value, const std::string& field, KeyCase key_case) {
    read_array(value, field);
    if (value.size() > kMaxHeldKeys) {
        throw ActionError(field, "has " + std::to_string(value.size()) + " keys; at most " +
                                     std::to_string(kMaxHeldKeys) + " allowed");
    }
    std::vector<Keysym> keys;
    for (std::size_t i = 0; i < value.size(); ++i) {
        const Keysym keysym = read_key_name(value[i], indexed(field, i), key_case);
        if (std::find(keys.begin(), keys.end(), keysym) != keys.end()) {
            throw ActionError(
                indexed(field, i),
                "key " + quote_for_error(value[i].get<std::string>()) + " is already in the list");
        }
        keys.push_back(keysym);
    }
    return keys;
}

// [x, y] as a two-element array: Anthropic coordinates, native drag path points.
Point read_pair(const json& value, const std::string& field) {
    if (!value.is_array()) throw ActionError(field, "expected an array [x, y], " + got(value));
    if (value.size() != 2) {
        throw ActionError(
            field, "expected 2 numbers [x, y], got " + std::to_string(value.size()) + " elements");
    }
    return {read_coordinate(value[0], indexed(field, 0)),
            read_coordinate(value[1], indexed(field, 1))};
}

// [x0, y0, x1, y1]: the top-left and bottom-right corners, both inclusive.
Zoom read_region(const json& value, const std::string& field) {
    const json& region = read_array(value, field);
    if (region.size() != 4)
        throw ActionError(
            field, "expected [x0, y0, x1, y1], got " + std::to_string(region.size()) + " numbers");
    int c[4];
    for (std::size_t i = 0; i < 4; ++i) c[i] = read_coordinate(region[i], indexed(field, i));
    if (c[2] < c[0])
        throw ActionError(indexed(field, 2),
                          "x1=" + std::to_string(c[2]) + " is left of x0=" + std::to_string(c[0]));
    if (c[3] < c[1])
        throw ActionError(indexed(field, 3),
                          "y1=" + std::to_string(c[3]) + " is above y0=" + std::to_string(c[1]));
    return Zoom{{c[0], c[1]}, {c[2], c[3]}};
}

void check_path_size(const json& path, const std::string& field) {
    if (path.size() < 2) {
        throw ActionError(field, "needs at least 2 points, got " + std::to_string(path.size()));
    }
    if (path.size() > kMaxDragPoints) {
        throw ActionError(field, "has " + std::to_string(path.size()) + " points; at most " +
                                     std::to_string(kMaxDragPoints) + " allowed");
    }
}

int seconds_to_ms(const json& value, const std::string& field, int max_ms) {
    if (!value.is_number()) throw ActionError(field, "expected a number of seconds, " + got(value));
    const double seconds = value.get<double>();
    const double max_seconds = max_ms / 1000.0;
    if (!std::isfinite(seconds) || seconds < 0 || seconds > max_seconds) {
        const std::string limit =
            max_ms % 1000 == 0 ? std::to_string(max_ms / 1000) : json(max_seconds).dump();
        throw ActionError(field,
                          "must be between 0 and " + limit + " seconds, got " + value.dump());
    }
    return static_cast<int>(std::llround(seconds * 1000));
}

// ---- one action object ----

// The object being parsed, the field prefix and the action name, for lookups and errors.
class Fields {
  public:
    Fields(const json& object, const std::string& prefix, std::string_view action)
        : object_(object), prefix_(prefix), action_(action) {}

    std::string field(std::string_view name) const { return join(prefix_, name); }
    std::string_view action() const { return action_; }

    // nullptr when absent or null.
    const json* optional(const char* name) const {
        const auto it = object_.find(name);
        return it == object_.end() || it->is_null() ? nullptr : &*it;
    }
    const json& required(const char* name) const {
        if (const json* value = optional(name)) return *value;
        throw ActionError(field(name), "required for action '" + std::string(action_) + "'");
    }

  private:
    const json& object_;
    const std::string& prefix_;
    std::string_view action_;
};

struct ActionSpec {
    std::string_view name;
    std::vector<std::string_view> fields;  // allowed besides the type / action discriminator
    std::function<Action(const Fields&)> parse;
};

// ---- native ----

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

Point read_required_xy(const Fields& f) {
    return {read_coordinate(f.required("x"), f.field("x")),
            read_coordinate(f.required("y"), f.field("y"))};
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
    const std::string field = f.field("key");
    const KeyChord chord = parse_chord(read_key_string(f.required("key"), field), field);
    if (chord.keys.size() != 1)
        throw ActionError(field,
                          "expected one key, got a chord of " + std::to_string(chord.keys.size()));
    return chord.keys.front();
}

const std::vector<ActionSpec>& native_specs() {
    static const std::vector<ActionSpec> specs = {
        {"click",
         {"x", "y", "button", "count", "hold_keys", "target"},
         [](const Fields& f) -> Action {
             Click click;
             click.target = read_target(f);
             click.at = read_optional_xy(f);
             click.button = read_native_button(f);
             if (const json* count = f.optional("count")) {
                 click.count = static_cast<int>(read_integer(*count, f.field("count"), 1, 3));
             }
             click.hold_keys = read_native_hold_keys(f);
             return click;
         }},
        {"move",
         {"x", "y", "hold_keys", "target"},
         [](const Fields& f) -> Action {
             if (auto target = read_target(f))
                 return Move{Point{}, read_native_hold_keys(f), std::move(target)};
             return Move{read_required_xy(f), read_native_hold_keys(f)};
         }},
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
        {"drag",
         {"path", "button", "hold_keys"},
         [](const Fields& f) -> Action {
             const std::string field = f.field("path");
             const json& path = read_array(f.required("path"), field);
             check_path_size(path, field);
             Drag drag;
             drag.path.reserve(path.size());
             for (std::size_t i = 0; i < path.size(); ++i) {
                 drag.path.push_back(read_pair(path[i], indexed(field, i)));
             }
             drag.button = read_native_button(f);
             drag.hold_keys = read_native_hold_keys(f);
             return drag;
         }},
        {"scroll",
         {"x", "y", "dx", "dy", "hold_keys", "target"},
         [](const Fields& f) -> Action {
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
         }},
        {"type",
         {"text"},
         [](const Fields& f) -> Action {
             return Type{read_typed_text(f.required("text"), f.field("text"))};
         }},
        {"key",
         {"keys"},
         [](const Fields& f) -> Action {
             const std::string field = f.field("keys");
             return Key{parse_key_sequence(read_key_string(f.required("keys"), field), field)};
         }},
        {"hold_key",
         {"keys", "duration_ms"},
         [](const Fields& f) -> Action {
             const std::string field = f.field("keys");
             HoldKey hold;
             hold.keys = parse_chord(read_key_string(f.required("keys"), field), field);
             hold.duration_ms = static_cast<int>(
                 read_integer(f.required("duration_ms"), f.field("duration_ms"), 0, kMaxHoldMs));
             return hold;
         }},
        {"key_down",
         {"key"},
         [](const Fields& f) -> Action { return KeyDown{read_single_key(f)}; }},
        {"key_up", {"key"}, [](const Fields& f) -> Action { return KeyUp{read_single_key(f)}; }},
        {"wait",
         {"duration_ms"},
         [](const Fields& f) -> Action {
             return Wait{static_cast<int>(
                 read_integer(f.required("duration_ms"), f.field("duration_ms"), 0, kMaxWaitMs))};
         }},
        {"cursor_position", {}, [](const Fields&) -> Action { return CursorPosition{}; }},
        {"screenshot", {}, [](const Fields&) -> Action { return Screenshot{}; }},
        {"zoom",
         {"region"},
         [](const Fields& f) -> Action {
             return read_region(f.required("region"), f.field("region"));
         }},
    };
    return specs;
}

// ---- Anthropic computer use (computer_20241022, computer_20250124, computer_20251124) ----

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

const std::vector<ActionSpec>& anthropic_specs() {
    static const std::vector<ActionSpec> specs = {
        {"screenshot", {}, [](const Fields&) -> Action { return Screenshot{}; }},
        {"cursor_position", {}, [](const Fields&) -> Action { return CursorPosition{}; }},
        anthropic_click("left_click", Button::left, 1),
        anthropic_click("right_click", Button::right, 1),
        anthropic_click("middle_click", Button::middle, 1),
        anthropic_click("double_click", Button::left, 2),
        anthropic_click("triple_click", Button::left, 3),
        {"left_click_drag",
         {"start_coordinate", "coordinate", "text"},
         [](const Fields& f) -> Action {
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
         }},
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
         [](const Fields& f) -> Action {
             Scroll scroll;
             scroll.at = read_optional_coordinate(f);
             const std::string direction_field = f.field("scroll_direction");
             const std::string& direction =
                 read_string(f.required("scroll_direction"), direction_field);
             const int amount = static_cast<int>(read_integer(
                 f.required("scroll_amount"), f.field("scroll_amount"), 1, kMaxScrollNotches));
             if (direction == "up") {
                 scroll.dy = -amount;
             } else if (direction == "down") {
                 scroll.dy = amount;
             } else if (direction == "left") {
                 scroll.dx = -amount;
             } else if (direction == "right") {
                 scroll.dx = amount;
             } else {
                 throw ActionError(direction_field, "unknown direction " +
                                                        quote_for_error(direction) +
                                                        " (expected up, down, left or right)");
             }
             scroll.hold_keys = read_anthropic_modifiers(f, false);
             return scroll;
         }},
        {"type",
         {"text"},
         [](const Fields& f) -> Action {
             return Type{read_typed_text(f.required("text"), f.field("text"))};
         }},
        {"key",
         {"text"},
         [](const Fields& f) -> Action {
             const std::string field = f.field("text");
             return Key{parse_key_sequence(read_key_string(f.required("text"), field), field)};
         }},
        {"hold_key",
         {"text", "duration"},
         [](const Fields& f) -> Action {
             const std::string field = f.field("text");
             HoldKey hold;
             hold.keys = parse_chord(read_key_string(f.required("text"), field), field);
             hold.duration_ms =
                 seconds_to_ms(f.required("duration"), f.field("duration"), kMaxHoldMs);
             return hold;
         }},
        {"wait",
         {"duration"},
         [](const Fields& f) -> Action {
             return Wait{seconds_to_ms(f.required("duration"), f.field("duration"), kMaxWaitMs)};
         }},
        // computer_20251124 (with enable_zoom): an image of region [x0, y0, x1, y1].
        {"zoom",
         {"region"},
         [](const Fields& f) -> Action {
             return read_region(f.required("region"), f.field("region"));
         }},
    };
    return specs;
}

// ---- OpenAI computer use (computer-use-preview: computer_call.action) ----

std::vector<Keysym> read_openai_keys(const Fields& f) {
    const json* value = f.optional("keys");
    return value ? read_key_list(*value, f.field("keys"), KeyCase::openai) : std::vector<Keysym>{};
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

const std::vector<ActionSpec>& openai_specs() {
    static const std::vector<ActionSpec> specs = {
        {"click",
         {"button", "x", "y", "keys"},
         [](const Fields& f) -> Action {
             Click click;
             const std::string field = f.field("button");
             const std::string& button = read_string(f.required("button"), field);
             if (button == "left") {
                 click.button = Button::left;
             } else if (button == "right") {
                 click.button = Button::right;
             } else if (button == "wheel") {
                 click.button = Button::middle;
             } else if (button == "back") {
                 click.button = Button::back;
             } else if (button == "forward") {
                 click.button = Button::forward;
             } else {
                 throw ActionError(field, "unknown button " + quote_for_error(button) +
                                              " (expected left, right, wheel, back or forward)");
             }
             click.at = read_required_xy(f);
             click.hold_keys = read_openai_keys(f);
             return click;
         }},
        {"double_click",
         {"x", "y", "keys"},
         [](const Fields& f) -> Action {
             Click click;
             click.at = read_required_xy(f);
             click.count = 2;
             click.hold_keys = read_openai_keys(f);
             return click;
         }},
        {"scroll",
         {"x", "y", "scroll_x", "scroll_y", "keys"},
         [](const Fields& f) -> Action {
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
         }},
        {"keypress",
         {"keys"},
         [](const Fields& f) -> Action {
             const std::string field = f.field("keys");
             KeyChord chord{read_key_list(f.required("keys"), field, KeyCase::openai)};
             if (chord.keys.empty()) throw ActionError(field, "must name at least one key");
             return Key{{std::move(chord)}};
         }},
        {"type",
         {"text"},
         [](const Fields& f) -> Action {
             return Type{read_typed_text(f.required("text"), f.field("text"))};
         }},
        {"wait", {}, [](const Fields&) -> Action { return Wait{kOpenAiWaitMs}; }},
        {"screenshot", {}, [](const Fields&) -> Action { return Screenshot{}; }},
        {"move",
         {"x", "y", "keys"},
         [](const Fields& f) -> Action {
             return Move{read_required_xy(f), read_openai_keys(f)};
         }},
        {"drag",
         {"path", "keys"},
         [](const Fields& f) -> Action {
             const std::string field = f.field("path");
             const json& path = read_array(f.required("path"), field);
             check_path_size(path, field);
             Drag drag;
             drag.path.reserve(path.size());
             for (std::size_t i = 0; i < path.size(); ++i) {
                 drag.path.push_back(read_openai_point(path[i], indexed(field, i)));
             }
             drag.hold_keys = read_openai_keys(f);
             return drag;
         }},
    };
    return specs;
}

// ---- dispatch ----

const std::vector<ActionSpec>& specs_for(Dialect dialect) {
    switch (dialect) {
        case Dialect::native:
            return native_specs();
        case Dialect::anthropic:
            return anthropic_specs();
        case Dialect::openai:
            return openai_specs();
    }
    return native_specs();
}

std::string spec_names(const std::vector<ActionSpec>& specs) {
    std::vector<std::string_view> names;
    for (const auto& spec : specs) names.push_back(spec.name);
    return join_names(names);
}

// A helpful word when a whole envelope was sent instead of the action inside it.
std::string envelope_hint(const json& object, Dialect dialect) {
    if (dialect == Dialect::anthropic && object.contains("input")) {
        return "; send the tool_use block whole (with \"type\": \"tool_use\") or its input";
    }
    if (dialect == Dialect::openai && object.contains("action")) {
        return "; send the computer_call item whole (with \"type\": \"computer_call\") or "
               "its action";
    }
    return "";
}

std::string_view button_name(Button button) {
    switch (button) {
        case Button::left:
            return "left";
        case Button::middle:
            return "middle";
        case Button::right:
            return "right";
        case Button::back:
            return "back";
        case Button::forward:
            return "forward";
    }
    return "left";
}

std::string chord_text(const KeyChord& chord) {
    std::string out;
    for (Keysym keysym : chord.keys) {
        if (!out.empty()) out += '+';
        out += keysym_name(keysym);
    }
    return out;
}

json key_names(const std::vector<Keysym>& keys) {
    json names = json::array();
    for (Keysym keysym : keys) names.push_back(keysym_name(keysym));
    return names;
}

void put_point(json& out, const std::optional<Point>& point) {
    if (!point) return;
    out["x"] = point->x;
    out["y"] = point->y;
}

void put_hold_keys(json& out, const std::vector<Keysym>& keys) {
    if (!keys.empty()) out["hold_keys"] = key_names(keys);
}

void put_target(json& out, const std::optional<Target>& target) {
    if (target) out["target"] = json::parse(target->json);
}

}  // namespace

Dialect parse_dialect(std::string_view name) {
    std::string lower(name);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (lower == "native") return Dialect::native;
    if (lower == "anthropic") return Dialect::anthropic;
    if (lower == "openai") return Dialect::openai;
    throw ActionError("dialect", "unknown dialect " + quote_for_error(name) +
                                     " (expected native, anthropic or openai)");
}

Action parse_action(const json& object, Dialect dialect, const std::string& field_prefix) {
    if (!object.is_object()) {
        throw ActionError(field_prefix.empty() ? "body" : field_prefix,
                          "expected an action object, " + got(object));
    }
    const char* discriminator = dialect == Dialect::anthropic ? "action" : "type";
    const std::string discriminator_field = join(field_prefix, discriminator);
    const auto& specs = specs_for(dialect);

    const auto it = object.find(discriminator);
    if (it == object.end() || it->is_null()) {
        throw ActionError(discriminator_field, "required (one of " + spec_names(specs) + ")" +
                                                   envelope_hint(object, dialect));
    }
    const std::string& name = read_string(*it, discriminator_field);
    const auto spec = std::find_if(specs.begin(), specs.end(),
                                   [&](const ActionSpec& s) { return s.name == name; });
    if (spec == specs.end()) {
        throw ActionError(discriminator_field, "unknown action " + quote_for_error(name) +
                                                   " (expected one of " + spec_names(specs) + ")" +
                                                   envelope_hint(object, dialect));
    }
    for (const auto& [key, _] : object.items()) {
        if (key == discriminator) continue;
        if (std::find(spec->fields.begin(), spec->fields.end(), key) == spec->fields.end()) {
            throw ActionError(
                join(field_prefix, key),
                "not a field of action '" + name + "'" +
                    (spec->fields.empty() ? std::string(" (it takes none)")
                                          : " (allowed: " + join_names(spec->fields) + ")"));
        }
    }
    return spec->parse(Fields(object, field_prefix, spec->name));
}

namespace {

// The fields of a model's output item besides the action(s), which are only carried along.
void check_envelope_fields(const json& body, const std::vector<std::string_view>& allowed,
                           const char* item) {
    for (const auto& [key, _] : body.items())
        if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
            throw ActionError(key, std::string("not a field of a ") + item +
                                       " (allowed: " + join_names(allowed) + ")");
}

std::string optional_id(const json& body, const char* name) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return {};
    const std::string& id = read_string(*it, name);
    if (id.size() > 256) throw ActionError(name, "longer than 256 bytes");
    return id;
}

}  // namespace

ActionRequest parse_action_request(const json& body, Dialect dialect) {
    ActionRequest request;
    const auto type = body.is_object() ? body.find("type") : body.end();
    const bool typed = body.is_object() && type != body.end() && type->is_string();
    if (dialect == Dialect::anthropic && typed && *type == "tool_use") {
        check_envelope_fields(body, {"type", "id", "name", "input", "cache_control"},
                              "tool_use block");
        request.call_id = optional_id(body, "id");
        if (!body.contains("input")) throw ActionError("input", "required in a tool_use block");
        request.actions.push_back(parse_action(body["input"], dialect, "input"));
        request.fields.push_back("input");
        return request;
    }
    if (dialect == Dialect::openai && typed && *type == "computer_call") {
        check_envelope_fields(
            body, {"type", "id", "call_id", "action", "actions", "pending_safety_checks", "status"},
            "computer_call item");
        request.call_id = optional_id(body, "call_id");
        const bool one = body.contains("action") && !body["action"].is_null();
        const bool many = body.contains("actions") && !body["actions"].is_null();
        if (one == many)
            throw ActionError(one ? "actions" : "action",
                              one ? "give action or actions, not both"
                                  : "required in a computer_call item (or actions)");
        if (one) {
            request.actions.push_back(parse_action(body["action"], dialect, "action"));
            request.fields.push_back("action");
            return request;
        }
        request.actions = parse_actions(json{{"actions", body["actions"]}}, dialect);
        for (std::size_t i = 0; i < request.actions.size(); ++i)
            request.fields.push_back(indexed("actions", i));
        return request;
    }
    request.actions = parse_actions(body, dialect);
    const bool batch = body.contains("actions");
    for (std::size_t i = 0; i < request.actions.size(); ++i)
        request.fields.push_back(batch ? indexed("actions", i) : "");
    return request;
}

std::vector<Action> parse_actions(const json& body, Dialect dialect) {
    if (!body.is_object()) {
        throw ActionError("body",
                          "expected an action object or {\"actions\": [...]}, " + got(body));
    }
    if (!body.contains("actions")) return {parse_action(body, dialect)};

    for (const auto& [key, _] : body.items()) {
        if (key != "actions") throw ActionError(key, "not allowed next to 'actions'");
    }
    const json& list = read_array(body["actions"], "actions");
    if (list.size() > kMaxBatchActions) {
        throw ActionError("actions", "has " + std::to_string(list.size()) + " actions; at most " +
                                         std::to_string(kMaxBatchActions) + " allowed");
    }
    std::vector<Action> actions;
    actions.reserve(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
        actions.push_back(parse_action(list[i], dialect, indexed("actions", i)));
    }
    return actions;
}

json to_native_json(const Action& action) {
    json out = {{"type", action_type_name(action)}};
    std::visit(
        [&out](const auto& a) {
            using T = std::decay_t<decltype(a)>;
            if constexpr (std::is_same_v<T, Click>) {
                put_point(out, a.at);
                out["button"] = button_name(a.button);
                out["count"] = a.count;
                put_hold_keys(out, a.hold_keys);
                put_target(out, a.target);
            } else if constexpr (std::is_same_v<T, Move>) {
                if (!a.target) put_point(out, a.to);
                put_hold_keys(out, a.hold_keys);
                put_target(out, a.target);
            } else if constexpr (std::is_same_v<T, Zoom>) {
                out["region"] = {a.from.x, a.from.y, a.to.x, a.to.y};
            } else if constexpr (std::is_same_v<T, MouseDown> || std::is_same_v<T, MouseUp>) {
                out["button"] = button_name(a.button);
                put_point(out, a.at);
                put_target(out, a.target);
            } else if constexpr (std::is_same_v<T, Drag>) {
                json path = json::array();
                for (const Point& p : a.path) path.push_back({p.x, p.y});
                out["path"] = std::move(path);
                out["button"] = button_name(a.button);
                put_hold_keys(out, a.hold_keys);
            } else if constexpr (std::is_same_v<T, Scroll>) {
                put_point(out, a.at);
                out["dx"] = a.dx;
                out["dy"] = a.dy;
                put_hold_keys(out, a.hold_keys);
                put_target(out, a.target);
            } else if constexpr (std::is_same_v<T, Type>) {
                out["text"] = a.text;
            } else if constexpr (std::is_same_v<T, Key>) {
                std::string keys;
                for (const KeyChord& chord : a.chords) {
                    if (!keys.empty()) keys += ' ';
                    keys += chord_text(chord);
                }
                out["keys"] = std::move(keys);
            } else if constexpr (std::is_same_v<T, HoldKey>) {
                out["keys"] = chord_text(a.keys);
                out["duration_ms"] = a.duration_ms;
            } else if constexpr (std::is_same_v<T, KeyDown> || std::is_same_v<T, KeyUp>) {
                out["key"] = keysym_name(a.key);
            } else if constexpr (std::is_same_v<T, Wait>) {
                out["duration_ms"] = a.duration_ms;
            }
        },
        action);
    return out;
}

void validate_on_screen(const Action& action, Size screen, const std::string& field_prefix,
                        Dialect dialect) {
    const auto check = [&](int value, int length, const char* axis, std::size_t index,
                           int axis_id) {
        if (value >= 0 && value < length) return;
        throw ActionError(join(field_prefix, coordinate_field(action, index, axis_id, dialect)),
                          std::string(axis) + "=" + std::to_string(value) + " is outside the " +
                              std::to_string(screen.width) + "x" + std::to_string(screen.height) +
                              " screen (" + axis + " must be 0.." + std::to_string(length - 1) +
                              ")");
    };
    for_each_point(action, [&](const Point& point, std::size_t index) {
        check(point.x, screen.width, "x", index, 0);
        check(point.y, screen.height, "y", index, 1);
    });
}

}  // namespace deskbox::input
