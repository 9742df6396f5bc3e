#include "server/api/routes/ports.hpp"

#include "common/parse_integer.hpp"
#include "server/api/auth.hpp"
#include "server/api/http_util.hpp"
#include "server/http/http_server.hpp"
#include "server/network/port_proxy.hpp"
#include "server/sandbox/sandbox.hpp"

namespace deskbox::server::routes {

namespace {

// The request's target as sent (still percent-encoded), split at '?'.
std::pair<std::string, std::string> raw_path_and_query(const HttpRequest& request) {
    std::string raw(request.target());
    auto qmark = raw.find('?');
    return {raw.substr(0, qmark), qmark == std::string::npos ? "" : raw.substr(qmark + 1)};
}

// The path form's target: the program sees the raw path after /v1/sandboxes/{id}/ports/{port}.
PortTarget path_port_target(const RouteContext& context) {
    const auto [raw_path, raw_query] = raw_path_and_query(context.request());
    PortTarget t;
    t.id = context.params.at("id");
    t.port = parse_port_number(context.params.at("port"));
    t.prefix = "/v1/sandboxes/" + t.id + "/ports/" + std::to_string(t.port);
    if (raw_path.rfind(t.prefix, 0) != 0)
        throw ApiError(400, "bad_request", "the sandbox id and port must not be percent-encoded",
                       "path");
    std::string program_path = raw_path.substr(t.prefix.size());
    if (program_path.empty() || program_path.front() != '/') program_path = "/" + program_path;
    t.target = program_path + query_without_credentials(raw_query);
    t.cookie_path = t.prefix;
    t.path_form = true;
    return t;
}

// A browser's first visit with ?token=: keep the token in a cookie for this port only and go
// on without it in the URL (pages then load their scripts and styles with the cookie).
HttpResponse token_cookie_redirect(const HttpRequest& request, const PortTarget& t,
                                   const std::string& token) {
    HttpResponse res{http::status::found, request.version()};
    res.set(http::field::location, t.path_form ? t.prefix + t.target : t.target);
    res.set(http::field::set_cookie, std::string(kTokenCookie) + "=" + token +
                                         "; Path=" + t.cookie_path + "; HttpOnly; SameSite=Lax");
    res.set(http::field::cache_control, "no-store");
    res.prepare_payload();
    return res;
}

}  // namespace

ApiError port_refusal() {
    return ApiError(401, "unauthorized",
                    "exposed ports need the sandbox's control_token (?token=, Authorization: "
                    "Bearer, or the deskbox_token cookie) or an API key");
}

std::uint16_t parse_port_number(const std::string& text) {
    auto n = parse_integer(text);
    if (!n || *n < 1 || *n > 65535)
        throw ApiError(400, "bad_request",
                       "port: expected 1..65535, got '" + text.substr(0, 16) + "'", "port");
    return static_cast<std::uint16_t>(*n);
}

std::optional<PortTarget> host_port_target(const HttpRequest& request,
                                           const std::string& ports_domain) {
    if (ports_domain.empty()) return std::nullopt;
    std::string host(request[http::field::host]);
    host =
        host.substr(0, host.rfind(':') == std::string::npos || host.find(']') != std::string::npos
                           ? host.size()
                           : host.rfind(':'));
    const std::string suffix = "." + ports_domain;
    if (host.size() <= suffix.size() ||
        host.compare(host.size() - suffix.size(), suffix.size(), suffix) != 0)
        return std::nullopt;
    std::string label = host.substr(0, host.size() - suffix.size());
    auto dash = label.find('-');
    if (dash == std::string::npos || label.find('.') != std::string::npos)
        throw ApiError(404, "not_found", "expected {port}-{sandbox id}." + ports_domain, "host");
    const auto [raw_path, raw_query] = raw_path_and_query(request);
    PortTarget t;
    t.port = parse_port_number(label.substr(0, dash));
    t.id = label.substr(dash + 1);
    t.target = (raw_path.empty() ? "/" : raw_path) + query_without_credentials(raw_query);
    t.cookie_path = "/";
    return t;
}

HttpResponse relay_to_port(RouteContext& context) {
    return relay(context, path_port_target(context));
}

HttpResponse relay(RouteContext& context, const PortTarget& t) {
    HttpRequest& request = context.request();
    Sandbox& sandbox = *context.sandbox;
    const std::string token = query_token(context);
    if (!port_access(context, sandbox)) throw port_refusal();
    auto net = sandbox.network();
    if (!net || !net->ports_reachable())
        throw ApiError(409, "port_unreachable",
                       "sandbox " + t.id +
                           " has no network to reach its ports through (a "
                           "microVM created with network: false has no NIC)",
                       "port");
    if (sandbox.status() != SandboxStatus::running)
        throw ApiError(409, "conflict", std::string("sandbox is ") + to_string(sandbox.status()));
    const bool upgrade = request.find(http::field::upgrade) != request.end();
    if (!token.empty() && constant_time_equal(token, sandbox.control_token()) && !upgrade &&
        (request.method() == http::verb::get || request.method() == http::verb::head))
        return token_cookie_redirect(request, t, token);
    if (!context.exchange.stream)  // in-process callers (the HTTP fuzzer)
        throw ApiError(400, "no_connection", "this request has no connection to forward");
    network::PortRequest forward;
    forward.request = std::move(request);
    forward.port = t.port;
    forward.target = t.target;
    if (t.path_form) {
        // Development servers check Host against localhost (their DNS-rebinding guard).
        forward.host = "localhost:" + std::to_string(t.port);
        forward.prefix = t.prefix;
    }
    // Nothing that proves who the client is reaches the program: not our key, not a token.
    remove_credential_headers(forward.request);
    forward.isolate = t.path_form;
    sandbox.audit("port", {{"port", t.port},
                           {"method", std::string(forward.request.method_string())},
                           {"target", t.target.substr(0, 256)}});
    network::start_port_proxy(std::move(*context.exchange.stream), std::move(forward), *net,
                              context.api.ports);
    context.exchange.taken = true;
    return HttpResponse{};
}

HttpResponse list_ports(RouteContext& context) {
    auto ports = listening_ports(*context.sandbox, context.api.options.ports_domain);
    if (ports.is_null())
        throw ApiError(409, "conflict", "the sandbox's agent cannot list its ports now");
    return json_response(200, {{"ports", ports}});
}

nlohmann::json listening_ports(Sandbox& sandbox, const std::string& ports_domain) {
    nlohmann::json out = nlohmann::json::array();
    // Asking a paused sandbox would wake it (auto_resume): looking at one must not.
    if (sandbox.status() != SandboxStatus::running) return out;
    try {
        const nlohmann::json listening =
            sandbox.agent_client().listening_ports(std::chrono::seconds(2));
        // A sandbox in a network namespace of ours (a container) is reached on its loopback
        // too; one behind a NIC (a microVM) only on its link.
        const auto net = sandbox.network();
        const bool loopback_reached =
            net && net->kind() == network::SandboxNetwork::Kind::container;
        for (auto& p : listening.value("ports", nlohmann::json::array())) {
            int port = p.value("port", 0);
            bool reachable = false;
            for (auto& a : p.value("addresses", nlohmann::json::array())) {
                std::string address = a.get<std::string>();
                reachable |= loopback_reached || (address != "127.0.0.1" && address != "::1" &&
                                                  address.rfind("127.", 0) != 0);
            }
            nlohmann::json entry = {
                {"port", port},
                {"addresses", p["addresses"]},
                {"reachable",
                 reachable && sandbox.network() && sandbox.network()->ports_reachable()},
                {"path", "/v1/sandboxes/" + sandbox.id() + "/ports/" + std::to_string(port) + "/"}};
            if (!ports_domain.empty())
                entry["host"] = std::to_string(port) + "-" + sandbox.id() + "." + ports_domain;
            out.push_back(std::move(entry));
        }
    } catch (const std::exception&) {
        return nullptr;  // not running, or an agent without net.listening: not known
    }
    return out;
}

}  // namespace deskbox::server::routes
