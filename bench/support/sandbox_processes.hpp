// A benchmark's view of a container sandbox's processes from the host: which pids its cgroup
// holds, and the host ids a process runs as (under a user namespace, guest 1000 is another
// host id), for tools run beside the sandbox in its namespaces (x11vnc, VNC counters).
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "server/runtime/container/cgroups.hpp"
#include "server/runtime/container/runtime.hpp"

namespace deskbox::bench {

// The pids in sandbox `id`'s cgroups (deskboxd's state dir `state`), sorted: the first is its
// agent, which started the rest.
inline std::vector<pid_t> sandbox_pids(const std::filesystem::path& state, const std::string& id) {
    std::vector<pid_t> pids;
    auto parent = runtime::ContainerRuntime::cgroup_parent_for(state);
    for (const auto& dir : runtime::existing_cgroup_dirs("/" + parent + "/" + id))
        for (pid_t p : runtime::cgroup_procs(dir)) pids.push_back(p);
    std::sort(pids.begin(), pids.end());
    pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
    return pids;
}

// A process's real uid and gid as the host sees them (/proc/PID/status).
inline std::pair<unsigned, unsigned> host_ids_of(pid_t pid) {
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    unsigned uid = 0, gid = 0;
    for (std::string line; std::getline(status, line);) {
        std::istringstream fields(line);
        std::string key;
        fields >> key;
        if (key == "Uid:") fields >> uid;
        if (key == "Gid:") fields >> gid;
    }
    if (uid == 0) throw std::runtime_error("cannot read the ids of process " + std::to_string(pid));
    return {uid, gid};
}

// The command line prefix that runs a program beside the sandbox whose first process is `pid`:
// in its network and IPC namespaces (its X server's abstract socket, MIT-SHM), as its user by
// host ids (the X server lets only a segment's owner attach it).
inline std::vector<std::string> beside_sandbox(pid_t pid) {
    const auto [uid, gid] = host_ids_of(pid);
    return {"nsenter",
            "-t",
            std::to_string(pid),
            "-n",
            "-i",
            "setpriv",
            "--reuid=" + std::to_string(uid),
            "--regid=" + std::to_string(gid),
            "--clear-groups"};
}

}  // namespace deskbox::bench
