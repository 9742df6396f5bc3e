// GET /metrics: Prometheus text of the server's figures: sandboxes by state, latency
// histograms, error counters, viewers, exposed ports, the sandboxes' egress and resource use,
// and deskboxd's own memory, heap, fds and threads.
#pragma once

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse metrics_page(RouteContext& context);

}  // namespace deskbox::server::routes
