#include "input/actions.hpp"

#include <cstdio>

#include "common/utf8.hpp"

namespace deskbox::input {

namespace {

template <typename... Ts>
struct Overloaded : Ts... {
    using Ts::operator()...;
};
// clang before 17 does not deduce aggregate templates by itself (the fuzz build is clang).
template <typename... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

const char* axis_name(int axis) {
    return axis == 0 ? "x" : "y";
}

std::string index_suffix(std::size_t index) {
    return "[" + std::to_string(index) + "]";
}

constexpr std::size_t kMaxQuotedBytes = 48;

}  // namespace

std::string quote_for_error(std::string_view value) {
    if (!utf8::is_valid(value)) return "<invalid UTF-8>";
    std::size_t cut = value.size();
    if (cut > kMaxQuotedBytes) {
        // Back off to a character boundary so the cut never splits a UTF-8 sequence.
        cut = kMaxQuotedBytes;
        while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xc0) == 0x80) --cut;
    }
    std::string out = "'";
    for (std::size_t i = 0; i < cut; ++i) {
        const auto byte = static_cast<unsigned char>(value[i]);
        if (byte < 0x20 || byte == 0x7f) {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
            out += escaped;
        } else {
            out += static_cast<char>(byte);
        }
    }
    if (cut < value.size()) out += "...";
    out += "'";
    return out;
}

const char* action_type_name(const Action& action) {
    return std::visit(Overloaded{
                          [](const Click&) { return "click"; },
                          [](const Move&) { return "move"; },
                          [](const MouseDown&) { return "mouse_down"; },
                          [](const MouseUp&) { return "mouse_up"; },
                          [](const Drag&) { return "drag"; },
                          [](const Scroll&) { return "scroll"; },
                          [](const Type&) { return "type"; },
                          [](const Key&) { return "key"; },
                          [](const HoldKey&) { return "hold_key"; },
                          [](const KeyDown&) { return "key_down"; },
                          [](const KeyUp&) { return "key_up"; },
                          [](const Wait&) { return "wait"; },
                          [](const CursorPosition&) { return "cursor_position"; },
                          [](const Screenshot&) { return "screenshot"; },
                          [](const Zoom&) { return "zoom"; },
                      },
                      action);
}

const Target* target_of(const Action& action) {
    return std::visit(
        [](const auto& a) -> const Target* {
            if constexpr (requires { a.target; })
                return a.target ? &*a.target : nullptr;
            else
                return nullptr;
        },
        action);
}

void aim(Action& action, Point point) {
    std::visit(
        [&point](auto& a) {
            using T = std::remove_cvref_t<decltype(a)>;
            if constexpr (std::is_same_v<T, Move>) {
                a.to = point;
                a.target.reset();
            } else if constexpr (requires { a.target; }) {
                a.at = point;
                a.target.reset();
            }
        },
        action);
}

std::string coordinate_field(const Action& action, std::size_t index, int axis, Dialect dialect) {
    const bool is_drag = std::holds_alternative<Drag>(action);
    if (std::holds_alternative<Zoom>(action)) return "region" + index_suffix(index * 2 + axis);
    switch (dialect) {
        case Dialect::native:
            if (is_drag) return "path" + index_suffix(index) + index_suffix(axis);
            return axis_name(axis);
        case Dialect::openai:
            if (is_drag) return "path" + index_suffix(index) + "." + axis_name(axis);
            return axis_name(axis);
        case Dialect::anthropic:
            if (is_drag) {
                // left_click_drag is the only Anthropic drag: start_coordinate -> coordinate,
                // or from the pointer to coordinate.
                const auto& drag = std::get<Drag>(action);
                if (drag.from_pointer && drag.path.size() == 1)
                    return "coordinate" + index_suffix(axis);
                if (!drag.from_pointer && drag.path.size() == 2) {
                    return (index == 0 ? "start_coordinate" : "coordinate") + index_suffix(axis);
                }
                return "path" + index_suffix(index) + index_suffix(axis);
            }
            return "coordinate" + index_suffix(axis);
    }
    return axis_name(axis);
}

}  // namespace deskbox::input
