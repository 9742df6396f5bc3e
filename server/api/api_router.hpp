// Public API v1 of deskboxd: routing, authentication, JSON errors, metrics. Every answer to a
// bad request is a JSON error naming the field; no input crashes the server.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "server/api/metrics.hpp"
#include "server/http/http_server.hpp"
#include "server/mcp/mcp_server.hpp"
#include "server/network/port_proxy.hpp"
#include "server/sandbox/sandbox_manager.hpp"
#include "server/stream/viewer_session.hpp"

namespace deskbox::server {

struct ApiOptions {
    std::vector<std::string> api_keys;  // empty: no key needed (loopback only)
    // Exposed ports by host name: {port}-{id}.<ports_domain> (empty: path form only).
    std::string ports_domain;
};

class ApiRouter {
  public:
    ApiRouter(SandboxManager& manager, ApiOptions options);
    HttpResponse handle(HttpExchange& exchange);
    Metrics& metrics() { return metrics_; }
    const ViewerCounters& viewers() const { return viewers_; }

  private:
    HttpResponse route(HttpRequest& request, const std::string& path,
                       const std::map<std::string, std::string>& query);
    HttpResponse sandbox_route(HttpRequest& request, const std::string& id, const std::string& rest,
                               const std::map<std::string, std::string>& query);
    HttpResponse recordings_route(HttpRequest& request, const std::string& rest);
    std::string egress_metrics() const;   // the sandboxes' egress counters for /metrics
    std::string usage_metrics() const;    // what each sandbox uses of its limits
    std::string process_metrics() const;  // deskboxd's own memory, heap, fds and threads
    bool authorised(const HttpRequest& request, const std::string& query_key = {}) const;

    // Routes for people watching (viewer_routes.cpp): the stream and VNC WebSockets, the viewer
    // page and its assets, the dashboard. nullopt: not one of them.
    std::optional<HttpResponse> viewer_route(HttpExchange& exchange, const std::string& path,
                                             std::map<std::string, std::string>& query,
                                             const std::string& query_key);
    // Exposed ports (port_routes.cpp): nullopt when the request is not for one.
    struct PortTarget {
        std::string id;
        std::uint16_t port = 0;
        std::string target;       // for the program
        std::string prefix;       // path form: /v1/sandboxes/{id}/ports/{port}
        std::string cookie_path;  // where the token cookie applies
        bool path_form = false;
    };
    std::optional<PortTarget> port_target(const HttpRequest& request,
                                          const std::string& path) const;
    std::optional<HttpResponse> port_route(HttpExchange& exchange, const std::string& path,
                                           const std::map<std::string, std::string>& query,
                                           const std::string& query_key);
    // What inspect lists under "ports"; null when the agent cannot say.
    nlohmann::json listening_ports(Sandbox& sandbox) const;

    enum class Access { none, view, control };
    // A sandbox's view or control token (query `token` or Authorization: Bearer), or an API key
    // (control).
    Access sandbox_access(const HttpRequest& request, const Sandbox& sandbox,
                          const std::map<std::string, std::string>& query,
                          const std::string& query_key) const;

    // Who may use /mcp: the API key (everything), or ?sandbox=ID with that sandbox's control
    // token (that sandbox only). Throws ApiError 401.
    McpAccess mcp_access(const HttpRequest& request,
                         const std::map<std::string, std::string>& query,
                         const std::string& query_key) const;

    SandboxManager& manager_;
    ApiOptions options_;
    McpServer mcp_{manager_};
    Metrics metrics_;
    ViewerCounters viewers_;
    network::PortProxyCounters ports_;
};

}  // namespace deskbox::server
