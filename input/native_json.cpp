// to_native_json: an action back to its canonical native JSON (key names as keynames.hpp
// writes them), so that parse_action(to_native_json(a), native) == a.
#include "input/parse.hpp"

#include <string>
#include <type_traits>
#include <variant>

#include "input/keynames.hpp"

namespace deskbox::input {

namespace {

using nlohmann::json;

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
                if (a.from_pointer) out["from_pointer"] = true;
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

}  // namespace deskbox::input
