// Processes in the guest: run a command (the agent's exec.run) and end every process but the
// desktop session.
#pragma once

#include <nlohmann/json.hpp>

#include "server/api/route_context.hpp"
#include "server/sandbox/agent_client.hpp"

namespace deskbox::server::routes {

HttpResponse run_command(RouteContext& context);     // POST /v1/sandboxes/{id}/commands
HttpResponse kill_processes(RouteContext& context);  // POST /v1/sandboxes/{id}/processes/kill
HttpResponse list_commands(RouteContext& context);   // GET /v1/sandboxes/{id}/commands
// POST /v1/sandboxes/{id}/commands/{pid}/stdin (?eof=true closes it after the body)
HttpResponse write_command_stdin(RouteContext& context);
HttpResponse kill_command(RouteContext& context);  // POST /v1/sandboxes/{id}/commands/{pid}/kill

// A stream command's events as server-sent events, `event: NAME` then `data: JSON`:
// start {"pid"}, stdout/stderr {"pid","stream","data","data_b64"?}, then exit {"pid",
// "exit_code","signal"?,"duration_ms"} or error {"code","message"} (the agent went away).
std::string command_sse(const std::string& event, const nlohmann::json& data);

// The {pid} of /commands/{pid}/...: a positive integer, else bad_request naming "pid".
long long parse_command_pid(const std::string& text);
// The /commands/{pid}/kill body: {} or {"signal": NAME | NUMBER} (default "KILL").
nlohmann::json parse_kill_command_body(const nlohmann::json& body);

// A /commands body: {cmd | argv, env, cwd, timeout_s, background, stdin, stdin_open, stream}, each
// field read with its type (timeout_s by CommandRequest::read_timeout, the rule MCP's run_command
// shares); the agent checks the rest (one of cmd and argv, cwd a directory). Throws the
// request reader's SandboxError (invalid, bad_request) naming the field.
CommandRequest parse_command_body(const nlohmann::json& body);

// The /processes/kill body takes no fields ({} or empty).
void check_kill_processes_body(const nlohmann::json& body);

}  // namespace deskbox::server::routes
