// What a route handler is given: the request, the variables of its path template ({id},
// {port}, {path}, {name}), the query, who is asking, and, for a route under a sandbox, the
// sandbox admission resolved. Handlers are plain functions of this context
// (server/api/routes/), so each can be called and tested without the rest of the router.
// Sandbox is only declared here: a route reaches the part of its sandbox it uses through the
// accessors below and includes that part's header, not all of sandbox.hpp.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/api/metrics.hpp"
#include "server/http/http_message.hpp"

namespace deskbox::network {
struct PortProxyCounters;
}

namespace deskbox::server {

class SandboxManager;
class McpServer;
class ClusterService;
namespace events {
class EventService;
}
namespace usage {
class UsageService;
}
struct ViewerCounters;
class Sandbox;
struct SandboxConfig;
class SandboxScreen;
class SandboxInput;
class SandboxMedia;
class AgentClient;

struct ApiOptions {
    std::vector<std::string> api_keys;  // empty: no key needed (loopback only)
    // Exposed ports by host name: {port}-{id}.<ports_domain> (empty: path form only).
    std::string ports_domain;
    // The cluster this node is a member of (--cluster), or null: a single node. Not owned.
    ClusterService* cluster = nullptr;
    // Lifecycle events (server/events/): what GET /v1/events streams, or null (503). Not owned.
    events::EventService* events = nullptr;
    // The usage ledger and sampler (server/usage/), or null: the usage and metrics routes answer
    // 404 and inspect has no running totals. Not owned.
    usage::UsageService* usage = nullptr;
    // Without an API key, Host names answered besides loopback ones (--allowed-host) and
    // ports_domain's: a foreign Host is a DNS-rebinding page and gets 421.
    std::vector<std::string> allowed_hosts{};
    // Origins (scheme://host[:port]) besides the request's own that may send state-changing
    // requests and use /mcp (--allowed-origin).
    std::vector<std::string> allowed_origins{};
    // Body limits by route: small JSON bodies, and uploads (files, commands' stdin, images to
    // locate, exposed ports) up to the HTTP server's limit (--max-body-mb).
    std::size_t max_json_body = 1 << 20;
    std::size_t max_upload_body = 64 << 20;
};

// What every route may use, for the server's lifetime (owned by ApiRouter).
struct ApiServices {
    SandboxManager& manager;
    const ApiOptions& options;
    Metrics& metrics;
    ViewerCounters& viewers;
    network::PortProxyCounters& ports;
    McpServer& mcp;
};

// What the request's credentials allow on a sandbox.
enum class Access { none, view, control };

using Query = std::map<std::string, std::string>;
using RouteParams = std::map<std::string, std::string, std::less<>>;

struct RouteContext {
    ApiServices& api;
    HttpExchange& exchange;
    std::string path;         // URL-decoded, without the query
    Query query{};            // without `key`
    std::string query_key{};  // ?key=: the API key in the URL, for browsers (page loads, sockets)
    RouteParams params{};     // the template's variables by name: "id", "port", "path", "name"
    // Routes under a sandbox (/v1/sandboxes/{id}/..., /view/{id}): the one {id} names.
    std::shared_ptr<Sandbox> sandbox{};
    // An API key: control; on a sandbox-token route, what the sandbox's token allows.
    Access access = Access::none;

    HttpRequest& request() const;  // exchange.request

    // The parts of `sandbox` (route_context.cpp); only for routes under a sandbox.
    const SandboxConfig& config() const;  // what it was created with (size, template...)
    SandboxScreen& screen() const;
    SandboxInput& input() const;
    SandboxMedia& media() const;
    AgentClient& agent() const;  // its agent's methods, typed
};

using RouteHandler = HttpResponse (*)(RouteContext& context);

}  // namespace deskbox::server
