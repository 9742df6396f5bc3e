// Volumes: named filesystems that outlive sandboxes. Each is an ext4 image with a journal
// (<root>/<name>/data.ext4, its size the hard quota) and a record (volume.json). While any
// sandbox uses it, it is mounted once on the host (<root>/<name>/mnt, nosuid,nodev) and each
// sandbox binds that mount, so readers and the one writer share one filesystem instance.
// Creating and deleting are atomic under SIGKILL: a volume is whole or absent after a restart.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deskbox::volumes {

// What went wrong, for the front doors to map (HTTP status, JSON-RPC code) at the edge.
// guest_written: a microVM wrote it, and this server does not mount such volumes on the host.
enum class VolumeErrorKind { invalid, not_found, exists, in_use, no_space, guest_written, failed };

class VolumeError : public std::runtime_error {
  public:
    VolumeError(VolumeErrorKind kind, std::string field, const std::string& message)
        : std::runtime_error(message), kind_(kind), field_(std::move(field)) {}
    VolumeErrorKind kind() const { return kind_; }
    const std::string& field() const { return field_; }

  private:
    VolumeErrorKind kind_;
    std::string field_;
};

struct VolumeUse {
    std::string sandbox_id;
    std::string path;  // where it is mounted in that sandbox
    bool read_only = false;
    // The whole ext4 image, as a disk of one sandbox (a microVM), whose own kernel mounts it.
    // Nothing else uses the volume meanwhile and the host does not mount it; before the host
    // mounts it again, e2fsck checks what the guest wrote.
    bool as_disk = false;
};

struct VolumeInfo {
    std::string name;
    std::uint64_t size_mb = 0;
    std::uint64_t used_bytes = 0;  // of the filesystem (its own metadata included)
    std::chrono::system_clock::time_point created_at;
    nlohmann::json labels = nlohmann::json::object();
    std::vector<VolumeUse> mounts;
    nlohmann::json to_json() const;
};

class VolumeStore;
struct VolumeStoreState;  // volume_store.cpp: options, mounts, the lock

// One sandbox's use of a volume: the host mount stays while any lease holds it. Movable;
// the last lease of a volume unmounts it (after its sandbox's own bind is gone).
class VolumeLease {
  public:
    VolumeLease() = default;
    VolumeLease(VolumeLease&& other) noexcept;
    VolumeLease& operator=(VolumeLease&& other) noexcept;
    VolumeLease(const VolumeLease&) = delete;
    VolumeLease& operator=(const VolumeLease&) = delete;
    ~VolumeLease();

    // What the sandbox gets: the host directory the volume is mounted on, or (as_disk) its
    // image.
    const std::filesystem::path& host_path() const { return host_path_; }
    const VolumeUse& use() const { return use_; }
    const std::string& name() const { return name_; }
    void release();
    // The server exits and its sandbox runs on: the mount stays for the next server, which
    // acquires it again when it adopts the sandbox.
    void keep_for_next_server() { state_.reset(); }

  private:
    friend class VolumeStore;
    std::weak_ptr<VolumeStoreState> state_;  // a lease may outlive the store
    std::string name_;
    VolumeUse use_;
    std::filesystem::path host_path_;
};

class VolumeStore {
  public:
    struct Options {
        std::filesystem::path root;  // <state>/volumes
        std::uint64_t min_size_mb = 16, max_size_mb = 1 << 20;
        std::uint32_t owner_uid = 1000, owner_gid = 1000;  // the guest user owns the root dir
        std::string mkfs = "mkfs.ext4";
        // A volume a guest's kernel wrote as a disk is mounted on the host again (after
        // e2fsck) only if true; otherwise such a volume is for microVMs only (guest_written).
        bool mount_guest_written = false;
    };
    // Removes what a killed server left half made or half deleted, and unmounts host mounts
    // nobody uses (call release_unused() after adopting sandboxes instead if some may).
    explicit VolumeStore(Options options);
    ~VolumeStore();
    VolumeStore(const VolumeStore&) = delete;
    VolumeStore& operator=(const VolumeStore&) = delete;

    // `name`: [a-z0-9][a-z0-9_.-]{0,62}. Throws VolumeError: invalid (name, size), exists,
    // no_space (the host's free space, less what other volumes may still fill, is short).
    VolumeInfo create(const std::string& name, std::uint64_t size_mb,
                      const nlohmann::json& labels = nlohmann::json::object());
    std::vector<VolumeInfo> list() const;
    VolumeInfo inspect(const std::string& name) const;  // not_found
    void remove(const std::string& name);               // not_found, in_use

    // Mounts it for `use` (one writer at a time, any number of readers; a disk use alone:
    // in_use otherwise). failed: a filesystem a guest wrote that e2fsck cannot mend.
    VolumeLease acquire(const std::string& name, const VolumeUse& use);
    // After adoption: host mounts no lease holds are unmounted.
    void release_unused();

    static std::string name_problem(const std::string& name);
    std::uint32_t owner_uid() const;  // the guest user that owns volumes' files
    std::uint32_t owner_gid() const;

  private:
    std::shared_ptr<VolumeStoreState> state_;
};

}  // namespace deskbox::volumes
