// Public API v1 of deskboxd: the dispatcher. It decodes the target, finds the route in the
// table (api_routes.hpp), refuses what the table does not list (404, 405), checks the route's
// credentials, resolves the sandbox of a per-sandbox route and calls the route's handler
// (server/api/routes/). Every answer to a bad request is a JSON error naming the field; no
// input crashes the server.
#pragma once

#include <memory>
#include <optional>
#include <string>

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
    // same Host, Origin, route and credential checks as handle(), and the route's body limit.
    HeaderDecision check_header(HttpRequest& header);
    Metrics& metrics() { return metrics_; }
    const ViewerCounters& viewers() const { return viewers_; }

  private:
    // The context of a request: its decoded path, query and ?key=.
    RouteContext context_for(HttpExchange& exchange);
    HttpResponse dispatch(RouteContext& context, const RouteMatch& match);
    // Everything decided before a handler runs, on the header only: Host, Origin, the route
    // (404, 405), credentials (401). Sets `body_limit` to the route's; a 405 is returned.
    std::optional<HttpResponse> preflight(RouteContext& context, const RouteMatch& match,
                                          std::size_t& body_limit);
    // 401 unless the request may call `route`; then context.access and, for a per-sandbox
    // route, context.sandbox are set.
    void admit(RouteContext& context, const ApiRoute& route);
    void require_api_key(RouteContext& context) const;               // 401 without a valid key
    void require_cluster_secret(const RouteContext& context) const;  // 404 or 401
    // In a cluster, the answer for a sandbox another node owns (forwarded, relayed, or 503 when
    // its node is lost); nullopt when this node serves it.
    std::optional<HttpResponse> route_to_owner(RouteContext& context, const std::string& id);
    // The one place a sandbox id from a request becomes a Sandbox (404 if there is none here).
    std::shared_ptr<Sandbox> resolve_sandbox(const std::string& id) const;
    // For routes a sandbox's own token opens: the sandbox, or, for an id that is not here,
    // the 401 a wrong token gets unless an API key shows the caller may know (then 404).
    std::shared_ptr<Sandbox> resolve_for_token(RouteContext& context, const std::string& id,
                                               const ApiError& unauthorized) const;

    SandboxManager& manager_;
    ApiOptions options_;
    McpServer mcp_{manager_};
    Metrics metrics_;
    ViewerCounters viewers_;
    network::PortProxyCounters ports_;
    ApiServices services_{manager_, options_, metrics_, viewers_, ports_, mcp_};
};

}  // namespace deskbox::server
