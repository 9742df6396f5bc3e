// Typed access to a request's "params" object. Every accessor checks the JSON type and throws
// ServiceError(bad_request) naming the field, so handlers never guess or clamp.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "guest-desktop/services/service_error.hpp"

namespace deskbox::services::params {

using nlohmann::json;

inline const char* type_name(const json& v) {
    return v.type_name();
}

// `params` must be an object (null counts as {}); keys outside `allowed` are rejected, so a
// typo such as "timeout" for "timeout_s" is an error instead of silently ignored.
inline const json& object(const json& params, std::initializer_list<std::string_view> allowed) {
    static const json empty = json::object();
    if (params.is_null()) return empty;
    if (!params.is_object())
        throw ServiceError(error_code::bad_request,
                           std::string("params: must be an object, not ") + type_name(params),
                           "params");
    for (const auto& [key, value] : params.items()) {
        bool known = false;
        for (auto a : allowed) known = known || a == key;
        if (!known) throw bad_request(key, "unknown parameter");
    }
    return params;
}

inline const json* find(const json& p, const char* key) {
    auto it = p.find(key);
    if (it == p.end() || it->is_null()) return nullptr;
    return &*it;
}

inline std::optional<std::string> opt_string(const json& p, const char* key) {
    const json* v = find(p, key);
    if (!v) return std::nullopt;
    if (!v->is_string())
        throw bad_request(key, std::string("must be a string, not ") + type_name(*v));
    return v->get<std::string>();
}

inline std::string req_string(const json& p, const char* key) {
    auto s = opt_string(p, key);
    if (!s) throw bad_request(key, "is required");
    return *s;
}

inline std::optional<bool> opt_bool(const json& p, const char* key) {
    const json* v = find(p, key);
    if (!v) return std::nullopt;
    if (!v->is_boolean())
        throw bad_request(key, std::string("must be a boolean, not ") + type_name(*v));
    return v->get<bool>();
}

inline std::optional<double> opt_number(const json& p, const char* key, double min, double max) {
    const json* v = find(p, key);
    if (!v) return std::nullopt;
    if (!v->is_number())
        throw bad_request(key, std::string("must be a number, not ") + type_name(*v));
    double d = v->get<double>();
    if (!std::isfinite(d) || d < min || d > max)
        throw bad_request(key, "must be between " + json(min).dump() + " and " + json(max).dump());
    return d;
}

inline std::optional<std::int64_t> opt_int(const json& p, const char* key, std::int64_t min,
                                           std::int64_t max) {
    const json* v = find(p, key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer())
        throw bad_request(key, std::string("must be an integer, not ") + type_name(*v));
    if (v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(max))
        throw bad_request(key,
                          "must be between " + std::to_string(min) + " and " + std::to_string(max));
    std::int64_t i = v->get<std::int64_t>();
    if (i < min || i > max)
        throw bad_request(key,
                          "must be between " + std::to_string(min) + " and " + std::to_string(max));
    return i;
}

// Strings handed to the kernel (paths, argv, env) cannot carry NUL bytes.
inline void require_no_nul(const std::string& s, const std::string& field) {
    if (s.find('\0') != std::string::npos) throw bad_request(field, "must not contain NUL bytes");
}

}  // namespace deskbox::services::params
