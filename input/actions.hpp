// The action model: one representation of everything an agent can do to a desktop.
// Dialect parsers (native, Anthropic, OpenAI) produce it; the XTest injector executes it;
// the agent channel carries it as native JSON (to_native_json / parse_actions(Dialect::native)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace deskbox::input {

// X keysym value (e.g. 0xff0d for Return). Names are resolved with xkbcommon, not a display.
using Keysym = std::uint32_t;

// X core button numbers, so the injector can pass them straight to XTestFakeButtonEvent.
enum class Button : int { left = 1, middle = 2, right = 3, back = 8, forward = 9 };

struct Point {
    int x = 0;
    int y = 0;
    friend bool operator==(const Point&, const Point&) = default;
};

struct Size {
    int width = 0;
    int height = 0;
    friend bool operator==(const Size&, const Size&) = default;
};

// Keys pressed together, in order, and released in reverse order: "ctrl+shift+t".
struct KeyChord {
    std::vector<Keysym> keys;
    friend bool operator==(const KeyChord&, const KeyChord&) = default;
};

// What a pointer action aims at when it names something on the screen instead of coordinates
// (native dialect: "target": {"text": "OK"} or {"image": base64 PNG, ...}). The server finds it
// just before the action runs and puts the point in; the agent never sees a target. `json` is
// the target object as sent (the server checks its fields, the input layer only its shape).
struct Target {
    std::string json;
    friend bool operator==(const Target&, const Target&) = default;
};

struct Click {
    std::optional<Point> at;  // absent: click where the pointer is
    Button button = Button::left;
    int count = 1;                      // 1..3
    std::vector<Keysym> hold_keys;      // held down around the click (e.g. shift-click)
    std::optional<Target> target = {};  // instead of `at`
    friend bool operator==(const Click&, const Click&) = default;
};
struct Move {
    Point to;
    std::vector<Keysym> hold_keys = {};  // held down around the move (OpenAI's `keys`)
    std::optional<Target> target = {};   // instead of `to` (then `to` is filled in)
    friend bool operator==(const Move&, const Move&) = default;
};
struct MouseDown {
    Button button = Button::left;
    std::optional<Point> at;
    std::optional<Target> target = {};
    friend bool operator==(const MouseDown&, const MouseDown&) = default;
};
struct MouseUp {
    Button button = Button::left;
    std::optional<Point> at;
    std::optional<Target> target = {};
    friend bool operator==(const MouseUp&, const MouseUp&) = default;
};
struct Drag {
    // At least 2 points: press at the first, release at the last. With `from_pointer`, at least
    // 1: press where the pointer is, move along the path, release at its last point
    // (Anthropic's computer_20241022 left_click_drag without start_coordinate).
    std::vector<Point> path;
    Button button = Button::left;
    std::vector<Keysym> hold_keys;
    bool from_pointer = false;
    friend bool operator==(const Drag&, const Drag&) = default;
};
struct Scroll {
    std::optional<Point> at;  // absent: scroll where the pointer is
    int dx = 0;               // wheel notches, + = right
    int dy = 0;               // wheel notches, + = down
    std::vector<Keysym> hold_keys;
    std::optional<Target> target = {};  // instead of `at`
    friend bool operator==(const Scroll&, const Scroll&) = default;
};
struct Type {
    std::string text;  // valid UTF-8; '\n' types Return, '\t' types Tab
    friend bool operator==(const Type&, const Type&) = default;
};
struct Key {
    std::vector<KeyChord> chords;  // "ctrl+a Delete" is two chords, pressed one after the other
    friend bool operator==(const Key&, const Key&) = default;
};
struct HoldKey {
    KeyChord keys;
    int duration_ms = 0;
    friend bool operator==(const HoldKey&, const HoldKey&) = default;
};
// One key pressed and left down until a KeyUp of the same keysym (or the injector ends): what a
// human at a viewer or VNC client does, key by key. A KeyDown of a key already down repeats it.
struct KeyDown {
    Keysym key = 0;
    friend bool operator==(const KeyDown&, const KeyDown&) = default;
};
struct KeyUp {
    Keysym key = 0;  // a key that is not down is ignored
    friend bool operator==(const KeyUp&, const KeyUp&) = default;
};
struct Wait {
    int duration_ms = 0;
    friend bool operator==(const Wait&, const Wait&) = default;
};
struct CursorPosition {
    friend bool operator==(const CursorPosition&, const CursorPosition&) = default;
};
struct Screenshot {
    friend bool operator==(const Screenshot&, const Screenshot&) = default;
};
// An image of a screen region (Anthropic's computer_20251124 `zoom`): corners `from` (top
// left) and `to` (bottom right), both inclusive. Taken on the host, like Screenshot.
struct Zoom {
    Point from;
    Point to;
    friend bool operator==(const Zoom&, const Zoom&) = default;
};

