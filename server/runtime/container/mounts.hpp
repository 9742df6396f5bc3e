// Host-side mount helpers: the overlay root filesystem of a sandbox and the scan of
// /proc/self/mountinfo that proves nothing is left mounted after a kill.
#pragma once

#include <cstdint>
#include <optional>

#include <filesystem>
#include <string>
#include <vector>

namespace deskbox::runtime {

struct MountEntry {
    std::filesystem::path mount_point;
    std::string root;  // the path inside the mounted filesystem (cgroup hierarchies use it)
    std::string fstype;
    std::string source;
    std::string super_options;  // e.g. "rw,memory" for a cgroup v1 hierarchy
};

// Parses mountinfo (escapes such as \040 decoded). Throws RuntimeError if unreadable.
std::vector<MountEntry> read_mountinfo(const std::filesystem::path& file = "/proc/self/mountinfo");

// Mount points at or below `dir`, deepest first (the order to unmount them in).
std::vector<std::filesystem::path> mounts_under(const std::filesystem::path& dir);

// overlayfs options are comma/colon separated, so those characters cannot appear in paths.
// Returns the empty string if `path` is usable, else the reason.
std::string overlay_path_problem(const std::filesystem::path& path);

// Mounts an overlay of read-only `lower` with `upper`/`work` (same filesystem) at `target`.
// Throws RuntimeError with the kernel's reason.
void mount_overlay(const std::filesystem::path& lower, const std::filesystem::path& upper,
                   const std::filesystem::path& work, const std::filesystem::path& target);

// A sandbox's writable layer with a size: a sparse ext4 image of `size_mb` (no journal, no
// reserved blocks: it is disposable and all of it is the sandbox's) on an auto-clearing loop
// device, mounted nosuid,nodev at `mount_point`. Writes past it are ENOSPC inside the
// sandbox; the host's disk is untouched. The loop device goes with the last unmount.
// `mkfs` is the mkfs.ext4 program. Throws RuntimeError naming the step.
void mount_capped_disk(const std::filesystem::path& image, const std::filesystem::path& mount_point,
                       std::uint64_t size_mb, const std::string& mkfs = "mkfs.ext4");

// The two halves of mount_capped_disk, for filesystems that outlive a sandbox (volumes):
// a new sparse ext4 image of `size_mb` (`journal`: with one, for data that must survive a
// crash; its root directory owned by `root_uid`:`root_gid`), and mounting an existing image
// (nosuid, nodev) on an auto-clearing loop device. Throw RuntimeError naming the step.
struct Ext4ImageOptions {
    bool journal = false;
    std::uint32_t root_uid = 0, root_gid = 0;
    std::string mkfs = "mkfs.ext4";
};
void make_ext4_image(const std::filesystem::path& image, std::uint64_t size_mb,
                     const Ext4ImageOptions& options);
void mount_ext4_image(const std::filesystem::path& image, const std::filesystem::path& mount_point);
// An unmounted image made larger: the file, then the filesystem to fill it (e2fsck, resize2fs).
void grow_ext4_image(const std::filesystem::path& image, std::uint64_t size_mb);

// Bytes used and the size of the filesystem mounted at `path`; nullopt if unreadable.
struct DiskUsage {
    std::uint64_t used_bytes = 0, size_bytes = 0;
};
std::optional<DiskUsage> disk_usage(const std::filesystem::path& path);

// Unmounts `target` (every stacked mount on it). Not mounted is fine. A busy mount is retried
// briefly, then detached lazily. Throws RuntimeError if it cannot be removed.
void unmount_all(const std::filesystem::path& target);

}  // namespace deskbox::runtime
