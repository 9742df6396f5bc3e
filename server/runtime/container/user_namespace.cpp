#include "server/runtime/container/user_namespace.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <tuple>

#include "common/parse_integer.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;

namespace {

std::string errno_text(const std::string& what) {
    return what + ": " + std::strerror(errno);
}

// Ids an account file names: field 2 (uid) and 3 (gid) of passwd, 2 of group.
// subuid/subgid lines are name:first:count, a range.
struct IdSpan {
    std::uint64_t first = 0, count = 1;
    std::string where;
};

std::vector<IdSpan> ids_in(const fs::path& file, bool subordinate) {
    std::vector<IdSpan> spans;
    std::ifstream in(file);
    int number = 0;
    for (std::string line; std::getline(in, line);) {
        ++number;
        if (line.empty() || line[0] == '#') continue;
        std::vector<std::string> fields;
        std::istringstream split(line);
        for (std::string f; std::getline(split, f, ':');) fields.push_back(f);
        const std::string where = file.string() + ":" + std::to_string(number);
        if (subordinate) {
            if (fields.size() < 3) continue;
            auto first = parse_integer(fields[1]), count = parse_integer(fields[2]);
            if (first && count && *first >= 0 && *count > 0)
                spans.push_back({std::uint64_t(*first), std::uint64_t(*count), where});
        } else {
            for (std::size_t i : {std::size_t{2}, std::size_t{3}})
                if (i < fields.size())
                    if (auto id = parse_integer(fields[i]); id && *id >= 0)
                        spans.push_back({std::uint64_t(*id), 1, where});
        }
    }
    return spans;
}

// Kills and reaps the namespace maker unless it already ended.
struct ChildGuard {
    pid_t pid = -1;
    ~ChildGuard() {
        if (pid <= 0) return;
        ::kill(pid, SIGKILL);
        while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
        }
    }
};

void pin(pid_t pid, const char* ns, const fs::path& file) {
    UniqueFd created(::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    if (!created) throw RuntimeError(errno_text("cannot create " + file.string()));
    const std::string source = "/proc/" + std::to_string(pid) + "/ns/" + ns;
    if (::mount(source.c_str(), file.c_str(), nullptr, MS_BIND, nullptr) != 0)
        throw RuntimeError(errno_text("cannot pin " + source + " on " + file.string()));
}

void unpin_file(const fs::path& file) noexcept {
    ::umount2(file.c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove(file, ec);
}

}  // namespace

void write_id_map(pid_t pid, const char* which, std::uint32_t host_base) {
    const std::string path = "/proc/" + std::to_string(pid) + "/" + which;
    const std::string map =
        "0 " + std::to_string(host_base) + " " + std::to_string(kIdsPerSandbox) + "\n";
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd || ::write(fd.get(), map.data(), map.size()) != ssize_t(map.size()))
        throw RuntimeError(errno_text("cannot write " + path));
}

std::string host_id_range_problem(const HostIdRange& range, const fs::path& etc) {
    const std::uint64_t begin = range.first;
    const std::uint64_t end = begin + std::uint64_t(range.slots) * kIdsPerSandbox;
    if (range.slots == 0) return "the host id range has no slots";
    if (begin == 0 || end > 0xFFFFFFFFull)
        return "host ids " + std::to_string(begin) + ".." + std::to_string(end - 1) +
               " do not fit between 1 and 4294967294";
    for (auto [name, subordinate] : {std::pair{"passwd", false}, std::pair{"group", false},
                                     std::pair{"subuid", true}, std::pair{"subgid", true}})
        for (const auto& span : ids_in(etc / name, subordinate))
            if (span.first < end && span.first + span.count > begin)
                return span.where + " uses host ids inside deskbox's range " +
                       std::to_string(begin) + ".." + std::to_string(end - 1) +
                       " (choose another with --userns-range)";
    return {};
}

