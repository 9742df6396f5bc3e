// A user namespace (and a mount namespace it owns) kept alive by a small child of deskboxd for
// as long as the object lives: the template engine (buildah) runs in it, so a RUN step's root is
// the range's root on the host, never host root, and the engine's storage is written with the
// ids the next step expects (docs/ARCHITECTURE.md, "Templates users build").
//
// Unlike a sandbox's namespaces (pinned by bind mounts, user_namespace.hpp), these die with the
// server: the holder gets SIGKILL when the thread that made it ends, and the mount namespace
// takes every mount the engine made in it along. Nothing is left on the host after a crash.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace deskbox::runtime {

// A process that waits until it is killed (the destructor), holding namespaces by being in them.
class NamespaceHolder {
  public:
    NamespaceHolder() = default;
    explicit NamespaceHolder(pid_t pid) : pid_(pid) {}
    NamespaceHolder(NamespaceHolder&& other) noexcept : pid_(other.pid_) { other.pid_ = -1; }
    NamespaceHolder& operator=(NamespaceHolder&& other) noexcept;
    ~NamespaceHolder() { end(); }

    pid_t pid() const { return pid_; }
    bool valid() const { return pid_ > 0; }
    // Whether the holder still runs (false once it died, e.g. killed by someone else).
    bool alive() const;
    // /proc/<pid>/ns/<ns>, e.g. "user", "mnt", "net".
    std::string ns_path(const char* ns) const;

  private:
    void end() noexcept;
    pid_t pid_ = -1;
};

class PinnedUserNamespace {
  public:
    // A user namespace mapping 0..kIdsPerSandbox-1 to host ids from `host_base`, with a mount
    // namespace it owns (mounts private). Throws RuntimeError naming the step.
    static PinnedUserNamespace create(std::uint32_t host_base);

    std::uint32_t host_base() const { return host_base_; }
    bool alive() const { return holder_.alive(); }
    std::string user_path() const { return holder_.ns_path("user"); }
    std::string mount_path() const { return holder_.ns_path("mnt"); }
    // Where the namespace's mount `path` is seen from the host (as root).
    std::string host_view(const std::string& path) const;
    // argv prefix that runs a command as the namespace's root (uid and gid 0 inside), in its
    // mount namespace: nsenter with both namespaces, then the command.
    std::vector<std::string> enter_command() const;
    // A new network namespace this user namespace owns (a container in the user namespace may
    // join it and mount sysfs for it), held by a process running as the namespace's root, so
    // the namespace's processes can open holder.ns_path("net"). Throws RuntimeError.
    NamespaceHolder new_network_namespace() const;
    // Mounts host directory `source` writable at `target` (a directory) inside the namespace's
    // mount namespace only, with ids shifted into the namespace: a file owned by k on disk is
    // k's inside, and what the namespace's root writes there is stored with ids 0..65535, as a
    // host root's would be. unmount_inside() takes it away. Throws RuntimeError.
    void mount_idmapped_inside(const std::string& source, const std::string& target) const;
    void unmount_inside(const std::string& target) const noexcept;

  private:
    PinnedUserNamespace(NamespaceHolder holder, std::uint32_t host_base)
        : holder_(std::move(holder)), host_base_(host_base) {}
    NamespaceHolder holder_;
    std::uint32_t host_base_ = 0;
};

}  // namespace deskbox::runtime
