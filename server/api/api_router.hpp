// Public API v1 of deskboxd: the front door HttpServer calls. It owns what the routes share
// (ApiServices) and runs each request through the admission stages (admission.hpp: target,
// Host, port host, UTF-8, route, Origin, credentials, owner node, handler), turning a refusal
// into its JSON error (JSON-RPC for /mcp). Every answer to a bad request is a JSON error naming
// the field; no input crashes the server.
#pragma once

#include <memory>

#include "server/api/api_routes.hpp"
#include "server/api/metrics.hpp"
#include "server/api/route_context.hpp"
#include "server/http/http_server.hpp"
#include "server/mcp/mcp_server.hpp"
#include "server/network/port_proxy.hpp"
#include "server/sandbox/sandbox_manager.hpp"
#include "server/stream/viewer_session.hpp"

namespace deskbox::server {

class ApiRouter {
  public:
    ApiRouter(SandboxManager& manager, ApiOptions options);
    HttpResponse handle(HttpExchange& exchange);
    // On a request's header alone, before its body is read (HttpServer's HeaderCheck): the
    // admission stages that need no body, and the route's body limit.
    HeaderDecision check_header(HttpRequest& header);
    Metrics& metrics() { return metrics_; }
    const ViewerCounters& viewers() const { return viewers_; }

  private:
    SandboxManager& manager_;
    ApiOptions options_;
    McpServer mcp_{manager_};
    Metrics metrics_;
    ViewerCounters viewers_;
    network::PortProxyCounters ports_;
    ApiServices services_{manager_, options_, metrics_, viewers_, ports_, mcp_};
};

}  // namespace deskbox::server
