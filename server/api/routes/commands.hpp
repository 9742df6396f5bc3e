// Processes in the guest: run a command (the agent's exec.run) and end every process but the
// desktop session.
#pragma once

#include <nlohmann/json.hpp>

#include "server/api/route_context.hpp"
#include "server/sandbox/agent_client.hpp"

namespace deskbox::server::routes {

HttpResponse run_command(RouteContext& context);     // POST /v1/sandboxes/{id}/commands
HttpResponse kill_processes(RouteContext& context);  // POST /v1/sandboxes/{id}/processes/kill

// A /commands body: {cmd | argv, env, cwd, timeout_s, background, stdin, stream}, each field
// read with its type (timeout_s by CommandRequest::read_timeout, the rule MCP's run_command
// shares); the agent checks the rest (one of cmd and argv, cwd a directory). Throws the
// request reader's SandboxError (invalid, bad_request) naming the field.
CommandRequest parse_command_body(const nlohmann::json& body);

// The /processes/kill body takes no fields ({} or empty).
void check_kill_processes_body(const nlohmann::json& body);

}  // namespace deskbox::server::routes
