// The error every guest service handler throws for a request it cannot satisfy. The RPC layer
// turns it into {"error":{"code","message","field"?}} unchanged.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace deskbox::services {

// Codes used by the services. The generic ones are ARCHITECTURE.md's; the file-system ones
// refine io_error so a caller can tell "missing" from "forbidden" without parsing text.
namespace error_code {
inline constexpr const char* bad_request = "bad_request";
inline constexpr const char* not_found = "not_found";
inline constexpr const char* io_error = "io_error";
inline constexpr const char* timeout = "timeout";
inline constexpr const char* internal = "internal";
inline constexpr const char* unavailable = "unavailable";  // X display gone, limits reached
inline constexpr const char* permission_denied = "permission_denied";
inline constexpr const char* is_a_directory = "is_a_directory";
inline constexpr const char* not_a_directory = "not_a_directory";
inline constexpr const char* already_exists = "already_exists";
inline constexpr const char* not_empty = "not_empty";
inline constexpr const char* too_large = "too_large";
// fork/clone failed with EAGAIN or ENOMEM: the sandbox is at its process or memory limit.
inline constexpr const char* resource_exhausted = "resource_exhausted";
// The desktop has no accessibility tree to read: no libatspi in the template, no accessibility
// bus, no application on it.
inline constexpr const char* accessibility_unavailable = "accessibility_unavailable";
}  // namespace error_code

class ServiceError : public std::runtime_error {
  public:
    ServiceError(std::string code, const std::string& message, std::string field = {})
        : std::runtime_error(message), code_(std::move(code)), field_(std::move(field)) {}

    const std::string& code() const { return code_; }
    std::string message() const { return what(); }
    const std::string& field() const { return field_; }  // empty: not about one field

    // {"code","message","field"?}: the value of a response's "error".
    nlohmann::json to_json() const {
        nlohmann::json j = {{"code", code_}, {"message", what()}};
        if (!field_.empty()) j["field"] = field_;
        return j;
    }

  private:
    std::string code_;
    std::string field_;
};

inline ServiceError bad_request(const std::string& field, const std::string& reason) {
    return ServiceError(error_code::bad_request, field + ": " + reason, field);
}

// A result header plus the raw bytes that travel as the message body (file contents).
struct Reply {
    nlohmann::json result = nlohmann::json::object();
    std::string body;
};

}  // namespace deskbox::services
