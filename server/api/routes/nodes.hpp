// The nodes of a cluster (--cluster): GET /v1/nodes, POST /v1/nodes/{name}/drain|undrain. A
// server without a cluster lists itself alone and refuses to drain.
#pragma once

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse list_nodes(RouteContext& context);    // GET /v1/nodes
HttpResponse drain_node(RouteContext& context);    // POST /v1/nodes/{name}/drain
HttpResponse undrain_node(RouteContext& context);  // POST /v1/nodes/{name}/undrain

}  // namespace deskbox::server::routes
