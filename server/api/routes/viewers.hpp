// Routes for people watching sandboxes: the live stream WebSocket, RFB over WebSocket for
// noVNC, the viewer page with its assets, and the dashboard. The router has checked the
// sandbox's view or control token (or an API key) for the first three: browsers cannot set
// headers on WebSockets.
#pragma once

#include "server/api/route_context.hpp"
#include "streaming/live/live_stream.hpp"

namespace deskbox::server::routes {

HttpResponse stream_socket(RouteContext& context);   // GET /v1/sandboxes/{id}/stream (WS)
HttpResponse vnc_socket(RouteContext& context);      // GET /v1/sandboxes/{id}/vnc (WS)
HttpResponse viewer_page(RouteContext& context);     // GET /view/{id}
HttpResponse dashboard_page(RouteContext& context);  // GET|HEAD /
HttpResponse viewer_asset(RouteContext& context);    // GET|HEAD /assets/{name}

// ?codec=jpeg|h264&width=&height=&fps=&quality=&token= of the stream socket; throws ApiError
// 400 bad_request naming the parameter (also an unknown one or one out of range).
streaming::StreamSettings parse_stream_query(const Query& query);

}  // namespace deskbox::server::routes
