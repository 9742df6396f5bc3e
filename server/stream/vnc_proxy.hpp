// RFB over WebSocket (GET /v1/sandboxes/{id}/vnc), so noVNC connects through deskboxd: binary
// WebSocket messages relayed both ways to the sandbox's VNC server on loopback. The VNC
// password handshake passes through untouched (the client still needs the password from
// inspect: the full one controls, the view-only one watches); the token decides whether the
// connection is allowed at all.
#pragma once

#include <memory>

#include "server/http/api_error.hpp"
#include "server/http/http_server.hpp"
#include "server/sandbox/sandbox.hpp"
#include "server/stream/viewer_session.hpp"

namespace deskbox::server {

// Takes over the exchange's connection (exchange.taken is set). Throws ApiError (before
// taking it) if the sandbox has no VNC server.
void start_vnc_proxy(HttpExchange& exchange, std::shared_ptr<Sandbox> sandbox,
                     ViewerCounters& counters);

}  // namespace deskbox::server
