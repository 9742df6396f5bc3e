// Lifecycle events as server-sent events (server/events/): every sandbox's for an API key,
// one sandbox's for its own token. ?after=ID or Last-Event-ID resume after an event id (from the
// durable log); ?types=a,b keeps those types. The route takes over the connection.
#pragma once

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse stream_events(RouteContext& context);          // GET /v1/events
HttpResponse stream_sandbox_events(RouteContext& context);  // GET /v1/sandboxes/{id}/events

}  // namespace deskbox::server::routes
