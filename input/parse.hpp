// Parsing and validating action JSON in the three dialects agents speak, into the one model.
#pragma once

#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "input/actions.hpp"

namespace deskbox::input {

// Dialect (native, anthropic, openai) is declared in actions.hpp.

// "native" | "anthropic" | "openai" (case-insensitive); throws ActionError{"dialect", ...}.
Dialect parse_dialect(std::string_view name);

// One action object. `field_prefix` is prepended to field paths in errors ("actions[3]").
// Throws ActionError naming the offending field and the reason. Unknown keys are errors.
Action parse_action(const nlohmann::json& object, Dialect dialect,
                    const std::string& field_prefix = "");

// A request body: either one action object or {"actions":[...]} (at most kMaxBatchActions).
std::vector<Action> parse_actions(const nlohmann::json& body, Dialect dialect);

// The native JSON form of an action; parse_action(to_native_json(a), native) == a.
nlohmann::json to_native_json(const Action& action);

// Checks every coordinate lies on a screen of `screen` size (0 <= x < width, 0 <= y < height).
// Throws ActionError with field `field_prefix` + the dialect's name for the coordinate
// (coordinate_field: "x", "coordinate[0]", "path[3][1]"...). Never clamps.
void validate_on_screen(const Action& action, Size screen, const std::string& field_prefix = "",
                        Dialect dialect = Dialect::native);

}  // namespace deskbox::input
