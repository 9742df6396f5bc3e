#include "server/api/auth.hpp"

#include <optional>

#include "common/ascii.hpp"
#include "server/http/query.hpp"
#include "server/network/port_proxy.hpp"
#include "server/sandbox/sandbox.hpp"

namespace deskbox::server {

namespace {

bool is_bearer(std::string_view value) {
    return value.size() >= 7 && ascii_iequals(value.substr(0, 7), "bearer ");
}

// What "Authorization: Bearer X" carries (maybe ""); nullopt without such a header.
std::optional<std::string> bearer_credential(const HttpRequest& request) {
    if (auto it = request.find(http::field::authorization); it != request.end()) {
        std::string value(it->value());
        if (value.rfind("Bearer ", 0) == 0) return value.substr(7);
    }
    return std::nullopt;
}

std::string token_cookie(const HttpRequest& request) {
    for (auto it = request.find(http::field::cookie);
         it != request.end() && it->name() == http::field::cookie; ++it)
        if (auto value = network::cookie_value(std::string(it->value()), kTokenCookie);
            !value.empty())
            return value;
    return {};
}

}  // namespace

std::string query_token(const RouteContext& context) {
    auto it = context.query.find(std::string(kTokenParameter));
    return it != context.query.end() ? it->second : std::string();
}

bool is_credential_parameter(std::string_view decoded_name) {
    return decoded_name == kKeyParameter || decoded_name == kTokenParameter;
}

std::string query_without_credentials(std::string_view raw_query) {
    std::string out;
    while (!raw_query.empty()) {
        const auto amp = raw_query.find('&');
        const std::string_view item = raw_query.substr(0, amp);
        raw_query = amp == std::string_view::npos ? std::string_view{} : raw_query.substr(amp + 1);
        if (item.empty()) continue;
        // Decoded as the router's parse_query decodes it; a name that does not decode is not
        // one of ours either (the router refused the request before it got here).
        std::string name;
        try {
            name = url_decode(item.substr(0, item.find('=')), true);
        } catch (const ApiError&) {
            name = std::string(item.substr(0, item.find('=')));
        }
        if (is_credential_parameter(name)) continue;
        out += out.empty() ? "?" : "&";
        out += item;
    }
    return out;
}

void remove_credential_headers(HttpRequest& request) {
    for (auto it = request.begin(); it != request.end();) {
        const bool credential =
            (it->name() == http::field::authorization &&
             is_bearer(std::string_view(it->value().data(), it->value().size()))) ||
            ascii_iequals(std::string_view(it->name_string().data(), it->name_string().size()),
                          "X-API-Key");
        it = credential ? request.erase(it) : std::next(it);
    }
    std::string kept;
    for (auto it = request.find(http::field::cookie);
         it != request.end() && it->name() == http::field::cookie; ++it) {
        std::string rest = network::without_cookie(std::string(it->value()), kTokenCookie);
        if (!rest.empty()) kept += (kept.empty() ? "" : "; ") + rest;
    }
    request.erase(http::field::cookie);
    if (!kept.empty()) request.set(http::field::cookie, kept);
}

bool constant_time_equal(const std::string& a, const std::string& b) {
    if (a.size() != b.size()) return false;
    unsigned char diff = 0;
    for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
}

bool api_key_valid(const RouteContext& context) {
    const auto& keys = context.api.options.api_keys;
    if (keys.empty()) return true;
    const HttpRequest& request = context.request();
    std::string given = context.query_key;
    if (auto bearer = bearer_credential(request)) given = *bearer;
    if (given.empty()) {
        if (auto it = request.find("X-API-Key"); it != request.end())
            given = std::string(it->value());
    }
    bool ok = false;
    for (const auto& key : keys) ok |= constant_time_equal(given, key);
    return ok;
}

std::string bearer_token(const HttpRequest& request) {
    return bearer_credential(request).value_or("");
}

Access sandbox_access(const RouteContext& context, const Sandbox& sandbox) {
    for (const std::string& given : {query_token(context), bearer_token(context.request())}) {
        if (given.empty()) continue;
        if (constant_time_equal(given, sandbox.control_token())) return Access::control;
        if (constant_time_equal(given, sandbox.view_token())) return Access::view;
    }
    if (!context.api.options.api_keys.empty() && api_key_valid(context)) return Access::control;
    return Access::none;
}

bool port_access(const RouteContext& context, const Sandbox& sandbox) {
    bool allowed = false;
    for (const std::string& given :
         {query_token(context), bearer_token(context.request()), token_cookie(context.request())})
        allowed |= !given.empty() && constant_time_equal(given, sandbox.control_token());
    if (!allowed && !context.api.options.api_keys.empty()) allowed = api_key_valid(context);
    return allowed;
}

}  // namespace deskbox::server
