// The query string of a request: percent-decoding, parsing, and strict readers of its values.
// Errors are ApiError 400 naming the parameter.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>

#include "server/http/api_error.hpp"

namespace deskbox::server {

// %XX decoded (a '%' without two hex digits is a 400); `plus_is_space` for query strings.
std::string url_decode(std::string_view in, bool plus_is_space);
// "a=1&b=2" (without '?'), names and values decoded; a later duplicate wins.
std::map<std::string, std::string> parse_query(std::string_view query);
// Refuses any query parameter not in `allowed`.
void allow_only(const std::map<std::string, std::string>& query, std::set<std::string> allowed);
int int_query(const std::map<std::string, std::string>& query, const std::string& name);
// true/1 or false/0 (anything else is a 400 naming `name`); `fallback` when absent.
bool bool_query(const std::map<std::string, std::string>& query, const std::string& name,
                bool fallback = false);
std::string required_query(const std::map<std::string, std::string>& query,
                           const std::string& name);

}  // namespace deskbox::server