void open_the_way_to_sandboxes(const fs::path& state_dir) {
    const fs::path sandboxes = fs::absolute(state_dir).lexically_normal() / "sandboxes";
    std::error_code ec;
    fs::create_directories(sandboxes, ec);
    if (ec) throw RuntimeError("cannot create " + sandboxes.string() + ": " + ec.message());
    // The state dir may be the operator's: it only gains o+x. `sandboxes` is deskboxd's own:
    // 0711, so no sandbox can list the others.
    for (auto [ours, perms, how] :
         {std::tuple{sandboxes.parent_path(), fs::perms::others_exec, fs::perm_options::add},
          std::tuple{sandboxes, fs::perms(0711), fs::perm_options::replace}}) {
        fs::permissions(ours, perms, how, ec);
        if (ec) throw RuntimeError("cannot chmod " + ours.string() + ": " + ec.message());
    }
    for (fs::path dir = sandboxes.parent_path().parent_path();; dir = dir.parent_path()) {
        struct stat st {};
        if (::stat(dir.c_str(), &st) != 0) throw RuntimeError(errno_text("stat " + dir.string()));
        if (!(st.st_mode & S_IXOTH)) {
            char mode[8];
            std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
            throw RuntimeError(dir.string() + " (mode " + mode +
                               ") is not searchable by others, and sandboxes in user namespaces "
                               "must pass through it to their files in " +
                               sandboxes.parent_path().string() + ": chmod o+x " + dir.string() +
                               ", choose a --state-dir below searchable directories, or start "
                               "with --userns false (weaker)");
        }
        if (dir == dir.root_path()) break;
    }
}

HostIdSlots::HostIdSlots(HostIdRange range) : state_(std::make_shared<detail::HostIdSlotsState>()) {
    state_->range = range;
}

HostIdSlots::Lease& HostIdSlots::Lease::operator=(Lease&& other) noexcept {
    if (this != &other) {
        give_back();
        state_ = std::move(other.state_);
        slot_ = other.slot_;
    }
    return *this;
}

void HostIdSlots::Lease::give_back() noexcept {
    if (!state_) return;
    std::lock_guard lock(state_->mutex);
    state_->taken.erase(slot_);
    state_.reset();
}

HostIdSlots::Lease HostIdSlots::acquire() {
    std::lock_guard lock(state_->mutex);
    for (std::uint32_t slot = 0; slot < state_->range.slots; ++slot)
        if (state_->taken.insert(slot).second) {
            Lease lease;
            lease.state_ = state_;
            lease.slot_ = slot;
            return lease;
        }
    throw RuntimeError("all " + std::to_string(state_->range.slots) +
                       " host id ranges for sandboxes are in use");
}

HostIdSlots::Lease HostIdSlots::claim(std::uint32_t host_base) {
    const auto& range = state_->range;
    if (host_base < range.first || (host_base - range.first) % kIdsPerSandbox != 0 ||
        (host_base - range.first) / kIdsPerSandbox >= range.slots)
        throw RuntimeError("host ids from " + std::to_string(host_base) +
                           " are not one of this server's ranges");
    const std::uint32_t slot = (host_base - range.first) / kIdsPerSandbox;
    std::lock_guard lock(state_->mutex);
    if (!state_->taken.insert(slot).second)
        throw RuntimeError("host ids from " + std::to_string(host_base) + " are already in use");
    Lease lease;
    lease.state_ = state_;
    lease.slot_ = slot;
    return lease;
}

