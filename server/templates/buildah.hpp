// The command lines deskboxd runs buildah with (pure functions, so tests read them), in
// storage of deskbox's own under <state>/templates/engine/ so nothing mixes with the host's
// containers. buildah runs rootless, inside a user namespace of the server's
// (runtime::PinnedUserNamespace): its root, and every RUN step's, is an unprivileged range of
// host ids. Why buildah, and why this way: docs/ARCHITECTURE.md, "Templates users build".
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "server/templates/build_types.hpp"

namespace deskbox::templates {

struct EnginePaths {
    std::filesystem::path root;       // image and layer storage
    std::filesystem::path runroot;    // its locks and mounts' state (tmpfs, under /run)
    std::filesystem::path runc_root;  // state of the RUN steps' containers (for cleanup)
    std::filesystem::path tmp;        // TMPDIR: the engine's scratch, cleaned after a crash
    std::filesystem::path home;       // HOME of the engine's root (its config and locks)
    // argv prefix entering the engine's namespaces (PinnedUserNamespace::enter_command()).
    std::vector<std::string> enter;
};

// buildah with the storage options, then `args`, behind `paths.enter`.
std::vector<std::string> engine_command(const EnginePaths& paths, std::vector<std::string> args);

// The environment buildah needs on top of the server's: a user namespace already set up (it
// must not make another one, or ask for newuidmap), its root as the rootless user, and
// config, runtime and scratch folders that the namespace's root owns.
std::map<std::string, std::string> engine_env(const EnginePaths& paths);

// What the engine's storage records about the ids it was written with ("0 <host base> 65536"):
// storage written with another mapping (or by a deskboxd that ran buildah as host root) is
// unreadable to the engine as it is now, and is reset.
std::string engine_ids_record(std::uint32_t host_base);

struct BudOptions {
    std::filesystem::path context;
    std::filesystem::path dockerfile;
    std::string image;  // what the result is tagged
    std::map<std::string, std::string> build_args;
    bool no_cache = false;
    std::string network = "none";     // or "ns:<path>"
    std::string dns;                  // a nameserver for RUN steps' resolv.conf, or empty
    std::filesystem::path runc_root;  // where runc keeps the RUN containers' state
};

// `buildah bud` arguments (after engine_command's). No resource flags: rootless buildah cannot
// make cgroups for RUN steps, so the limits are on the cgroup the engine runs in (below).
std::vector<std::string> bud_args(const BudOptions& options);

// A build's limits as cgroup files: the engine and every RUN step's process run in the build's
// cgroup (RUN steps of rootless runc stay in their engine's cgroup).
struct CgroupSetting {
    std::string controller;  // "memory", "cpu", "pids"
    std::string v1_file, v1_value;
    std::string v2_file, v2_value;
};
std::vector<CgroupSetting> build_cgroup_settings(const BuildLimits& limits);

}  // namespace deskbox::templates
