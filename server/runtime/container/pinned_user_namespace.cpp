#include "server/runtime/container/pinned_user_namespace.hpp"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/child_process.hpp"
#include "common/unique_fd.hpp"
#include "server/runtime/container/user_namespace.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

namespace {

// What a holder execs once its namespaces are made: nothing of deskboxd (memory, descriptors)
// stays in a process that lives as long as the server.
constexpr const char* kSleep = "/bin/sleep";

// Dies with the thread that forked it; false if that parent is already gone.
bool die_with(pid_t parent) {
    return ::prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 && ::getppid() == parent;
}

[[noreturn]] void fail(int report_fd, char step) {
    [[maybe_unused]] auto n = ::write(report_fd, &step, 1);
    ::_exit(127);
}

[[noreturn]] void hold() {
    // The holder keeps nothing of the server's: an inherited listening socket (Asio's has no
    // O_CLOEXEC) would go on accepting connections after deskboxd died, until the holder's
    // death signal landed, and reset them then.
    close_inherited_fds({});
    ::execl(kSleep, "sleep", "infinity", static_cast<char*>(nullptr));
    ::_exit(127);
}

// Forks a child running `setup(report_fd)` (async-signal-safe calls only: the server has
// threads), which ends by exec'ing the holder or by fail(); returns the holder once the exec
// closed the report pipe, or throws naming the step that failed.
template <typename Setup>
NamespaceHolder fork_holder(const char* what, Setup setup) {
    Pipe report = Pipe::create();
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw RuntimeError(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        report.read.reset();
        if (!die_with(parent)) ::_exit(127);
        setup(report.write.get());
        hold();
    }
    NamespaceHolder holder(pid);
    report.write.reset();
    char step = 0;
    ssize_t n;
    while ((n = ::read(report.read.get(), &step, 1)) < 0 && errno == EINTR) {
    }
    if (n != 0)
        throw RuntimeError(std::string("cannot make ") + what + ": step '" + step +
                           "' failed (u: unshare, m: mount, s: setns, i: ids, n: network, " +
                           "e: exec)");
    return holder;
}

// Runs `step` (async-signal-safe) in a child that joined mount namespace `mnt_fd` as host root;
// whether it returned true.
template <typename Step>
bool in_mount_namespace(int mnt_fd, Step step) {
    const pid_t pid = ::fork();
    if (pid < 0) return false;
    if (pid == 0) ::_exit(::setns(mnt_fd, CLONE_NEWNS) == 0 && step() ? 0 : 1);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

NamespaceHolder& NamespaceHolder::operator=(NamespaceHolder&& other) noexcept {
    if (this != &other) {
        end();
        pid_ = other.pid_;
        other.pid_ = -1;
    }
    return *this;
}

bool NamespaceHolder::alive() const {
    if (pid_ <= 0) return false;
    siginfo_t info{};
    // WNOWAIT: looks without reaping, so the pid stays ours until end().
    if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0)
        return false;
    return info.si_pid == 0;
}

std::string NamespaceHolder::ns_path(const char* ns) const {
    return "/proc/" + std::to_string(pid_) + "/ns/" + ns;
}

void NamespaceHolder::end() noexcept {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
}

PinnedUserNamespace PinnedUserNamespace::create(std::uint32_t host_base) {
    auto holder = fork_holder("the engine's user namespace", [](int report) {
        if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) fail(report, 'u');
        // Nothing the engine mounts reaches the host, whatever the host's propagation.
        if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(report, 'm');
        if (::access(kSleep, X_OK) != 0) fail(report, 'e');
    });
    // Written once the child is in its namespace (a process with CAP_SETUID here may).
    write_id_map(holder.pid(), "uid_map", host_base);
    write_id_map(holder.pid(), "gid_map", host_base);
    return PinnedUserNamespace(std::move(holder), host_base);
}

std::string PinnedUserNamespace::host_view(const std::string& path) const {
    return "/proc/" + std::to_string(holder_.pid()) + "/root" + path;
}

std::vector<std::string> PinnedUserNamespace::enter_command() const {
    // Without --preserve-credentials nsenter becomes uid and gid 0 of the user namespace.
    return {"nsenter", "--user=" + user_path(), "--mount=" + mount_path(), "--"};
}

NamespaceHolder PinnedUserNamespace::new_network_namespace() const {
    UniqueFd user(::open(user_path().c_str(), O_RDONLY | O_CLOEXEC));
    if (!user) throw RuntimeError("cannot open " + user_path() + ": " + std::strerror(errno));
    const int user_fd = user.get();
    return fork_holder("a network namespace for the engine", [user_fd](int report) {
        if (::setns(user_fd, CLONE_NEWUSER) != 0) fail(report, 's');
        // Root of the namespace (not host root, unmapped there): its processes may open the
        // holder's /proc/<pid>/ns/net. Changing ids clears the death signal: set it again.
        const pid_t parent = ::getppid();
        if (::setgroups(0, nullptr) != 0 || ::setresgid(0, 0, 0) != 0 || ::setresuid(0, 0, 0) != 0)
            fail(report, 'i');
        if (!die_with(parent)) ::_exit(127);
        if (::unshare(CLONE_NEWNET) != 0) fail(report, 'n');
    });
}

void PinnedUserNamespace::mount_idmapped_inside(const std::string& source,
                                                const std::string& target) const {
    UniqueFd user(::open(user_path().c_str(), O_RDONLY | O_CLOEXEC));
    UniqueFd mnt(::open(mount_path().c_str(), O_RDONLY | O_CLOEXEC));
    if (!user || !mnt) throw RuntimeError("cannot open the namespaces of " + user_path());
    // Made here (a detached copy of the host's mount), attached there.
    UniqueFd tree(::open_tree(AT_FDCWD, source.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
    if (!tree) throw RuntimeError("open_tree " + source + ": " + std::strerror(errno));
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    attr.userns_fd = static_cast<std::uint64_t>(user.get());
    if (::mount_setattr(tree.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
        throw RuntimeError("cannot id-map " + source + ": " + std::strerror(errno));
    const int tree_fd = tree.get();
    const char* at = target.c_str();
    if (!in_mount_namespace(mnt.get(), [&] {
            return ::move_mount(tree_fd, "", AT_FDCWD, at, MOVE_MOUNT_F_EMPTY_PATH) == 0;
        }))
        throw RuntimeError("cannot mount " + source + " at " + target + " in the namespace");
}

void PinnedUserNamespace::unmount_inside(const std::string& target) const noexcept {
    UniqueFd mnt(::open(mount_path().c_str(), O_RDONLY | O_CLOEXEC));
    const char* at = target.c_str();
    if (mnt) in_mount_namespace(mnt.get(), [&] { return ::umount2(at, MNT_DETACH) == 0; });
}

}  // namespace deskbox::runtime
