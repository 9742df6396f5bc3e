// cgroup helpers for the host side: where a sandbox's cgroup lives in every mounted
// hierarchy (v1, hybrid or v2), reading its limits, and removing it for certain after a kill.
// runc creates and configures the cgroups; these only find, check and clean up.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace deskbox::runtime {

struct CgroupHierarchy {
    std::filesystem::path mount_point;
    std::string root;                      // path of mount_point inside the hierarchy
    std::vector<std::string> controllers;  // v1: e.g. {"memory"}; v2: {} (all in one)
    bool unified = false;
};

// Every mounted cgroup hierarchy of this process's mount namespace.
std::vector<CgroupHierarchy> cgroup_hierarchies();

// The directory of absolute cgroup path `cgroup` (e.g. "/deskbox/sb1") in `h`, or nullopt if
// that cgroup lies outside what this mount shows.
std::optional<std::filesystem::path> cgroup_dir(const CgroupHierarchy& h,
                                                const std::string& cgroup);

// The directory for `controller` ("memory", "pids", "cpu", "freezer"): the v1 hierarchy that
// has it, else the unified one. Exists or not.
std::optional<std::filesystem::path> controller_dir(const std::string& controller,
                                                    const std::string& cgroup);

// Existing directories of `cgroup` in any hierarchy.
std::vector<std::filesystem::path> existing_cgroup_dirs(const std::string& cgroup);

// Names of the child cgroups of `parent` in any hierarchy (deduplicated, sorted).
std::vector<std::string> child_cgroups(const std::string& parent);

// Processes in a cgroup dir (cgroup.procs); empty if the dir is gone.
std::vector<pid_t> cgroup_procs(const std::filesystem::path& dir);

// Thaws (v1 freezer, v2 cgroup.freeze), SIGKILLs every process, waits for them to go and
// removes the cgroup's directories in all hierarchies, children first. Throws RuntimeError
// naming what remains.
void remove_cgroup(const std::string& cgroup);

// First line of a file, without trailing whitespace; nullopt if unreadable.
std::optional<std::string> read_first_line(const std::filesystem::path& file);

}  // namespace deskbox::runtime
