// What goes wrong in sandbox/, in its own terms: a fault (what kind of failure), a machine code
// (the same codes the API answers with), a message for people and the field at fault. sandbox/
// knows no protocol; the front doors (server/api/sandbox_errors.hpp for HTTP, server/mcp/ for
// tool errors) turn a fault into their own answer.
#pragma once

#include <array>
#include <stdexcept>
#include <string>

namespace deskbox::server {

enum class SandboxFault {
    invalid,        // the request is wrong: a field's type, range or combination, or unsupported
    denied,         // the guest refused it: the guest user may not touch that path
    not_found,      // what the request names does not exist (a sandbox, a path, a snapshot)
    conflict,       // the sandbox's state, or what exists, does not allow it now (paused, exists)
    too_large,      // the guest refused it for its size
    unprocessable,  // well-formed, but what it names cannot be used (a target not on screen)
    over_capacity,  // a limit of this server is reached (sandboxes, waits): try again later
    failed,         // the server's own side failed (runtime, template, snapshot store)
    agent_failed,   // the guest's agent failed, or did not start
    unavailable,    // the sandbox cannot answer now (its agent is gone or reconnecting)
    timed_out,      // the agent or the screen did not answer in time
    no_space,       // the disk cannot hold it
};

// Every fault, for tables that must cover them all.
inline constexpr std::array kSandboxFaults = {
    SandboxFault::invalid,       SandboxFault::denied,    SandboxFault::not_found,
    SandboxFault::conflict,      SandboxFault::too_large, SandboxFault::unprocessable,
    SandboxFault::over_capacity, SandboxFault::failed,    SandboxFault::agent_failed,
    SandboxFault::unavailable,   SandboxFault::timed_out, SandboxFault::no_space,
};

class SandboxError : public std::runtime_error {
  public:
    SandboxError(SandboxFault fault, std::string code, const std::string& message,
                 std::string field = {})
        : std::runtime_error(message),
          fault_(fault),
          code_(std::move(code)),
          field_(std::move(field)) {}
    SandboxFault fault() const { return fault_; }
    const std::string& code() const { return code_; }
    const std::string& field() const { return field_; }

  private:
    SandboxFault fault_;
    std::string code_;
    std::string field_;
};

// A request field that is wrong: "field: reason" (just the reason without a field), code
// bad_request.
inline SandboxError invalid_field(const std::string& field, const std::string& reason) {
    return SandboxError(SandboxFault::invalid, "bad_request",
                        field.empty() ? reason : field + ": " + reason, field);
}

}  // namespace deskbox::server
