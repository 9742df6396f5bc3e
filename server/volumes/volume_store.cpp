#include "server/volumes/volume_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>

#include "common/atomic_file.hpp"
#include "common/child_process.hpp"
#include "common/random.hpp"
#include "common/resource_name.hpp"
#include "common/unique_fd.hpp"
#include "common/utc_time.hpp"
#include "server/runtime/container/mounts.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::volumes {

namespace fs = std::filesystem;
using Clock = std::chrono::system_clock;

namespace {

constexpr const char* kImage = "data.ext4";
constexpr const char* kRecord = "volume.json";
constexpr const char* kMount = "mnt";
// Present while (and after) a guest kernel had the image as a disk: e2fsck before the host
// mounts it. A file, so a killed server's successor knows too.
constexpr const char* kGuestWritten = "guest-written";
// Half made (create) or half removed (remove) by a server that was killed: never a volume.
constexpr const char* kCreatingPrefix = ".creating-";
constexpr const char* kDeletingPrefix = ".deleting-";

bool is_mount_point(const fs::path& path) {
    struct stat self {
    }, parent{};
    if (::stat(path.c_str(), &self) != 0) return false;
    if (::stat(path.parent_path().c_str(), &parent) != 0) return false;
    return self.st_dev != parent.st_dev;
}

std::uint32_t le32(const unsigned char* p) {
    return std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 |
           std::uint32_t(p[3]) << 24;
}

// Used bytes of an unmounted ext4 image, from its superblock (counts are exact after a clean
// unmount): blocks minus free blocks, times the block size.
std::uint64_t image_used_bytes(const fs::path& image) {
    UniqueFd file(::open(image.c_str(), O_RDONLY | O_CLOEXEC));
    unsigned char sb[1024];
    if (!file || ::pread(file.get(), sb, sizeof sb, 1024) != static_cast<ssize_t>(sizeof sb))
        return 0;
    if (sb[0x38] != 0x53 || sb[0x39] != 0xEF) return 0;  // not ext4's magic
    const std::uint64_t blocks = le32(sb + 0x04), free_blocks = le32(sb + 0x0C);
    const std::uint64_t block_size = std::uint64_t{1024}
                                     << std::min<std::uint32_t>(le32(sb + 0x18), 6);
    return blocks > free_blocks ? (blocks - free_blocks) * block_size : 0;
}

// Bytes of the host's disk the image holds now (it is sparse).
std::uint64_t allocated_bytes(const fs::path& image) {
    struct stat st {};
    return ::stat(image.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_blocks) * 512 : 0;
}

void remove_dir(const fs::path& dir) {
    const fs::path mount = dir / kMount;
    if (is_mount_point(mount)) runtime::unmount_all(mount);
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) std::fprintf(stderr, "deskboxd: removing %s: %s\n", dir.c_str(), ec.message().c_str());
}

}  // namespace

struct VolumeStoreState {
    VolumeStore::Options options;
    std::mutex mutex;
    std::map<std::string, std::vector<VolumeUse>> mounted;  // host mount while it has uses

    fs::path dir_of(const std::string& name) const { return options.root / name; }
    fs::path image_of(const std::string& name) const { return dir_of(name) / kImage; }
    fs::path mount_of(const std::string& name) const { return dir_of(name) / kMount; }

    // A guest's kernel wrote the filesystem (as_disk): the host's kernel mounts it only once
    // e2fsck has checked (and mended) it. mutex held.
    void check_guest_written(const std::string& name) const {
        const fs::path marker = dir_of(name) / kGuestWritten;
        std::error_code ec;
        if (!fs::exists(marker, ec)) return;
        if (!options.mount_guest_written)
            throw VolumeError(VolumeErrorKind::guest_written, "name",
                              "volume " + name +
                                  " was written by a microVM, so this server mounts it in "
                                  "microVMs only (the host's kernel would read a filesystem a "
                                  "guest made; deskboxd --mount-guest-written-volumes true "
                                  "allows it after e2fsck)");
        RunResult checked;
        try {
            checked = run_process({"e2fsck", "-f", "-y", image_of(name).string()},
                                  std::chrono::minutes(10));
        } catch (const std::exception& e) {
            throw VolumeError(VolumeErrorKind::failed, "name",
                              "cannot check volume " + name + ": " + e.what());
        }
        // 0: clean, 1: errors corrected; 4 and up: left uncorrected, or e2fsck failed.
        if (!checked.status.exited() || checked.status.exit_code >= 4)
            throw VolumeError(VolumeErrorKind::failed, "name",
                              "volume " + name +
                                  "'s filesystem, last written by a microVM, does not pass "
                                  "e2fsck, so the host does not mount it: " +
                                  checked.out.substr(0, 2000));
        fs::remove(marker, ec);
    }

