#include "server/sandbox/disk_commitment.hpp"

#include <sys/statvfs.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <system_error>

#include "server/sandbox/sandbox_error.hpp"

namespace deskbox::server {

void check_disk_commitment(const DiskCommitment& c) {
    if (c.ratio <= 0 || c.asked_mb == 0) return;
    const double allowed = c.ratio * static_cast<double>(c.free_mb);
    const double wanted = static_cast<double>(c.promised_mb) + static_cast<double>(c.asked_mb);
    if (wanted <= allowed) return;
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%g", c.ratio);
    throw SandboxError(SandboxFault::no_space, "disk_overcommitted",
                       "limits.disk_mb " + std::to_string(c.asked_mb) + " MiB with the " +
                           std::to_string(c.promised_mb) +
                           " MiB already promised to this server's sandboxes is over " + ratio +
                           " x the " + std::to_string(c.free_mb) +
                           " MiB free for them (--disk-overcommit): ask for less, kill a sandbox, "
                           "or free disk space",
                       "limits.disk_mb");
}

std::uint64_t free_disk_mb(const std::filesystem::path& path) {
    struct statvfs fs {};
    if (::statvfs(path.c_str(), &fs) != 0)
        throw std::system_error(errno, std::generic_category(), "statvfs " + path.string());
    return static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize >> 20;
}

}  // namespace deskbox::server
