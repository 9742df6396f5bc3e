// Who may call what: API keys (Authorization: Bearer, X-API-Key, or ?key= for browsers) and a
// sandbox's view and control tokens (?token=, Authorization: Bearer, or the deskbox_token
// cookie of exposed ports). Secrets are compared in constant time.
//
// Every place deskboxd looks for a credential is defined here, once: authentication reads
// exactly these, and a request relayed to a sandbox's exposed port goes on without any of
// them (remove_credentials), so the two cannot disagree. Query parameter names are compared
// after percent-decoding (?k%65y= is ?key=) on both sides.
#pragma once

#include <string>
#include <string_view>

#include "server/api/route_context.hpp"

namespace deskbox::server {

inline constexpr std::string_view kKeyParameter = "key";      // ?key=: an API key
inline constexpr std::string_view kTokenParameter = "token";  // ?token=: a sandbox token
inline constexpr std::string_view kTokenCookie = "deskbox_token";

// A query parameter whose name (already percent-decoded) carries a credential.
bool is_credential_parameter(std::string_view decoded_name);
// `raw_query` (as sent, without '?') without credential parameters: "" or "?a=1&b=2" with the
// other parameters byte for byte as sent.
std::string query_without_credentials(std::string_view raw_query);
// Removes every credential header deskboxd reads: Authorization with the Bearer scheme (any
// case, every such header), X-API-Key, and the deskbox_token cookie.
void remove_credential_headers(HttpRequest& request);

// Whether two secrets are equal, in time that depends on their length only.
bool constant_time_equal(const std::string& a, const std::string& b);
// The request carries one of the server's API keys; true when the server has none.
bool api_key_valid(const RouteContext& context);
// The value of ?token=, or "".
std::string query_token(const RouteContext& context);
// The credential of "Authorization: Bearer X", or "".
std::string bearer_token(const HttpRequest& request);
// What the request may do on `sandbox`: its control or view token, or an API key (control).
// With no API key configured (loopback only) a key proves nothing: tokens are required.
Access sandbox_access(const RouteContext& context, const Sandbox& sandbox);
// The request carries `sandbox`'s control token (?token=, Bearer, or the deskbox_token
// cookie), or an API key when the server has any: what exposed ports ask.
bool port_access(const RouteContext& context, const Sandbox& sandbox);

}  // namespace deskbox::server