    // Why `use` cannot join the volume's `uses`, or "".
    static std::string conflict(const std::string& name, const std::vector<VolumeUse>& uses,
                                const VolumeUse& use) {
        for (const auto& other : uses) {
            if (other.as_disk)
                return "volume " + name + " is the disk of microVM " + other.sandbox_id +
                       ", which takes it whole; kill " + other.sandbox_id + " first";
            if (use.as_disk)
                return "volume " + name + " is mounted by " + other.sandbox_id +
                       "; a microVM takes a volume whole, so nothing else may use it meanwhile";
            if (!use.read_only && !other.read_only)
                return "volume " + name + " is mounted read-write by " + other.sandbox_id +
                       "; one writer at a time (mount it read_only, or kill " + other.sandbox_id +
                       " first)";
        }
        return "";
    }

    VolumeInfo read_info(const std::string& name) const {  // mutex held
        std::ifstream in(dir_of(name) / kRecord);
        if (!in) throw VolumeError(VolumeErrorKind::not_found, "name", "no volume named " + name);
        nlohmann::json record;
        try {
            record = nlohmann::json::parse(in);
            VolumeInfo info;
            info.name = name;
            info.size_mb = record.at("size_mb").get<std::uint64_t>();
            info.created_at = Clock::time_point(
                std::chrono::seconds(record.at("created_unix").get<std::int64_t>()));
            info.labels = record.value("labels", nlohmann::json::object());
            auto it = mounted.find(name);
            const bool host_mounted =
                it != mounted.end() && !it->second.empty() && !it->second.front().as_disk;
            if (it != mounted.end()) info.mounts = it->second;
            if (host_mounted) {
                if (auto usage = runtime::disk_usage(mount_of(name)))
                    info.used_bytes = usage->used_bytes;
            } else {  // as of its last unmount, when a guest has it
                info.used_bytes = image_used_bytes(image_of(name));
            }
            return info;
        } catch (const nlohmann::json::exception& e) {
            throw VolumeError(VolumeErrorKind::failed, "name",
                              "volume " + name + " has an unreadable record: " + e.what());
        }
    }

    // The host's free space, less what existing volumes may still grow by, must hold size_mb.
    void check_space(std::uint64_t size_mb) const {
        struct statvfs st {};
        if (::statvfs(options.root.c_str(), &st) != 0) return;
        const std::uint64_t free_bytes = std::uint64_t(st.f_bavail) * st.f_frsize;
        std::uint64_t committed = 0;
        std::error_code ec;
        for (const auto& entry : fs::directory_iterator(options.root, ec)) {
            const std::string name = entry.path().filename().string();
            if (!VolumeStore::name_problem(name).empty()) continue;
            std::ifstream in(entry.path() / kRecord);
            auto record = nlohmann::json::parse(in, nullptr, false);
            if (!record.is_object() || !record.contains("size_mb")) continue;
            const std::uint64_t size = record.value("size_mb", std::uint64_t{0}) << 20;
            const std::uint64_t held = allocated_bytes(entry.path() / kImage);
            committed += size > held ? size - held : 0;
        }
        const std::uint64_t wanted = size_mb << 20;
        if (committed + wanted > free_bytes)
            throw VolumeError(VolumeErrorKind::no_space, "size_mb",
                              std::to_string(size_mb) + " MiB do not fit: the host has " +
                                  std::to_string(free_bytes >> 20) + " MiB free, of which " +
                                  std::to_string(committed >> 20) +
                                  " MiB are promised to existing volumes");
    }

    void release(const std::string& name, const std::string& sandbox_id) {
        std::lock_guard lock(mutex);
        auto it = mounted.find(name);
        if (it == mounted.end()) return;
        auto& uses = it->second;
        auto use = std::find_if(uses.begin(), uses.end(),
                                [&](const VolumeUse& u) { return u.sandbox_id == sandbox_id; });
        if (use != uses.end()) uses.erase(use);
        if (!uses.empty()) return;
        mounted.erase(it);
        if (!is_mount_point(mount_of(name))) return;  // a guest's disk: never mounted here
        try {
            runtime::unmount_all(mount_of(name));
        } catch (const std::exception& e) {
            std::fprintf(stderr, "deskboxd: unmounting volume %s: %s\n", name.c_str(), e.what());
        }
    }
};

