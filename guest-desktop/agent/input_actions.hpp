// The agent channel's `input.actions`: native actions from the host, every one parsed and
// checked against the screen before the first runs, then run in order on the injector.
#pragma once

#include <functional>

#include <nlohmann/json.hpp>

#include "input/actions.hpp"
#include "input/injector.hpp"

namespace deskbox::agent {

// Runs params["actions"] on `injector` and returns {"results":[...]}, one result per action.
// Throws protocol::RpcError "bad_request" without "actions", and input::ActionError (field
// "actions[i]...") for an action that does not parse or lies off `screen`: nothing has run
// then. Once actions run, a failing one throws protocol::RpcError "invalid_action" (the
// injector refused it) or "input_failed", with {"completed": i, "results": [...]} of the ones
// before it, and `input_ended` is called when they stop, failed or not.
nlohmann::json run_input_actions(input::Injector& injector, const nlohmann::json& params,
                                 input::Size screen, const std::function<void()>& input_ended);

}  // namespace deskbox::agent
