#include "server/api/sandbox_errors.hpp"

namespace deskbox::server {

unsigned http_status(SandboxFault fault) {
    switch (fault) {
        case SandboxFault::invalid:
            return 400;
        case SandboxFault::denied:
            return 403;
        case SandboxFault::not_found:
            return 404;
        case SandboxFault::conflict:
            return 409;
        case SandboxFault::too_large:
            return 413;
        case SandboxFault::unprocessable:
            return 422;
        case SandboxFault::over_capacity:
            return 429;
        case SandboxFault::failed:
            break;
        case SandboxFault::agent_failed:
            return 502;
        case SandboxFault::unavailable:
            return 503;
        case SandboxFault::timed_out:
            return 504;
        case SandboxFault::no_space:
            return 507;
    }
    return 500;
}

ApiError to_api_error(const SandboxError& e) {
    return ApiError(http_status(e.fault()), e.code(), e.what(), e.field());
}

}  // namespace deskbox::server
