// The stages of admission.hpp but the two of credentials (admission_credentials.cpp).
#include "server/api/admission.hpp"

#include "server/api/auth.hpp"
#include "server/api/request_guard.hpp"
#include "server/cluster/cluster_service.hpp"
#include "server/http/json_body.hpp"
#include "server/http/query.hpp"
#include "server/mcp/mcp_server.hpp"

namespace deskbox::server {

Admission::Admission(ApiServices& services, HttpExchange& exchange, AdmissionPhase phase)
    : context{services, exchange, {}},
      phase(phase),
      owners(services.options.cluster),
      body_limit(services.options.max_json_body) {}

bool Admission::owner_decides() const {
    return owners && (port || (match && match.route->per_sandbox()));
}

bool Admission::for_mcp() const {
    return match && match.route->path == "/mcp";
}

AdmissionAnswer admit(Admission& a) {
    for (const AdmissionStage& stage : kAdmission) {
        if (a.phase == AdmissionPhase::header && !stage.on_header) continue;
        if (auto answer = stage.run(a)) return answer;
    }
    return std::nullopt;
}

namespace admission {

namespace {

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

AdmissionAnswer decode_target(Admission& a) {
    RouteContext& context = a.context;
    const std::string target(context.request().target());
    const auto qmark = target.find('?');
    context.path = url_decode(target.substr(0, qmark), false);
    if (qmark != std::string::npos)
        context.query = parse_query(std::string_view(target).substr(qmark + 1));
    // A browser cannot put our key in a header of a page load, an <img> or a WebSocket:
    // `key` in the query counts as the API key too (then it is not a query parameter).
    if (auto it = context.query.find(std::string(kKeyParameter)); it != context.query.end()) {
        context.query_key = it->second;
        context.query.erase(it);
    }
    a.match = match_api_route(context.path);
    return std::nullopt;
}

AdmissionAnswer check_host_name(Admission& a) {
    // A web page that rebound its name to this address is refused before anything else.
    check_host(a.context.request(), a.context.api.options);
    return std::nullopt;
}

AdmissionAnswer find_port_host(Admission& a) {
    // The program behind the port decides what paths, bytes and Origins it takes.
    a.port = routes::host_port_target(a.context.request(), a.context.api.options.ports_domain);
    if (a.port) a.body_limit = a.context.api.options.max_upload_body;
    return std::nullopt;
}

AdmissionAnswer check_utf8(Admission& a) {
    // An exposed port's program gets the request as sent; our own routes are UTF-8 only.
    if (a.port || (a.match && a.match.route->as_sent)) return std::nullopt;
    const RouteContext& context = a.context;
    server::check_utf8(context.path, "path", "the path");
    server::check_utf8(context.query_key, "key", "query parameter key");
    for (const auto& [name, value] : context.query) {
        server::check_utf8(name, "query", "a query parameter name");
        server::check_utf8(value, name, "query parameter " + name);
    }
    // Not Cookie: a browser sends every cookie of the host name, also other programs' on it.
    for (const auto& header : context.request()) {
        if (header.name() == http::field::cookie) continue;
        std::string name(header.name_string());
        server::check_utf8(std::string_view(header.value().data(), header.value().size()), name,
                           "header " + name);
    }
    return std::nullopt;
}

AdmissionAnswer match_route(Admission& a) {
    if (a.port) return std::nullopt;
    const ApiRoute* route = a.match.route;
    if (!route)
        throw ApiError(404, "not_found", "no such endpoint: " + a.context.path.substr(0, 256));
    if (!route->handler_for(a.context.request().method())) {
        a.context.api.metrics.count_error("method_not_allowed");
        return method_not_allowed(a.context.request(), *route);
    }
    if (route->large_body) a.body_limit = a.context.api.options.max_upload_body;
    a.context.params = a.match.params;
    return std::nullopt;
}

AdmissionAnswer check_cross_site(Admission& a) {
    // Cross-site requests may not change state, nor speak MCP (its specification asks servers
    // to check Origin). Exposed ports' programs decide for themselves.
    if (a.port || a.match.route->as_sent) return std::nullopt;
    const HttpRequest& request = a.context.request();
    if (changes_state(request.method()) || a.for_mcp())
        check_origin(request, a.context.api.options);
    return std::nullopt;
}

AdmissionAnswer check_body_size(Admission& a) {
    if (a.context.request().body().size() > a.body_limit)
        throw ApiError(413, "payload_too_large",
                       "request body is over this endpoint's limit of " +
                           std::to_string(a.body_limit) + " bytes");
    return std::nullopt;
}

AdmissionAnswer route_to_owner(Admission& a) {
    if (!a.owner_decides()) return std::nullopt;
    return a.owners->route(a.context.exchange, a.port ? a.port->id : a.context.params.at("id"));
}

AdmissionAnswer run_handler(Admission& a) {
    if (a.port) return routes::relay(a.context, *a.port);
    return a.match.route->handler_for(a.context.request().method())(a.context);
}

}  // namespace admission

}  // namespace deskbox::server
