// An API error: HTTP status, a machine code, a message for people and the field at fault.
// Thrown by anything that answers a request (http/ helpers, api/, mcp/, sandbox/) and turned
// into the JSON error answer at the front door.
#pragma once

#include <stdexcept>
#include <string>

namespace deskbox::server {

class ApiError : public std::runtime_error {
  public:
    ApiError(unsigned status, std::string code, const std::string& message, std::string field = {})
        : std::runtime_error(message),
          status_(status),
          code_(std::move(code)),
          field_(std::move(field)) {}
    unsigned status() const { return status_; }
    const std::string& code() const { return code_; }
    const std::string& field() const { return field_; }

  private:
    unsigned status_;
    std::string code_;
    std::string field_;
};

inline ApiError bad_request(const std::string& field, const std::string& reason) {
    return ApiError(400, "bad_request", field.empty() ? reason : field + ": " + reason, field);
}

}  // namespace deskbox::server
