// What a request's header must show before any route runs, against web pages rather than
// API clients: a Host this server answers to (DNS rebinding) and an Origin allowed to change
// state (cross-site requests); the admission stages (admission.hpp) run these. The third such
// check, a JSON content type on JSON bodies, is parse_body's (server/http/json_body.hpp). Each
// refusal is an ApiError naming the header.
#pragma once

#include <string>
#include <string_view>

#include "server/api/route_context.hpp"

namespace deskbox::server {

// The host name of a Host header value, lower-case, without port or trailing dot; an IPv6
// literal keeps its brackets ("[::1]").
std::string host_name(std::string_view host_header);
// localhost, 127.0.0.0/8 and [::1].
bool is_loopback_host(std::string_view name);
// 421 misdirected_request when the server has no API key and the Host is neither loopback,
// nor --allowed-host, nor --ports-domain or a name under it. No Host (not a browser) passes.
void check_host(const HttpRequest& request, const ApiOptions& options);
// 403 forbidden_origin when the request has an Origin that is neither its own (the Host's
// authority) nor an --allowed-origin. "null" (sandboxed pages, file:) is foreign.
void check_origin(const HttpRequest& request, const ApiOptions& options);
// A method that changes state: POST, PUT, PATCH, DELETE.
bool changes_state(http::verb method);

}  // namespace deskbox::server
