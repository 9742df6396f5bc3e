// Processes in the guest: run a command (the agent's exec.run) and end every process but the
// desktop session.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse run_command(RouteContext& context);     // POST /v1/sandboxes/{id}/commands
HttpResponse kill_processes(RouteContext& context);  // POST /v1/sandboxes/{id}/processes/kill

// A /commands body: {cmd | argv, env, cwd, timeout_s, background, stdin, stream}. The agent
// checks the fields it runs with; the server takes stdin out (it travels as bytes) and reads
// timeout_s for how long to wait for the reply.
struct CommandRequest {
    nlohmann::json params;    // the body without stdin: exec.run's parameters
    std::string stdin_bytes;  // what the command reads
    double timeout_s = 60;    // the command's timeout (the agent's default when absent)
    // How long to wait for the agent: the command's timeout (at most a day) plus 15 s.
    std::chrono::milliseconds reply_timeout() const;
};
// Throws ApiError 400 bad_request naming the field: not an object, an unknown field, stdin
// not a string, timeout_s not a number of seconds.
CommandRequest parse_command_body(nlohmann::json body);

// The /processes/kill body takes no fields ({} or empty).
void check_kill_processes_body(const nlohmann::json& body);

}  // namespace deskbox::server::routes
