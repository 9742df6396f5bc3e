// Whether one more container sandbox's disk cap fits what the state dir's filesystem can give.
// Each cap is a sparse ext4 image that grows as the sandbox writes, so caps may promise more
// than is free (like memory overcommit) up to a ratio (--disk-overcommit); past it a create is
// refused, clearly, instead of every sandbox failing writes once the disk fills.
#pragma once

#include <cstdint>
#include <filesystem>

namespace deskbox::server {

struct DiskCommitment {
    std::uint64_t promised_mb = 0;  // the caps of running and starting sandboxes
    std::uint64_t asked_mb = 0;     // the new sandbox's cap (0: none, never refused)
    std::uint64_t free_mb = 0;      // free on the state dir's filesystem now
    double ratio = 2.0;             // 0: no check
};

// Throws SandboxError (no_space) `disk_overcommitted` (field limits.disk_mb) when promised + asked
// is over ratio × free, saying the numbers and what to change.
void check_disk_commitment(const DiskCommitment& c);

// Free MiB for an unprivileged writer on the filesystem holding `path` (statvfs f_bavail).
std::uint64_t free_disk_mb(const std::filesystem::path& path);

}  // namespace deskbox::server
