// Small pieces every route uses: JSON answers, query parsing, strict integers, JSON bodies,
// and constant-time secret comparison. Errors are ApiError (400).
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/http/http_server.hpp"
#include "server/sandbox/api_error.hpp"

namespace deskbox::server {

HttpResponse json_response(unsigned status, const nlohmann::json& body);
std::string url_decode(std::string_view in, bool plus_is_space);
std::map<std::string, std::string> parse_query(std::string_view query);
// Deepest nesting of objects and arrays a request body may have (400 too_deep past it).
inline constexpr int kMaxJsonDepth = 64;
// The body as JSON: 400 malformed_json, too_deep, or invalid_utf8 naming the member that holds
// the bad byte (actions[2].text).
nlohmann::json parse_body(const HttpRequest& request, bool allow_empty = false);
// 400 invalid_utf8 naming `field` unless `bytes` is UTF-8; `what` starts the message.
void check_utf8(std::string_view bytes, const std::string& field, const std::string& what);
// 400 invalid_utf8 naming the member with the first bad byte (nothing if the body is UTF-8).
void check_body_utf8(std::string_view body);
// Refuses any query parameter not in `allowed`.
void allow_only(const std::map<std::string, std::string>& query, std::set<std::string> allowed);
int int_query(const std::map<std::string, std::string>& query, const std::string& name);
// true/1 or false/0 (anything else is a 400 naming `name`); `fallback` when absent.
bool bool_query(const std::map<std::string, std::string>& query, const std::string& name,
                bool fallback = false);
std::string required_query(const std::map<std::string, std::string>& query,
                           const std::string& name);
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace deskbox::server
