#include "server/api/auth.hpp"

#include <optional>

#include "server/api/http_util.hpp"

namespace deskbox::server {

namespace {
// What "Authorization: Bearer X" carries (maybe ""); nullopt without such a header.
std::optional<std::string> bearer_credential(const HttpRequest& request) {
    if (auto it = request.find(http::field::authorization); it != request.end()) {
        std::string value(it->value());
        if (value.rfind("Bearer ", 0) == 0) return value.substr(7);
    }
    return std::nullopt;
}
}  // namespace

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
    const auto token = context.query.find("token");
    for (const std::string& given : {token != context.query.end() ? token->second : std::string(),
                                     bearer_token(context.request())}) {
        if (given.empty()) continue;
        if (constant_time_equal(given, sandbox.control_token())) return Access::control;
        if (constant_time_equal(given, sandbox.view_token())) return Access::view;
    }
    if (!context.api.options.api_keys.empty() && api_key_valid(context)) return Access::control;
    return Access::none;
}

}  // namespace deskbox::server
