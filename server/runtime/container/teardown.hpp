// What a container sandbox leaves on the host (its runc container, mounts, cgroup and
// directory) and removing all of it: after a kill and for a crashed server's leftovers alike.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "server/runtime/container/runtime.hpp"

namespace deskbox::runtime {

// What of sandbox `id` still exists; its directory counts if `dir_counts`.
std::vector<std::string> residue_of(const ContainerRuntimeOptions& options,
                                    const std::filesystem::path& state_root, const std::string& id,
                                    bool dir_counts);
// Removes everything sandbox `id` may hold, in the order that lets each step succeed:
// processes (runc, then the cgroup itself), mounts, then files (unless `keep_state`).
// Throws RuntimeError listing what is left.
void teardown(const ContainerRuntimeOptions& options, const std::filesystem::path& state_root,
              const std::string& id, bool keep_state);

}  // namespace deskbox::runtime