nlohmann::json VolumeInfo::to_json() const {
    nlohmann::json mounts_json = nlohmann::json::array();
    for (const auto& use : mounts)
        mounts_json.push_back({{"sandbox_id", use.sandbox_id},
                               {"path", use.path},
                               {"read_only", use.read_only},
                               {"as_disk", use.as_disk}});
    return {{"name", name},
            {"size_mb", size_mb},
            {"used_bytes", used_bytes},
            {"created_at", utc_rfc3339(created_at)},
            {"labels", labels},
            {"mounts", mounts_json}};
}

VolumeLease::VolumeLease(VolumeLease&& other) noexcept {
    *this = std::move(other);
}

VolumeLease& VolumeLease::operator=(VolumeLease&& other) noexcept {
    if (this != &other) {
        release();
        state_ = std::move(other.state_);
        name_ = std::move(other.name_);
        use_ = std::move(other.use_);
        host_path_ = std::move(other.host_path_);
        other.state_.reset();
    }
    return *this;
}

VolumeLease::~VolumeLease() {
    release();
}

void VolumeLease::release() {
    if (auto state = state_.lock()) state->release(name_, use_.sandbox_id);
    state_.reset();
}

std::string VolumeStore::name_problem(const std::string& name) {
    return resource_name_problem(name);
}

VolumeStore::VolumeStore(Options options) : state_(std::make_shared<VolumeStoreState>()) {
    state_->options = std::move(options);
    fs::create_directories(state_->options.root);
    ::chmod(state_->options.root.c_str(), 0700);
    std::error_code ec;
    std::vector<fs::path> leftovers;
    for (const auto& entry : fs::directory_iterator(state_->options.root, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind(kCreatingPrefix, 0) == 0 || name.rfind(kDeletingPrefix, 0) == 0)
            leftovers.push_back(entry.path());
    }
    for (const auto& dir : leftovers) remove_dir(dir);
}

VolumeStore::~VolumeStore() = default;

std::uint32_t VolumeStore::owner_uid() const {
    return state_->options.owner_uid;
}
std::uint32_t VolumeStore::owner_gid() const {
    return state_->options.owner_gid;
}

VolumeInfo VolumeStore::create(const std::string& name, std::uint64_t size_mb,
                               const nlohmann::json& labels) {
    if (auto problem = name_problem(name); !problem.empty())
        throw VolumeError(VolumeErrorKind::invalid, "name", "name: " + problem);
    const auto& options = state_->options;
    if (size_mb < options.min_size_mb || size_mb > options.max_size_mb)
        throw VolumeError(VolumeErrorKind::invalid, "size_mb",
                          "size_mb: " + std::to_string(size_mb) + " is outside " +
                              std::to_string(options.min_size_mb) + ".." +
                              std::to_string(options.max_size_mb));
    std::lock_guard lock(state_->mutex);
    if (fs::exists(state_->dir_of(name)))
        throw VolumeError(VolumeErrorKind::exists, "name", "a volume named " + name + " exists");
    state_->check_space(size_mb);
    const fs::path staging = options.root / (kCreatingPrefix + name + "-" + random::hex(4));
    try {
        fs::create_directory(staging);
        runtime::Ext4ImageOptions image;
        image.journal = true;  // its data must survive a host crash
        image.root_uid = options.owner_uid;
        image.root_gid = options.owner_gid;
        image.mkfs = options.mkfs;
        runtime::make_ext4_image(staging / kImage, size_mb, image);
        const auto now = Clock::now();
        nlohmann::json record = {
            {"name", name},
            {"size_mb", size_mb},
            {"created_unix",
             std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count()},
            {"labels", labels}};
        atomic_file::write(staging / kRecord, record.dump(2) + "\n",
                           {.mode = 0600, .durability = atomic_file::Durability::power_loss});
        // The rename makes it a volume: a kill before it leaves a .creating- leftover only.
        atomic_file::sync_with_directory(staging / kImage);  // mkfs's writes, before the name
        fs::rename(staging, state_->dir_of(name));
        atomic_file::sync_with_directory(state_->dir_of(name));
    } catch (const std::exception& e) {
        remove_dir(staging);
        throw VolumeError(VolumeErrorKind::failed, "",
                          "cannot create volume " + name + ": " + e.what());
    }
    return state_->read_info(name);
}

