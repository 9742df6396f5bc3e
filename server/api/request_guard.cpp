#include "server/api/request_guard.hpp"

#include <cctype>

#include "server/http/api_error.hpp"
#include "server/http/header_text.hpp"

namespace deskbox::server {

namespace {

std::string_view view(boost::beast::string_view text) {
    return {text.data(), text.size()};
}

bool under_domain(const std::string& name, const std::string& domain) {
    if (domain.empty()) return false;
    return name == domain ||
           (name.size() > domain.size() + 1 &&
            name.compare(name.size() - domain.size(), domain.size(), domain) == 0 &&
            name[name.size() - domain.size() - 1] == '.');
}

// "scheme://authority" of an origin, lower-case, without a trailing slash.
std::string normal_origin(std::string_view origin) {
    std::string out = ascii_lowercase(trim_blanks(origin));
    while (!out.empty() && out.back() == '/') out.pop_back();
    return out;
}

}  // namespace

std::string host_name(std::string_view host_header) {
    std::string host = ascii_lowercase(trim_blanks(host_header));
    if (!host.empty() && host.front() == '[') {
        auto close = host.find(']');
        return close == std::string::npos ? host : host.substr(0, close + 1);
    }
    if (auto colon = host.rfind(':'); colon != std::string::npos) host.resize(colon);
    while (!host.empty() && host.back() == '.') host.pop_back();
    return host;
}

bool is_loopback_host(std::string_view name) {
    if (name == "localhost" || name == "[::1]") return true;
    if (!name.starts_with("127.")) return false;
    int dots = 0;
    for (char c : name) {
        if (c == '.')
            ++dots;
        else if (!std::isdigit(static_cast<unsigned char>(c)))
            return false;
    }
    return dots == 3;
}

void check_host(const HttpRequest& request, const ApiOptions& options) {
    if (!options.api_keys.empty()) return;  // the key protects; any name may reach it
    auto it = request.find(http::field::host);
    if (it == request.end()) return;
    const std::string name = host_name(view(it->value()));
    if (is_loopback_host(name) || under_domain(name, options.ports_domain)) return;
    for (const auto& allowed : options.allowed_hosts)
        if (name == host_name(allowed)) return;
    throw ApiError(421, "misdirected_request",
                   "this server has no API key and answers only to localhost, 127.0.0.1 and "
                   "[::1] (and --allowed-host names), not to Host '" +
                       std::string(it->value().substr(0, 128)) +
                       "': a web page may have rebound its name to this address",
                   "host");
}

void check_origin(const HttpRequest& request, const ApiOptions& options) {
    auto it = request.find(http::field::origin);
    if (it == request.end()) return;
    const std::string origin = normal_origin(view(it->value()));
    const auto scheme_end = origin.find("://");
    if (scheme_end != std::string::npos) {
        const std::string authority = origin.substr(scheme_end + 3);
        auto host = request.find(http::field::host);
        if (host != request.end() && authority == ascii_lowercase(trim_blanks(view(host->value()))))
            return;
    }
    for (const auto& allowed : options.allowed_origins)
        if (origin == normal_origin(allowed)) return;
    throw ApiError(403, "forbidden_origin",
                   "requests from Origin '" + std::string(it->value().substr(0, 128)) +
                       "' may not change state here (nor use /mcp); only this server's own "
                       "pages and --allowed-origin origins may",
                   "origin");
}

bool changes_state(http::verb method) {
    return method == http::verb::post || method == http::verb::put || method == http::verb::patch ||
           method == http::verb::delete_;
}

}  // namespace deskbox::server
