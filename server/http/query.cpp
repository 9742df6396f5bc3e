#include "server/http/query.hpp"

#include <climits>

#include "common/parse_integer.hpp"

namespace deskbox::server {

namespace {
int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

}  // namespace

std::string url_decode(std::string_view in, bool plus_is_space) {
    std::string out;
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (in[i] == '%' && i + 2 < in.size() && hex_value(in[i + 1]) >= 0 &&
            hex_value(in[i + 2]) >= 0) {
            out += static_cast<char>(hex_value(in[i + 1]) * 16 + hex_value(in[i + 2]));
            i += 2;
        } else if (in[i] == '%') {
            throw bad_request("", "malformed percent-encoding in the URL");
        } else if (plus_is_space && in[i] == '+') {
            out += ' ';
        } else {
            out += in[i];
        }
    }
    return out;
}

std::map<std::string, std::string> parse_query(std::string_view q) {
    std::map<std::string, std::string> out;
    while (!q.empty()) {
        auto amp = q.find('&');
        auto part = q.substr(0, amp);
        q = amp == std::string_view::npos ? std::string_view{} : q.substr(amp + 1);
        if (part.empty()) continue;
        auto eq = part.find('=');
        std::string key = url_decode(part.substr(0, eq), true);
        std::string value =
            eq == std::string_view::npos ? "" : url_decode(part.substr(eq + 1), true);
        out[key] = value;
    }
    return out;
}

void allow_only(const std::map<std::string, std::string>& query, std::set<std::string> allowed) {
    for (auto& [k, v] : query)
        if (!allowed.count(k)) throw bad_request(k, "unknown query parameter");
}

int int_query(const std::map<std::string, std::string>& query, const std::string& name) {
    const std::string& v = query.at(name);
    auto value = parse_integer(v);
    if (!value || *value < INT_MIN || *value > INT_MAX)
        throw bad_request(name, "expected an integer, got '" + v + "'");
    return static_cast<int>(*value);
}

bool bool_query(const std::map<std::string, std::string>& query, const std::string& name,
                bool fallback) {
    auto it = query.find(name);
    if (it == query.end()) return fallback;
    const std::string& v = it->second;
    if (v == "true" || v == "1") return true;
    if (v == "false" || v == "0") return false;
    throw bad_request(name, "expected true or false, got '" + v.substr(0, 32) + "'");
}

std::string required_query(const std::map<std::string, std::string>& query,
                           const std::string& name) {
    auto it = query.find(name);
    if (it == query.end() || it->second.empty()) throw bad_request(name, "required");
    return it->second;
}

}  // namespace deskbox::server
