// Container sandboxes run in a user namespace of their own: uid/gid 0..65535 inside are a
// per-sandbox range of host ids that no host account uses, so a process that escapes its
// other namespaces is nobody on the host, and two sandboxes are strangers to each other.
//
// Debian's runc (1.1) cannot give a lower layer an id mapping, so deskboxd makes the user
// namespace itself (pinned by a bind mount), an idmapped read-only mount of the template
// (mount_setattr(MOUNT_ATTR_IDMAP): the template's root-owned files appear as the range's
// root), and a network namespace owned by the user namespace (sysfs can only be mounted in a
// network namespace that the container's user namespace owns). runc joins both by path.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"

namespace deskbox::runtime {

// Ids per sandbox: the whole 16-bit range a Debian userland expects (nobody is 65534).
inline constexpr std::uint32_t kIdsPerSandbox = 65536;

// The host ids deskboxd hands out: `slots` ranges of kIdsPerSandbox from `first`.
struct HostIdRange {
    std::uint32_t first = 1u << 30;  // above useradd's 100000+ subordinate ranges
    std::uint32_t slots = 4096;
    std::uint32_t base_of(std::uint32_t slot) const { return first + slot * kIdsPerSandbox; }
};

namespace detail {
struct HostIdSlotsState {
    HostIdRange range;
    std::mutex mutex;
    std::set<std::uint32_t> taken;
};
}  // namespace detail

// Which slots of a HostIdRange this server's sandboxes hold (thread-safe). A Lease gives its
// slot back when it goes.
class HostIdSlots {
  public:
    explicit HostIdSlots(HostIdRange range);
    class Lease {
      public:
        Lease() = default;
        Lease(Lease&& other) noexcept : state_(std::move(other.state_)), slot_(other.slot_) {}
        Lease& operator=(Lease&& other) noexcept;
        ~Lease() { give_back(); }
        std::uint32_t host_base() const { return state_ ? state_->range.base_of(slot_) : 0; }
        bool valid() const { return state_ != nullptr; }

      private:
        friend class HostIdSlots;
        void give_back() noexcept;
        std::shared_ptr<detail::HostIdSlotsState> state_;
        std::uint32_t slot_ = 0;
    };
    // The lowest free slot. Throws RuntimeError when every slot is taken.
    Lease acquire();
    // The slot whose range starts at `host_base` (a sandbox adopted from its record). Throws
    // RuntimeError if that is not a slot's base or the slot is taken.
    Lease claim(std::uint32_t host_base);

  private:
    std::shared_ptr<detail::HostIdSlotsState> state_;
};

// Why `range` may not be used, or empty: it must fit below 2^32-1 and no account, group or
// subordinate range in the given files may fall inside it (the files that are missing are
// skipped). Checked at server start.
std::string host_id_range_problem(const HostIdRange& range,
                                  const std::filesystem::path& etc = "/etc");

// Writes `which` ("uid_map" or "gid_map") of process `pid`, fresh in a user namespace: ids
// 0..kIdsPerSandbox-1 inside are host ids from `host_base`. Throws RuntimeError.
void write_id_map(pid_t pid, const char* which, std::uint32_t host_base);

// runc's init mounts a sandbox's rootfs from inside its user namespace, as the range's root,
// which is "others" to every host directory on the way to `<state_dir>/sandboxes/<id>`. Makes
// `state_dir` searchable by others (o+x) and its `sandboxes` 0711 (no sandbox lists the others),
// and throws RuntimeError naming the first directory above them that is not (a home dir, a mkdtemp
// dir), with what to do about it.
void open_the_way_to_sandboxes(const std::filesystem::path& state_dir);

// A user namespace mapping 0..kIdsPerSandbox-1 to the lease's host ids, and a network
// namespace it owns, each pinned by a bind mount on a file in `dir` ("user", "net"), so they
// outlive the process that made them and this object (release()) for the next server.
class SandboxNamespaces {
  public:
    // Makes both. Throws RuntimeError naming the step; nothing is left on failure.
    static SandboxNamespaces create(const std::filesystem::path& dir, HostIdSlots::Lease ids);
    // The pins a previous server left (adoption). Throws RuntimeError if they are not there.
    static SandboxNamespaces open(const std::filesystem::path& dir, HostIdSlots::Lease ids);

    SandboxNamespaces(SandboxNamespaces&&) noexcept;
    SandboxNamespaces& operator=(SandboxNamespaces&&) noexcept;
    ~SandboxNamespaces();  // unmounts the pins unless released

    std::filesystem::path user_path() const { return dir_ / "user"; }
    std::filesystem::path net_path() const { return dir_ / "net"; }
    std::uint32_t host_base() const { return ids_.host_base(); }
    int user_fd() const { return user_.get(); }
    // Keeps the pins mounted for the next server.
    void release() { released_ = true; }

  private:
    SandboxNamespaces(std::filesystem::path dir, HostIdSlots::Lease ids)
        : dir_(std::move(dir)), ids_(std::move(ids)) {}
    void unpin() noexcept;

    std::filesystem::path dir_;
    HostIdSlots::Lease ids_;
    UniqueFd user_;
    bool released_ = false;
};

// Mounts `source` (read-only unless `writable`; nosuid, nodev) at `target` (an existing
// directory) with ids shifted through `userns_fd`'s mapping: a file owned by k on disk appears
// owned by the mapping of k, and what the namespace's k writes is stored as k. Throws
// RuntimeError (with the kernel's reason: the filesystem may not support it).
void mount_idmapped(const std::filesystem::path& source, const std::filesystem::path& target,
                    int userns_fd, bool writable = false);

}  // namespace deskbox::runtime
