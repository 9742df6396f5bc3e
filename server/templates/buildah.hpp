// The command lines deskboxd runs buildah with (pure functions, so tests read them), in
// storage of deskbox's own under <state>/templates/engine/ so nothing mixes with the host's
// containers. Why buildah: docs/ARCHITECTURE.md, "Templates users build".
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
};

// buildah with the storage options, then `args`.
std::vector<std::string> engine_command(const EnginePaths& paths, std::vector<std::string> args);

struct BudOptions {
    std::filesystem::path context;
    std::filesystem::path dockerfile;
    std::string image;  // what the result is tagged
    std::map<std::string, std::string> build_args;
    bool no_cache = false;
    std::string network = "none";     // or "ns:<path>"
    std::string dns;                  // a nameserver for RUN steps' resolv.conf, or empty
    std::string cgroup_parent;        // every RUN container's cgroup lies under it
    std::filesystem::path runc_root;  // where runc keeps the RUN containers' state
    std::uint32_t host_id_base = 0;   // 0: no user namespace (guest ids are host ids)
    std::filesystem::path empty_sys;  // mounted read-only at /sys (see the .cpp)
    BuildLimits limits;
};

// `buildah bud` arguments (after engine_command's).
std::vector<std::string> bud_args(const BudOptions& options);

}  // namespace deskbox::templates
