// One strict reader for JSON request bodies: each field read once with its type and range, and
// whatever the body holds beyond the fields read is an "unknown field" SandboxError (invalid) at
// finish(). Field names in errors carry their path (limits.memory_mb). Bodies are UTF-8 already
// (parse_body).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deskbox::server {

class RequestReader {
  public:
    // Invalid unless `body` is an object. `prefix`: the path of a nested object ("limits").
    explicit RequestReader(const nlohmann::json& body, std::string prefix = {});

    std::optional<std::string> string(const std::string& name, std::size_t max_bytes = 4096);
    std::string required_string(const std::string& name, std::size_t max_bytes = 4096);
    std::optional<long long> integer(const std::string& name, long long min, long long max);
    std::optional<double> number(const std::string& name, double min, double max);
    std::optional<bool> boolean(const std::string& name);
    // {"K": "V", ...}, at most `max_entries`.
    std::optional<std::map<std::string, std::string>> string_map(const std::string& name,
                                                                 std::size_t max_entries);
    // [string, ...]: at most `max_entries`, each at most `max_bytes`.
    std::optional<std::vector<std::string>> string_list(const std::string& name,
                                                        std::size_t max_entries,
                                                        std::size_t max_bytes = 4096);
    // A command: a string (run by sh -c) or a non-empty array of strings (argv).
    std::optional<std::vector<std::string>> command(const std::string& name);
    // The value as it is (read elsewhere, e.g. a network policy), or nullptr.
    const nlohmann::json* raw(const std::string& name);
    // A nested object's reader (nullopt when absent).
    std::optional<RequestReader> object(const std::string& name);
    // Invalid, naming the first field that was not read.
    void finish() const;

    std::string path(const std::string& name) const;  // "limits.memory_mb"

  private:
    const nlohmann::json* find(const std::string& name);
    const nlohmann::json& body_;
    std::string prefix_;
    std::set<std::string> read_;
};

}  // namespace deskbox::server
