#include "server/api/api_router.hpp"

#include "server/api/auth.hpp"
#include "server/api/http_util.hpp"
#include "server/api/request_guard.hpp"
#include "server/api/routes/mcp.hpp"
#include "server/api/routes/ports.hpp"
#include "server/cluster/cluster_service.hpp"

namespace deskbox::server {

namespace {

// 400 invalid_utf8 naming where: the path, a query parameter or a header. Cookie is left out:
// a browser sends every cookie of the host name, also those of other programs on it.
void check_request_utf8(const RouteContext& context) {
    check_utf8(context.path, "path", "the path");
    check_utf8(context.query_key, "key", "query parameter key");
    for (const auto& [name, value] : context.query) {
        check_utf8(name, "query", "a query parameter name");
        check_utf8(value, name, "query parameter " + name);
    }
    for (const auto& header : context.request()) {
        if (header.name() == http::field::cookie) continue;
        std::string name(header.name_string());
        check_utf8(std::string_view(header.value().data(), header.value().size()), name,
                   "header " + name);
    }
}

// 405 naming the route's template, with its methods in Allow.
HttpResponse method_not_allowed(const HttpRequest& request, const ApiRoute& route) {
    std::string list;
    for (const auto& method : route.methods)
        list += (list.empty() ? "" : ", ") + std::string(http::to_string(method.verb));
    const ApiError refusal(405, "method_not_allowed",
                           std::string(request.method_string()) + " is not allowed on " +
                               std::string(route.path) + " (allowed: " + list + ")");
    auto answer = route.path == "/mcp" ? McpServer::error_answer(refusal)
                                       : json_error(405, refusal.code(), refusal.what());
    answer.set(http::field::allow, list);
    return answer;
}

}  // namespace

ApiRouter::ApiRouter(SandboxManager& manager, ApiOptions options)
    : manager_(manager), options_(std::move(options)) {}

RouteContext ApiRouter::context_for(HttpExchange& exchange) {
    const std::string target(exchange.request.target());
    const auto qmark = target.find('?');
    RouteContext context{services_, exchange, url_decode(target.substr(0, qmark), false)};
    if (qmark != std::string::npos)
        context.query = parse_query(std::string_view(target).substr(qmark + 1));
    // A browser cannot put our key in a header of a page load, an <img> or a WebSocket:
    // `key` in the query counts as the API key too (then it is not a query parameter).
    if (auto it = context.query.find(std::string(kKeyParameter)); it != context.query.end()) {
        context.query_key = it->second;
        context.query.erase(it);
    }
    return context;
}

HttpResponse ApiRouter::handle(HttpExchange& exchange) {
    metrics_.count_request();
    bool mcp = false;  // its clients read JSON-RPC errors, also for what fails before it
    try {
        RouteContext context = context_for(exchange);
        const RouteMatch match = match_api_route(context.path);
        mcp = match && match.route->path == "/mcp";
        return dispatch(context, match);
    } catch (const ApiError& e) {
        metrics_.count_error(e.code());
        if (mcp) return McpServer::error_answer(e);
        return json_error(e.status(), e.code(), e.what(), e.field());
    } catch (const std::exception& e) {
        metrics_.count_error("internal");
        return json_error(500, "internal", e.what());
    }
}

HeaderDecision ApiRouter::check_header(HttpRequest& header) {
    HeaderDecision decision;
    decision.body_limit = options_.max_json_body;
    bool mcp = false;
    try {
        HttpExchange exchange{header, nullptr};
        RouteContext context = context_for(exchange);
        const RouteMatch match = match_api_route(context.path);
        mcp = match && match.route->path == "/mcp";
        decision.refusal = preflight(context, match, decision.body_limit);
    } catch (const ApiError& e) {
        metrics_.count_error(e.code());
        decision.refusal = mcp ? McpServer::error_answer(e)
                               : json_error(e.status(), e.code(), e.what(), e.field());
    }
    if (decision.refusal) metrics_.count_request();
    return decision;
}

std::optional<HttpResponse> ApiRouter::preflight(RouteContext& context, const RouteMatch& match,
                                                 std::size_t& body_limit) {
    const HttpRequest& request = context.request();
    body_limit = options_.max_json_body;
    // A web page that rebound its name to this address is refused before anything else.
    check_host(request, options_);
    // An exposed port by host name ({port}-{id}.<ports domain>) is relayed whatever the path;
    // the program decides what Origins it takes.
    if (auto port = routes::host_port_target(request, options_.ports_domain)) {
        body_limit = options_.max_upload_body;
        if (options_.cluster) return std::nullopt;  // its owner checks the token
        context.sandbox = resolve_for_token(context, port->id, routes::port_refusal());
        if (!port_access(context, *context.sandbox)) throw routes::port_refusal();
        return std::nullopt;
    }
    const ApiRoute* route = match.route;
    // An exposed port's program gets the request as sent; our own routes are UTF-8 only.
    if (!route || !route->as_sent) check_request_utf8(context);
    if (!route)
        throw ApiError(404, "not_found", "no such endpoint: " + context.path.substr(0, 256));
    if (!route->handler_for(request.method())) {
        metrics_.count_error("method_not_allowed");
        return method_not_allowed(request, *route);
    }
    if (route->large_body) body_limit = options_.max_upload_body;
    // Cross-site requests may not change state, nor speak MCP (its specification asks servers
    // to check Origin). Exposed ports' programs decide for themselves.
    if (!route->as_sent && (changes_state(request.method()) || route->path == "/mcp"))
        check_origin(request, options_);
    context.params = match.params;
    if (route->per_sandbox() && options_.cluster) {
        // The owner checks a sandbox's tokens (only it knows them); an API key is checked here
        // too, so a stranger cannot make this node talk to the others.
        if (route->auth == RouteAuth::api_key) require_api_key(context);
        return std::nullopt;
    }
    admit(context, *route);
    return std::nullopt;
}

HttpResponse ApiRouter::dispatch(RouteContext& context, const RouteMatch& match) {
    std::size_t body_limit = 0;
    if (auto refusal = preflight(context, match, body_limit)) return std::move(*refusal);
    // In-process callers (tests, the fuzzer) have no HttpServer to hold them to the limit.
    if (context.request().body().size() > body_limit)
        throw ApiError(413, "payload_too_large",
                       "request body is over this endpoint's limit of " +
                           std::to_string(body_limit) + " bytes");
    if (auto port = routes::host_port_target(context.request(), options_.ports_domain)) {
        if (auto answer = route_to_owner(context, port->id)) return std::move(*answer);
        context.sandbox = resolve_for_token(context, port->id, routes::port_refusal());
        return routes::relay(context, *port);
    }
    const ApiRoute& route = *match.route;
    if (route.per_sandbox() && options_.cluster) {
        if (auto answer = route_to_owner(context, context.params.at("id")))
            return std::move(*answer);
        admit(context, route);
    }
    return route.handler_for(context.request().method())(context);
}

std::optional<HttpResponse> ApiRouter::route_to_owner(RouteContext& context,
                                                      const std::string& id) {
    if (!options_.cluster) return std::nullopt;
    return options_.cluster->route(context.exchange, id);
}

void ApiRouter::require_api_key(RouteContext& context) const {
    if (!api_key_valid(context))
        throw ApiError(401, "unauthorized", "missing or wrong API key (Authorization: Bearer KEY)");
    context.access = Access::control;
}

void ApiRouter::require_cluster_secret(const RouteContext& context) const {
    if (!options_.cluster)
        throw ApiError(404, "not_found", "this server is not a node of a cluster (--cluster)");
    if (!options_.cluster->secret_valid(context.request()))
        throw ApiError(401, "unauthorized",
                       "a route between the nodes of a cluster: the cluster secret is required");
}

void ApiRouter::admit(RouteContext& context, const ApiRoute& route) {
    if (route.auth == RouteAuth::api_key) require_api_key(context);
    if (route.auth == RouteAuth::cluster_secret) require_cluster_secret(context);
    if (route.auth == RouteAuth::sandbox_token) {
        const ApiError refusal(401, "unauthorized",
                               "missing or wrong token: pass the sandbox's view_token or "
                               "control_token as ?token=");
        context.sandbox = resolve_for_token(context, context.params.at("id"), refusal);
        context.access = sandbox_access(context, *context.sandbox);
        if (context.access == Access::none) throw refusal;
    } else if (route.as_sent) {  // an exposed port, path form
        context.sandbox =
            resolve_for_token(context, context.params.at("id"), routes::port_refusal());
        if (!port_access(context, *context.sandbox)) throw routes::port_refusal();
    } else if (route.per_sandbox()) {
        context.sandbox = resolve_sandbox(context.params.at("id"));
    } else if (route.path == "/mcp") {
        routes::mcp_access(context);  // 401 before the body is read
    }
}

std::shared_ptr<Sandbox> ApiRouter::resolve_sandbox(const std::string& id) const {
    return manager_.find(id);
}

std::shared_ptr<Sandbox> ApiRouter::resolve_for_token(RouteContext& context, const std::string& id,
                                                      const ApiError& unauthorized) const {
    try {
        return resolve_sandbox(id);
    } catch (const ApiError& e) {
        const bool may_know = !options_.api_keys.empty() && api_key_valid(context);
        if (e.status() == 404 && !may_know) throw unauthorized;
        throw;
    }
}

}  // namespace deskbox::server
