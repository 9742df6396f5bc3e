// Named snapshots and forks (server/snapshots/, sandbox_copies.cpp): saved copies of sandboxes
// that outlive them, and copies of a running one.
#pragma once

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse create_snapshot(RouteContext& context);  // POST /v1/sandboxes/{id}/snapshots
HttpResponse list_snapshots(RouteContext& context);   // GET /v1/snapshots
HttpResponse get_snapshot(RouteContext& context);     // GET /v1/snapshots/{name}
HttpResponse delete_snapshot(RouteContext& context);  // DELETE /v1/snapshots/{name}
HttpResponse fork_sandbox(RouteContext& context);     // POST /v1/sandboxes/{id}/fork

}  // namespace deskbox::server::routes
