// Secrets: named values deskboxd keeps for credential rules (a sandbox's network policy names
// them as "secret:NAME"; the egress proxy puts the value into requests). Write-only: the store
// hands a value to the proxy and to nothing else; lists show names and times only. Kept in
// <root>/secrets.json (directory 0700, file 0600, replaced atomically and durably), read once
// at start.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace deskbox::secrets {

enum class SecretErrorKind { invalid, not_found, too_many, failed };

class SecretError : public std::runtime_error {
  public:
    SecretError(SecretErrorKind kind, std::string field, const std::string& message)
        : std::runtime_error(message), kind_(kind), field_(std::move(field)) {}
    SecretErrorKind kind() const { return kind_; }
    const std::string& field() const { return field_; }

  private:
    SecretErrorKind kind_;
    std::string field_;
};

constexpr std::size_t kMaxSecretName = 64;
constexpr std::size_t kMaxSecretValue = 8192;  // a header value; JWTs are ~1-2 KiB
constexpr std::size_t kMaxSecrets = 1000;

// Throws SecretError (invalid) naming `field` unless `name` is 1..64 of [A-Za-z0-9_.-].
void check_secret_name(std::string_view name, const std::string& field);

struct SecretInfo {
    std::string name;
    std::chrono::system_clock::time_point created_at, updated_at;
    nlohmann::json to_json() const;  // name and times; never the value
};

class SecretStore {
  public:
    explicit SecretStore(std::filesystem::path root);

    // Creates or replaces; true when it was new. The value must be 1..8192 bytes a header
    // value may hold (no control characters but tab).
    bool set(const std::string& name, const std::string& value);
    std::vector<SecretInfo> list() const;
    bool exists(const std::string& name) const;
    void remove(const std::string& name);  // SecretError not_found
    // For the egress proxy only.
    std::optional<std::string> value(const std::string& name) const;

  private:
    struct Entry {
        std::string value;
        SecretInfo info;
    };
    void save_locked() const;

    std::filesystem::path file_;
    mutable std::mutex mutex_;
    std::map<std::string, Entry> entries_;
};

}  // namespace deskbox::secrets
