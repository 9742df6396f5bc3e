// One build as the service keeps it (private to template_service*.cpp).
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"
#include "server/network/sandbox_network.hpp"
#include "server/templates/template_service.hpp"

namespace deskbox::templates {

std::string now_rfc3339();
// Unmounts everything at or below `dir` (deepest first): what a killed engine left mounted.
void unmount_below(const std::filesystem::path& dir);

struct TemplateService::Job {
    BuildInfo info;  // guarded by the service's mutex
    BuildRequest request;
    std::filesystem::path dir;               // builds/<id>: build.json, log
    std::filesystem::path work;              // work/<id>: context, Dockerfile, the final layer
    std::filesystem::path dockerfile;        // what the engine reads
    std::vector<std::string> shipped_bases;  // deskbox/<name> it stands on
    std::vector<TemplateRef> store_bases;    // templates here it stands on, not in the engine
    std::vector<ImageReference> pulls;       // registry images it stands on (FROM, import)
    std::vector<std::string> pulled;         // the same, pinned to the digests pulled
    std::string base;
    std::string base_digest;            // the base pinned, when it came from a registry
    bool registry_unreachable = false;  // the last manifest read got no answer
    // A network namespace the engine's commands run in (a pull's), or empty: the host's; and
    // the resolv.conf they see there (the network's DNS, not the host's, which may be on the
    // host's loopback), or empty.
    std::string engine_netns;
    std::filesystem::path engine_resolv_conf;
    bool cancel_requested = false;  // guarded by the service's mutex
    std::optional<std::chrono::steady_clock::time_point> started;
    std::chrono::steady_clock::time_point deadline;
    std::uint64_t disk_used_at_start = 0;  // the engine disk's used bytes when the build began
    std::uint64_t disk_used_peak = 0;      // the most seen while the engine ran
    std::shared_ptr<network::SandboxNetwork> network;
    runtime::NamespaceHolder netns;  // the RUN steps' network namespace (the engine's own)
    std::vector<std::filesystem::path> cgroup_procs;  // what the engine joins: the build's cgroup
    UniqueFd log_fd;
    std::string partial_line;  // engine output after the last newline
};

// A build step that failed, as the build's failure says it.
class TemplateService::StepFailed : public std::runtime_error {
  public:
    explicit StepFailed(BuildFailure f) : std::runtime_error(f.message), failure(std::move(f)) {}
    BuildFailure failure;
};

}  // namespace deskbox::templates
