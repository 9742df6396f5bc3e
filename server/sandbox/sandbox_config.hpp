// What a sandbox was created with: the checked create request (create_request.hpp) with the
// template's and the server's defaults filled in; kept in its server record for adoption.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "input/actions.hpp"
#include "server/network/network_policy.hpp"
#include "server/runtime/runtime.hpp"
#include "server/sandbox/readiness.hpp"

namespace deskbox::server {

// A volume the create asked for (server/volumes/), by name, and where it goes in the guest.
struct VolumeRequest {
    std::string name;
    std::string path;
    bool read_only = false;
};

// [{"name","path","read_only"}]: in records and describe.
nlohmann::json volumes_to_json(const std::vector<VolumeRequest>& volumes);

struct SandboxConfig {
    std::string id;
    std::string template_name;
    std::string runtime_name;
    int width = 1280, height = 800, dpi = 96;
    std::optional<input::Size> api_resolution;
    std::chrono::seconds timeout{300};
    bool pause_on_timeout = false;
    // Paused by its timeout, it resumes on the next request that needs it (implies
    // pause_on_timeout).
    bool auto_resume = false;
    std::string from_snapshot;  // the named snapshot it was started from, if any
    nlohmann::json metadata = nlohmann::json::object();
    std::map<std::string, std::string> env;
    runtime::ResourceLimits limits;
    network::NetworkPolicy network = network::NetworkPolicy::closed();
    std::uint64_t egress_kbps = 0;         // limits.egress_kbps; 0: no limit
    std::filesystem::path recordings_dir;  // where recordings go (they outlive the sandbox)
    bool vnc = true;                       // serve VNC on a loopback port
    bool fast_start = true;  // restore from a template snapshot where the runtime can (microvm)
    bool pooled = false;     // made ahead for the pool, not yet handed out
    // Where commands run when they name no cwd: the template's WORKDIR (as `docker exec`).
    std::string workdir;
    std::vector<VolumeRequest> volumes;  // mounted in this order
    // When the create answers (readiness.hpp): the template's `ready`, or the request's. Only
    // the create uses it; it is not kept in the server record.
    ReadyCondition ready;
};

}  // namespace deskbox::server