using Action = std::variant<Click, Move, MouseDown, MouseUp, Drag, Scroll, Type, Key, HoldKey,
                            KeyDown, KeyUp, Wait, CursorPosition, Screenshot, Zoom>;

// Limits that keep one request from tying up a desktop.
inline constexpr int kMaxWaitMs = 60'000;
inline constexpr int kMaxHoldMs = 60'000;
inline constexpr std::size_t kMaxTextBytes = 64 * 1024;
inline constexpr std::size_t kMaxDragPoints = 10'000;
inline constexpr int kMaxScrollNotches = 1000;
inline constexpr std::size_t kMaxBatchActions = 1000;
// A key action's chords after its repeat count (Anthropic's toolset `key` takes `repeat`).
inline constexpr std::size_t kMaxKeyChords = 10'000;

// An invalid action: `field` is a path into the request ("actions[2].coordinate[0]"),
// `reason` says what is wrong with it.
class ActionError : public std::runtime_error {
  public:
    ActionError(std::string field, std::string reason)
        : std::runtime_error(field + ": " + reason),
          field_(std::move(field)),
          reason_(std::move(reason)) {}
    const std::string& field() const { return field_; }
    const std::string& reason() const { return reason_; }

  private:
    std::string field_;
    std::string reason_;
};

// `value` in single quotes for an error reason: cut to 48 bytes (at a character boundary, "..."
// appended), control characters escaped, and "<invalid UTF-8>" instead of bytes that are not
// UTF-8 -- so a reason is always short, printable and safe to put in a JSON error.
std::string quote_for_error(std::string_view value);

// The native "type" name of an action: "click", "mouse_down", "cursor_position"...
const char* action_type_name(const Action& action);

// The JSON dialects agents speak (see parse.hpp). Declared here so that coordinate errors
// raised after parsing (screen bounds, scaling) can name the field the agent actually sent.
enum class Dialect { native, anthropic, openai };

// One Anthropic tool_use block of a request answered block by block (parse.hpp,
// replies.hpp): its id for the tool_result, the member or action it named, and whether it was a
// computer toolset member (its tool_result then carries toolset_name).
struct ToolUse {
    std::string id;
    std::string name;
    bool toolset = false;
    friend bool operator==(const ToolUse&, const ToolUse&) = default;
};

// Calls fn(point, index) for every coordinate the action carries, in order: the optional
// `at` / Move's `to` (index 0), each point of a Drag's path (index = position in path), or a
// Zoom's corners (0, 1).
// The action's target, if it has one (click, move, mouse_down, mouse_up, scroll).
const Target* target_of(const Action& action);
// Aims a targeted action at `point` (screen pixels) and drops its target.
void aim(Action& action, Point point);

template <typename Fn>
void for_each_point(Action& action, Fn&& fn);
template <typename Fn>
void for_each_point(const Action& action, Fn&& fn);

// The request field that held coordinate `axis` (0 = x, 1 = y) of point `index` of `action`,
// as written in `dialect`: native "x" / "path[3][0]", Anthropic "coordinate[0]" /
// "start_coordinate[1]", OpenAI "x" / "path[3].y"; a zoom's "region[2]". Without a prefix.
std::string coordinate_field(const Action& action, std::size_t index, int axis, Dialect dialect);

namespace detail {
template <typename A, typename Fn>
void visit_points(A& action, Fn& fn) {
    std::visit(
        [&fn](auto& alternative) {
            using T = std::remove_cvref_t<decltype(alternative)>;
            if constexpr (std::is_same_v<T, Move>) {
                fn(alternative.to, std::size_t{0});
            } else if constexpr (std::is_same_v<T, Drag>) {
                for (std::size_t i = 0; i < alternative.path.size(); ++i)
                    fn(alternative.path[i], i);
            } else if constexpr (std::is_same_v<T, Zoom>) {
                fn(alternative.from, std::size_t{0});
                fn(alternative.to, std::size_t{1});
            } else if constexpr (requires { alternative.at; }) {
                if (alternative.at) fn(*alternative.at, std::size_t{0});
            }
        },
        action);
}
}  // namespace detail

template <typename Fn>
void for_each_point(Action& action, Fn&& fn) {
    detail::visit_points(action, fn);
}
template <typename Fn>
void for_each_point(const Action& action, Fn&& fn) {
    detail::visit_points(action, fn);
}

}  // namespace deskbox::input
