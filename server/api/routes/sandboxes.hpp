// /v1/sandboxes and /v1/sandboxes/{id}: create, list, inspect, kill. The create request is
// validated by SandboxManager::create (server/sandbox/).
#pragma once

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse create_sandbox(RouteContext& context);   // POST /v1/sandboxes
HttpResponse list_sandboxes(RouteContext& context);   // GET /v1/sandboxes
HttpResponse inspect_sandbox(RouteContext& context);  // GET /v1/sandboxes/{id}
HttpResponse kill_sandbox(RouteContext& context);     // DELETE /v1/sandboxes/{id}

}  // namespace deskbox::server::routes