std::vector<VolumeInfo> VolumeStore::list() const {
    std::lock_guard lock(state_->mutex);
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(state_->options.root, ec)) {
        const std::string name = entry.path().filename().string();
        if (name_problem(name).empty() && entry.is_directory()) names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    std::vector<VolumeInfo> out;
    for (const auto& name : names) {
        try {
            out.push_back(state_->read_info(name));
        } catch (const VolumeError&) {
            // vanished meanwhile or unreadable: listed by inspect's error, not here
        }
    }
    return out;
}

VolumeInfo VolumeStore::inspect(const std::string& name) const {
    if (!name_problem(name).empty())
        throw VolumeError(VolumeErrorKind::not_found, "name", "no volume named " + name);
    std::lock_guard lock(state_->mutex);
    return state_->read_info(name);
}

void VolumeStore::remove(const std::string& name) {
    if (!name_problem(name).empty())
        throw VolumeError(VolumeErrorKind::not_found, "name", "no volume named " + name);
    std::lock_guard lock(state_->mutex);
    if (!fs::exists(state_->dir_of(name) / kRecord))
        throw VolumeError(VolumeErrorKind::not_found, "name", "no volume named " + name);
    if (auto it = state_->mounted.find(name); it != state_->mounted.end()) {
        std::string users;
        for (const auto& use : it->second) users += (users.empty() ? "" : ", ") + use.sandbox_id;
        throw VolumeError(VolumeErrorKind::in_use, "name",
                          "volume " + name + " is mounted by " + users + "; kill those first");
    }
    const fs::path doomed = state_->options.root / (kDeletingPrefix + name + "-" + random::hex(4));
    std::error_code ec;
    fs::rename(state_->dir_of(name), doomed, ec);
    if (ec)
        throw VolumeError(VolumeErrorKind::failed, "name",
                          "cannot remove volume " + name + ": " + ec.message());
    remove_dir(doomed);
}

VolumeLease VolumeStore::acquire(const std::string& name, const VolumeUse& use) {
    if (!name_problem(name).empty())
        throw VolumeError(VolumeErrorKind::not_found, "name", "no volume named " + name);
    std::lock_guard lock(state_->mutex);
    if (!fs::exists(state_->dir_of(name) / kRecord))
        throw VolumeError(VolumeErrorKind::not_found, "name", "no volume named " + name);
    auto& uses = state_->mounted[name];
    if (auto why = VolumeStoreState::conflict(name, uses, use); !why.empty()) {
        if (uses.empty()) state_->mounted.erase(name);
        throw VolumeError(VolumeErrorKind::in_use, "read_only", why);
    }
    const fs::path mount = state_->mount_of(name);
    if (use.as_disk) {
        try {
            if (is_mount_point(mount)) runtime::unmount_all(mount);  // a killed server's
            atomic_file::write(state_->dir_of(name) / kGuestWritten, use.sandbox_id + "\n");
        } catch (const std::exception& e) {
            state_->mounted.erase(name);
            throw VolumeError(VolumeErrorKind::failed, "name",
                              "cannot hand volume " + name + " to a microVM: " + e.what());
        }
    } else if (uses.empty() && !is_mount_point(mount)) {
        try {
            state_->check_guest_written(name);
        } catch (const VolumeError&) {
            state_->mounted.erase(name);
            throw;
        }
        try {
            fs::create_directories(mount);
            ::chmod(mount.c_str(), 0700);
            runtime::mount_ext4_image(state_->image_of(name), mount);
        } catch (const std::exception& e) {
            state_->mounted.erase(name);
            throw VolumeError(VolumeErrorKind::failed, "name",
                              "cannot mount volume " + name + ": " + e.what());
        }
    }
    uses.push_back(use);
    VolumeLease lease;
    lease.state_ = state_;
    lease.name_ = name;
    lease.use_ = use;
    lease.host_path_ = use.as_disk ? state_->image_of(name) : mount;
    return lease;
}

void VolumeStore::release_unused() {
    std::lock_guard lock(state_->mutex);
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(state_->options.root, ec)) {
        const std::string name = entry.path().filename().string();
        if (!name_problem(name).empty() || state_->mounted.count(name)) continue;
        const fs::path mount = entry.path() / kMount;
        if (!is_mount_point(mount)) continue;
        try {
            runtime::unmount_all(mount);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "deskboxd: unmounting unused volume %s: %s\n", name.c_str(),
                         e.what());
        }
    }
}

}  // namespace deskbox::volumes
