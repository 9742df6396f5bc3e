// The HTTP front door's reading of sandbox/'s domain errors: each SandboxFault's status, and a
// SandboxError as the ApiError the router answers with (the same code, message and field).
#pragma once

#include "server/http/api_error.hpp"
#include "server/sandbox/sandbox_error.hpp"

namespace deskbox::server {

unsigned http_status(SandboxFault fault);
ApiError to_api_error(const SandboxError& e);

}  // namespace deskbox::server
