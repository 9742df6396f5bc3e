// Exposed ports: /v1/sandboxes/{id}/ports/{port}/... (path form) and {port}-{id}.<ports domain>
// (host-name form, for apps that must live at "/"), relayed by server/network/port_proxy. The
// sandbox's control token (?token=, Authorization: Bearer, or the deskbox_token cookie a first
// ?token= visit sets) or an API key authorises; a view token does not.
#include "server/api/api_router.hpp"
#include "server/api/http_util.hpp"
#include "server/network/port_proxy.hpp"

#include "common/parse_integer.hpp"

namespace deskbox::server {
namespace {

constexpr const char* kTokenCookie = "deskbox_token";

// The raw query without deskbox's own parameters, for the program behind the port.
std::string program_query(std::string_view raw_query) {
    std::string out;
    std::size_t start = 0;
    while (start <= raw_query.size() && !raw_query.empty()) {
        auto end = raw_query.find('&', start);
        std::string_view item = raw_query.substr(
            start, end == std::string_view::npos ? std::string_view::npos : end - start);
        std::string_view key = item.substr(0, item.find('='));
        if (!item.empty() && key != "token" && key != "key") {
            out += out.empty() ? "?" : "&";
            out += item;
        }
        if (end == std::string_view::npos) break;
        start = end + 1;
    }
    return out;
}

std::uint16_t port_number(const std::string& text) {
    auto n = parse_integer(text);
    if (!n || *n < 1 || *n > 65535)
        throw ApiError(400, "bad_request",
                       "port: expected 1..65535, got '" + text.substr(0, 16) + "'", "port");
    return static_cast<std::uint16_t>(*n);
}

}  // namespace

std::optional<ApiRouter::PortTarget> ApiRouter::port_target(const HttpRequest& request,
                                                            const std::string& path) const {
    std::string raw(request.target());
    auto qmark = raw.find('?');
    std::string raw_path = raw.substr(0, qmark);
    std::string raw_query = qmark == std::string::npos ? "" : raw.substr(qmark + 1);
    // Host-name form: {port}-{id}.<ports domain>, any path.
    if (!options_.ports_domain.empty()) {
        std::string host(request[http::field::host]);
        host = host.substr(
            0, host.rfind(':') == std::string::npos || host.find(']') != std::string::npos
                   ? host.size()
                   : host.rfind(':'));
        const std::string suffix = "." + options_.ports_domain;
        if (host.size() > suffix.size() &&
            host.compare(host.size() - suffix.size(), suffix.size(), suffix) == 0) {
            std::string label = host.substr(0, host.size() - suffix.size());
            auto dash = label.find('-');
            if (dash == std::string::npos || label.find('.') != std::string::npos)
                throw ApiError(404, "not_found",
                               "expected {port}-{sandbox id}." + options_.ports_domain, "host");
            PortTarget t;
            t.port = port_number(label.substr(0, dash));
            t.id = label.substr(dash + 1);
            t.target = (raw_path.empty() ? "/" : raw_path) + program_query(raw_query);
            t.cookie_path = "/";
            return t;
        }
    }
    const std::string prefix = "/v1/sandboxes/";
    if (path.rfind(prefix, 0) != 0) return std::nullopt;
    std::string rest = path.substr(prefix.size());
    auto slash = rest.find('/');
    if (slash == std::string::npos || rest.compare(slash, 7, "/ports/") != 0) return std::nullopt;
    PortTarget t;
    t.id = rest.substr(0, slash);
    std::string after = rest.substr(slash + 7);
    auto port_end = after.find('/');
    t.port = port_number(after.substr(0, port_end));
    t.prefix = prefix + t.id + "/ports/" + std::to_string(t.port);
    // The program sees the raw (still encoded) path after the prefix.
    if (raw_path.rfind(t.prefix, 0) != 0)
        throw ApiError(400, "bad_request", "the sandbox id and port must not be percent-encoded",
                       "path");
    std::string program_path = raw_path.substr(t.prefix.size());
    if (program_path.empty() || program_path.front() != '/') program_path = "/" + program_path;
    t.target = program_path + program_query(raw_query);
    t.cookie_path = t.prefix;
    t.path_form = true;
    return t;
}

std::optional<HttpResponse> ApiRouter::port_route(HttpExchange& exchange, const std::string& path,
                                                  const std::map<std::string, std::string>& query,
                                                  const std::string& query_key) {
    HttpRequest& request = exchange.request;
    auto t = port_target(request, path);
    if (!t) return std::nullopt;
    auto sandbox = manager_.find(t->id);  // 404 for unknown ids
    std::string cookie =
        network::cookie_value(std::string(request[http::field::cookie]), kTokenCookie);
    std::string bearer_token;
    if (auto it = request.find(http::field::authorization); it != request.end()) {
        std::string value(it->value());
        if (value.rfind("Bearer ", 0) == 0) bearer_token = value.substr(7);
    }
    const std::string query_token = query.count("token") ? query.at("token") : std::string();
    bool allowed = false;
    for (const std::string& given : {query_token, bearer_token, cookie})
        allowed |= !given.empty() && constant_time_equal(given, sandbox->control_token());
    if (!allowed && !options_.api_keys.empty()) allowed = authorised(request, query_key);
    if (!allowed)
        throw ApiError(401, "unauthorized",
                       "exposed ports need the sandbox's control_token (?token=, Authorization: "
                       "Bearer, or the deskbox_token cookie) or an API key");
    auto net = sandbox->network();
    if (!net || !net->ports_reachable())
        throw ApiError(409, "port_unreachable",
                       "sandbox " + t->id +
                           " has no network to reach its ports through (a "
                           "microVM created with network: false has no NIC)",
                       "port");
    if (sandbox->status() != SandboxStatus::running)
        throw ApiError(409, "conflict", std::string("sandbox is ") + to_string(sandbox->status()));
    // A browser's first visit with ?token=: keep the token in a cookie for this port only and
    // go on without it in the URL (pages then load their scripts and styles with the cookie).
    const bool upgrade = request.find(http::field::upgrade) != request.end();
    if (!query_token.empty() && !upgrade &&
        (request.method() == http::verb::get || request.method() == http::verb::head)) {
        HttpResponse res{http::status::found, request.version()};
        std::string location = t->path_form ? t->prefix + t->target : t->target;
        res.set(http::field::location, location);
        res.set(http::field::set_cookie, std::string(kTokenCookie) + "=" + query_token + "; Path=" +
                                             t->cookie_path + "; HttpOnly; SameSite=Lax");
        res.set(http::field::cache_control, "no-store");
        res.prepare_payload();
        return res;
    }
    if (!exchange.stream)  // in-process callers (the HTTP fuzzer)
        throw ApiError(400, "no_connection", "this request has no connection to forward");
    network::PortRequest forward;
    forward.request = std::move(request);
    forward.port = t->port;
    forward.target = t->target;
    if (t->path_form) {
        // Development servers check Host against localhost (their DNS-rebinding guard).
        forward.host = "localhost:" + std::to_string(t->port);
        forward.prefix = t->prefix;
    }
    forward.strip_bearer = bearer_token;
    sandbox->audit("port", {{"port", t->port},
                            {"method", std::string(forward.request.method_string())},
                            {"target", t->target.substr(0, 256)}});
    network::start_port_proxy(std::move(*exchange.stream), std::move(forward), *net, ports_);
    exchange.taken = true;
    return HttpResponse{};
}

nlohmann::json ApiRouter::listening_ports(Sandbox& sandbox) const {
    nlohmann::json out = nlohmann::json::array();
    try {
        auto reply =
            sandbox.call("net.listening", nlohmann::json::object(), {}, std::chrono::seconds(2));
        // A sandbox in a network namespace of ours (a container) is reached on its loopback
        // too; one behind a NIC (a microVM) only on its link.
        const auto net = sandbox.network();
        const bool loopback_reached =
            net && net->kind() == network::SandboxNetwork::Kind::container;
        for (auto& p : reply.result.value("ports", nlohmann::json::array())) {
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
            if (!options_.ports_domain.empty())
                entry["host"] =
                    std::to_string(port) + "-" + sandbox.id() + "." + options_.ports_domain;
            out.push_back(std::move(entry));
        }
    } catch (const std::exception&) {
        return nullptr;  // not running, or an agent without net.listening: not known
    }
    return out;
}

}  // namespace deskbox::server
