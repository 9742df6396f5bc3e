// What a request's header must show before any route runs, against web pages rather than
// API clients: a Host this server answers to (DNS rebinding), an Origin allowed to change
// state (cross-site requests), and a JSON content type on JSON bodies (a cross-site form or
// text/plain POST needs no preflight). Each refusal is an ApiError naming the header.
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
// 415 unsupported_media_type unless a body to be parsed as JSON comes as application/json or
// a +json type. Without an Origin (curl -d, scripts: not a web page) no Content-Type and
// application/x-www-form-urlencoded are taken as JSON too.
void check_json_content_type(const HttpRequest& request);

}  // namespace deskbox::server
