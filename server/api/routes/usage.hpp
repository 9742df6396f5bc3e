// Usage and metrics (server/usage/): GET /v1/sandboxes/{id}/metrics (samples of a sandbox,
// running or ended within the keep window) and GET /v1/usage (sums over any period, grouped,
// JSON or CSV, with a cost column when the server has prices).
#pragma once

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse sandbox_metrics(RouteContext& context);
HttpResponse usage_report(RouteContext& context);

}  // namespace deskbox::server::routes
