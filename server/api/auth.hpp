// Who may call what: API keys (Authorization: Bearer, X-API-Key, or ?key= for browsers) and a
// sandbox's view and control tokens (?token= or Authorization: Bearer). Secrets are compared
// in constant time.
#pragma once

#include <string>

#include "server/api/route_context.hpp"

namespace deskbox::server {

// The request carries one of the server's API keys; true when the server has none.
bool api_key_valid(const RouteContext& context);
// The credential of "Authorization: Bearer X", or "".
std::string bearer_token(const HttpRequest& request);
// What the request may do on `sandbox`: its control or view token, or an API key (control).
// With no API key configured (loopback only) a key proves nothing: tokens are required.
Access sandbox_access(const RouteContext& context, const Sandbox& sandbox);

}  // namespace deskbox::server
