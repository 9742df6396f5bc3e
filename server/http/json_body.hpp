// JSON over HTTP: JSON answers, and request bodies read as JSON with the checks every JSON
// front door applies (content type, UTF-8 naming the member, nesting depth). Errors are
// ApiError (400, 415).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/http/api_error.hpp"
#include "server/http/http_message.hpp"

namespace deskbox::server {

HttpResponse json_response(unsigned status, const nlohmann::json& body);
// Deepest nesting of objects and arrays a request body may have (400 too_deep past it).
inline constexpr int kMaxJsonDepth = 64;
// The body as JSON: 415 for a content type that is not JSON (check_json_content_type), 400
// malformed_json, too_deep, or invalid_utf8 naming the member that holds the bad byte
// (actions[2].text).
nlohmann::json parse_body(const HttpRequest& request, bool allow_empty = false);
// 400 invalid_utf8 naming `field` unless `bytes` is UTF-8; `what` starts the message.
void check_utf8(std::string_view bytes, const std::string& field, const std::string& what);
// 400 invalid_utf8 naming the member with the first bad byte (nothing if the body is UTF-8).
void check_body_utf8(std::string_view body);
// 415 unsupported_media_type unless a body to be parsed as JSON comes as application/json or
// a +json type. Without an Origin (curl -d, scripts: not a web page) no Content-Type and
// application/x-www-form-urlencoded are taken as JSON too: a cross-site form or text/plain
// POST needs no preflight, so a web page could otherwise smuggle JSON.
void check_json_content_type(const HttpRequest& request);

}  // namespace deskbox::server
