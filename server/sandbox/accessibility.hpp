// The accessibility tree on the host: the agent's answers (accessibility.tree/find/act, bounds
// in screen pixels) moved into API pixels, the same mapping screenshots and actions use, and
// actions aimed at an accessible element ({"role", "name"} targets).
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "input/actions.hpp"
#include "input/scaling.hpp"

namespace deskbox::server {

class AgentClient;
class SandboxInput;
class SandboxScreen;

// Every "bounds" in an agent answer (its "windows" trees, "matches", "node"), clipped to the
// screen and mapped to API pixels; an element wholly off the screen loses "bounds" and gets
// "offscreen": true. `screen` is the real screen's size.
void accessible_bounds_to_api(nlohmann::json& answer, input::Size screen,
                              const std::optional<input::CoordinateScaler>& scaler);

// accessibility.act as the API runs it (REST and MCP): the agent's action, bounds in API
// pixels. A set_value of text the application ignores (Firefox's content elements take no
// EditableText calls) is typed instead: the element focused, ctrl+a, the text through the
// sandbox's input; the answer then says "via": "keyboard" and has the element as it reads after.
nlohmann::json act_on_accessible(AgentClient& agent, SandboxInput& input, SandboxScreen& screen,
                                 const nlohmann::json& params);

}  // namespace deskbox::server
