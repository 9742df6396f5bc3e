// An action request as the front doors (routes/actions, the MCP computer tool) read it, before
// the sandbox sees it: the body parsed by input/parse in its dialect, every action's target
// read, and nothing yet checked against the screen (that needs the sandbox: SandboxInput).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "input/actions.hpp"
#include "server/sandbox/screen_request.hpp"

namespace deskbox::server {

struct ActionsRequest {
    input::Dialect dialect = input::Dialect::native;
    std::vector<input::Action> actions;  // in API pixels, as the client sent them
    // Where action i sat in the body ("actions[2]", "input", "" for a bare one): errors found
    // later (off the screen, a target's offset) name the field the client wrote.
    std::vector<std::string> fields;
    std::vector<std::optional<TargetSpec>> targets;  // action i's, or nullopt
    std::string call_id;  // the model's tool_use id / call_id, for the reply to quote
    // Anthropic tool_use blocks answered one tool_result each (a computer toolset block, or a
    // turn's list of blocks): block i ran actions[i]. Empty for the other forms.
    std::vector<input::ToolUse> tool_uses;
    // The answer also has the screen afterwards (and the dialect's tool result item).
    bool with_screenshot = false;
};

// Throws SandboxError (invalid): invalid_action from the parser, or bad_request from a target's
// fields, naming the field at fault.
ActionsRequest read_actions_request(const nlohmann::json& body, input::Dialect dialect,
                                    bool with_screenshot);

}  // namespace deskbox::server
