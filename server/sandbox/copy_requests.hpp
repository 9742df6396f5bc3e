// The bodies of a snapshot and a fork, read once at the edge (REST and MCP alike) into typed
// requests the manager takes: one set of rules for both front doors.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace deskbox::server {

constexpr int kMaxForkCount = 16;

// POST /v1/sandboxes/{id}/snapshots, MCP `snapshot`.
struct SnapshotRequest {
    std::string name;
    std::map<std::string, std::string> metadata;
};

// POST /v1/sandboxes/{id}/fork, MCP `fork`: each copy keeps the source's settings unless said.
struct ForkRequest {
    int count = 1;
    std::optional<std::map<std::string, std::string>> metadata;
    std::optional<std::chrono::seconds> timeout;
};

// Throw SandboxError (invalid) naming the field (unknown fields, types, ranges).
SnapshotRequest parse_snapshot_request(const nlohmann::json& body);
ForkRequest parse_fork_request(const nlohmann::json& body, std::chrono::seconds max_timeout);

}  // namespace deskbox::server