SandboxNamespaces SandboxNamespaces::create(const fs::path& dir, HostIdSlots::Lease ids) {
    const std::uint32_t host_base = ids.host_base();
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw RuntimeError("cannot create " + dir.string() + ": " + ec.message());
    Pipe to_child = Pipe::create(), from_child = Pipe::create();
    ChildGuard child;
    child.pid = ::fork();
    if (child.pid < 0) throw RuntimeError(errno_text("fork"));
    if (child.pid == 0) {
        // Only async-signal-safe calls: the server has threads.
        char step = 0;
        if (::unshare(CLONE_NEWUSER) != 0) ::_exit(1);
        if (::write(from_child.write.get(), "u", 1) != 1) ::_exit(2);
        if (::read(to_child.read.get(), &step, 1) != 1) ::_exit(3);
        // Owned by the new user namespace: the container may mount sysfs for it.
        if (::unshare(CLONE_NEWNET) != 0) ::_exit(4);
        if (::write(from_child.write.get(), "n", 1) != 1) ::_exit(5);
        (void)::read(to_child.read.get(), &step, 1);  // until the parent closes its end
        ::_exit(0);
    }
    from_child.write.reset();
    auto await = [&](char expected, const char* step) {
        char got = 0;
        if (::read(from_child.read.get(), &got, 1) != 1 || got != expected)
            throw RuntimeError(std::string("cannot make the sandbox's user namespace: ") + step +
                               " failed in the child");
    };
    SandboxNamespaces made(dir, std::move(ids));
    await('u', "unshare(CLONE_NEWUSER)");
    write_id_map(child.pid, "uid_map", host_base);
    write_id_map(child.pid, "gid_map", host_base);
    if (::write(to_child.write.get(), "m", 1) != 1) throw RuntimeError(errno_text("pipe"));
    await('n', "unshare(CLONE_NEWNET)");
    pin(child.pid, "user", made.user_path());
    pin(child.pid, "net", made.net_path());
    made.user_ = UniqueFd(::open(made.user_path().c_str(), O_RDONLY | O_CLOEXEC));
    if (!made.user_) throw RuntimeError(errno_text("cannot open " + made.user_path().string()));
    return made;  // ChildGuard ends the child; the pins keep both namespaces
}

SandboxNamespaces SandboxNamespaces::open(const fs::path& dir, HostIdSlots::Lease ids) {
    SandboxNamespaces found(dir, std::move(ids));
    found.released_ = true;  // not ours to unpin until this succeeded
    // A pin is a mounted nsfs file; an empty file is what a crash between two steps left.
    for (const fs::path& file : {found.user_path(), found.net_path()}) {
        UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
        struct statfs fs_info {};
        if (!fd || ::fstatfs(fd.get(), &fs_info) != 0 || fs_info.f_type != NSFS_MAGIC)
            throw RuntimeError(file.string() + " is not a pinned namespace");
        if (file == found.user_path()) found.user_ = std::move(fd);
    }
    found.released_ = false;
    return found;
}

SandboxNamespaces::SandboxNamespaces(SandboxNamespaces&& other) noexcept
    : dir_(std::move(other.dir_)),
      ids_(std::move(other.ids_)),
      user_(std::move(other.user_)),
      released_(std::exchange(other.released_, true)) {}

SandboxNamespaces& SandboxNamespaces::operator=(SandboxNamespaces&& other) noexcept {
    if (this != &other) {
        unpin();
        dir_ = std::move(other.dir_);
        ids_ = std::move(other.ids_);
        user_ = std::move(other.user_);
        released_ = std::exchange(other.released_, true);
    }
    return *this;
}

SandboxNamespaces::~SandboxNamespaces() {
    unpin();
}

void SandboxNamespaces::unpin() noexcept {
    user_.reset();
    if (released_ || dir_.empty()) return;
    unpin_file(user_path());
    unpin_file(net_path());
    std::error_code ec;
    fs::remove(dir_, ec);  // only if empty
    released_ = true;
}

void mount_idmapped(const fs::path& source, const fs::path& target, int userns_fd, bool writable) {
    UniqueFd tree(::open_tree(AT_FDCWD, source.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
    if (!tree) throw RuntimeError(errno_text("open_tree " + source.string()));
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if (!writable) attr.attr_set |= MOUNT_ATTR_RDONLY;
    attr.userns_fd = std::uint64_t(userns_fd);
    if (::mount_setattr(tree.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
        throw RuntimeError(errno_text("cannot id-map " + source.string()));
    if (::move_mount(tree.get(), "", AT_FDCWD, target.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0)
        throw RuntimeError(
            errno_text("cannot mount " + source.string() + " on " + target.string()));
}

}  // namespace deskbox::runtime
