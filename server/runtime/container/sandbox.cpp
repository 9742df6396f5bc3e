#include "server/runtime/container/runtime.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/parse_integer.hpp"
#include "common/random.hpp"
#include "server/runtime/container/cgroups.hpp"
#include "server/runtime/container/mounts.hpp"
#include "server/runtime/container/oci_bundle.hpp"
#include "server/runtime/container/runc.hpp"
#include "server/runtime/container/runtime_state.hpp"
#include "server/runtime/container/teardown.hpp"
#include "server/runtime/container/user_namespace.hpp"
#include "server/runtime/exit_classification.hpp"
#include "server/runtime/guest_env.hpp"
#include "server/runtime/runtime_util.hpp"
#include "server/runtime/tree_copy.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;
using nlohmann::json;

ContainerPaths::ContainerPaths(const fs::path& state_root, const std::string& id)
    : runc_root(state_root / "runc"),
      dir(sandbox_dir(state_root, id)),
      metadata(dir / "sandbox.json"),
      disk_image(dir / "disk.img"),
      disk(dir / "disk"),
      upper(disk / "upper"),
      work(disk / "work"),
      bundle(dir / "bundle"),
      rootfs(bundle / "rootfs"),
      run_dir(dir / "run"),
      console_log(dir / "console.log"),
      runc_log(dir / "runc.log"),
      pid_file(dir / "container.pid"),
      lower(dir / "lower") {}

ContainerSandbox::ContainerSandbox(Key, std::shared_ptr<Shared> shared, const SandboxSpec& spec)
    : ProcessSandbox(ContainerPaths(spec.state_root, spec.id).console_log),
      shared_(std::move(shared)),
      spec_(spec),
      paths_(spec.state_root, spec.id) {}

ContainerSandbox::~ContainerSandbox() {
    try {
        do_kill({});
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deskbox: tearing down sandbox %s: %s\n", spec_.id.c_str(), e.what());
    }
}

std::string ContainerSandbox::cgroup_path() const {
    return "/" + shared_->options.cgroup_parent + "/" + spec_.id;
}

fs::path ContainerSandbox::agent_socket_path() const {
    return paths_.run_dir / kAgentSocketName;
}

void ContainerSandbox::launch() {
    PhaseClock clock(phases_);
    write_metadata();
    mount_rootfs(clock);
    write_bundle();
    clock.mark("bundle");
    run_until_entry_started();
    clock.mark("runc_run");
}

void ContainerSandbox::write_metadata() {
    json metadata = {{"runtime", kContainerRuntimeName},
                     {"id", spec_.id},
                     {"cgroup", cgroup_path()},
                     {"template_rootfs", spec_.template_rootfs.string()},
                     {"created_unix", static_cast<std::int64_t>(std::time(nullptr))}};
    std::ofstream out(paths_.metadata);
    out << metadata.dump(2) << '\n';
    if (!out) throw RuntimeError("cannot write " + paths_.metadata.string());
}

void ContainerSandbox::mount_rootfs(PhaseClock& clock) {
    const auto& options = shared_->options;
    make_dir(paths_.disk, 0755);
    if (spec_.limits.disk_mb > 0) {
        mount_capped_disk(paths_.disk_image, paths_.disk, spec_.limits.disk_mb, options.mkfs_ext4);
        clock.mark("capped_disk");
    }
    make_dir(paths_.upper, 0755);  // becomes the mode of / inside
    make_dir(paths_.work, 0700);
    make_dir(paths_.bundle, 0700);
    make_dir(paths_.rootfs, 0755);
    // Host ids of the guest's ids: shifted into the sandbox's range in a user namespace.
    const bool shifted = !spec_.user_namespace.empty();
    const std::uint32_t base = shifted ? spec_.host_id_base : 0;
    auto chown_dir = [](const fs::path& dir, std::uint32_t uid, std::uint32_t gid) {
        if (::chown(dir.c_str(), uid, gid) != 0)
            throw RuntimeError("chown " + dir.string() + ": " + std::strerror(errno));
    };
    // The agent (running as spec.uid) creates its socket here; nobody else may enter.
    make_dir(paths_.run_dir, 0700);
    chown_dir(paths_.run_dir, base + spec_.uid, base + spec_.gid);

    fs::path lower = spec_.template_rootfs;
    if (shifted) {
        // The template's files appear owned by the range (its root is the guest's root), and
        // what the guest writes lands in the upper dir with the range's ids.
        UniqueFd userns(::open(spec_.user_namespace.c_str(), O_RDONLY | O_CLOEXEC));
        if (!userns)
            throw RuntimeError("cannot open " + spec_.user_namespace.string() + ": " +
                               std::strerror(errno));
        // runc's init runs as the range's root: it must pass through the private dirs to the
        // rootfs (they stay closed to everyone else).
        chown_dir(paths_.dir, base, base);
        chown_dir(paths_.bundle, base, base);
        make_dir(paths_.lower, 0755);
        mount_idmapped(spec_.template_rootfs, paths_.lower, userns.get());
        lower = paths_.lower;
        chown_dir(paths_.upper, base, base);
        clock.mark("idmapped_template");
    }
    if (!spec_.seed_files.empty()) {
        // A saved writable layer: the guest's ids become this sandbox's.
        try {
            copy_tree(spec_.seed_files, paths_.upper, {0, base});
        } catch (const RuntimeError& e) {
            throw RuntimeError(std::string("cannot start from the saved files: ") + e.what());
        }
    }
    mount_overlay(lower, paths_.upper, paths_.work, paths_.rootfs);
    clock.mark("overlay");
    if (spec_.egress_ca) {
        install_egress_ca(base);
        clock.mark("egress_ca");
    }
}

void ContainerSandbox::install_egress_ca(std::uint32_t guest_root) {
    // The guest's processes have no capabilities and run as its user, so nothing inside can
    // write /etc: the host does it, through the agent's --install-egress-ca, which runs the
    // same code as a microVM's init. It reads the CA first, then chroots into the merged rootfs
    // and becomes the guest's root (the id range's base; without a user namespace host root
    // with no capabilities): links in the template or a saved layer resolve inside the guest,
    // and the files it writes land in the writable layer owned as the guest's own. A copy from
    // a saved layer holds the CA already; the install sees it and changes nothing.
    const auto agent = spec_.agent_dir / "bin" / "deskbox-agent";
    const std::string id = std::to_string(guest_root);
    check_tool(run_tool({agent.string(), "--install-egress-ca",
                         (spec_.agent_dir / kEgressCaFileName).string(), "--as", kGuestEgressCaPath,
                         "--root", paths_.rootfs.string(), "--uid", id, "--gid", id},
                        std::chrono::seconds(30), "deskbox-agent"),
               "installing the egress CA in sandbox " + spec_.id);
}

SavedCopy ContainerSandbox::save_copy(const fs::path& dir) {
    std::lock_guard lock(mutex_);
    require_running_locked("save a copy of");
    // The writable layer's root is the guest's root: its owner is the id range's base.
    struct stat upper {};
    if (::stat(paths_.upper.c_str(), &upper) != 0)
        throw RuntimeError("cannot save sandbox " + spec_.id + ": stat " + paths_.upper.string() +
                           ": " + std::strerror(errno));
    const bool was_paused = paused_;
    if (!was_paused)
        check_runc(run_runc(shared_->options, paths_.runc_root, {"pause", spec_.id}),
                   "pause " + spec_.id);
    auto thaw = [&] {
        if (!was_paused)
            check_runc(run_runc(shared_->options, paths_.runc_root, {"resume", spec_.id}),
                       "resume " + spec_.id);
    };
    TreeCopyStats stats;
    try {
        make_dir(dir, 0700);
        make_dir(dir / "files", 0755);
        stats = copy_tree(paths_.upper, dir / "files", {upper.st_uid, 0});
        sync_filesystem(dir);
    } catch (const NoSpaceError& e) {
        thaw();
        throw NoSpaceError("cannot save sandbox " + spec_.id + ": " + e.what());
    } catch (const std::exception& e) {
        thaw();
        throw RuntimeError("cannot save sandbox " + spec_.id + ": " + e.what());
    }
    thaw();
    return {CopyKind::filesystem, stats.bytes};
}

std::vector<fs::path> ContainerSandbox::mount_volumes() {
    std::vector<fs::path> sources;
    if (spec_.user_namespace.empty()) {
        for (const auto& volume : spec_.volumes) sources.push_back(volume.source);
        return sources;
    }
    UniqueFd userns(::open(spec_.user_namespace.c_str(), O_RDONLY | O_CLOEXEC));
    if (!userns)
        throw RuntimeError("cannot open " + spec_.user_namespace.string() + ": " +
                           std::strerror(errno));
    const fs::path dir = paths_.dir / "volumes";
    make_dir(dir, 0755);
    for (std::size_t i = 0; i < spec_.volumes.size(); ++i) {
        const fs::path target = dir / std::to_string(i);
        make_dir(target, 0755);
        mount_idmapped(spec_.volumes[i].source, target, userns.get(),
                       /*writable=*/!spec_.volumes[i].read_only);
        sources.push_back(target);
    }
    return sources;
}

void ContainerSandbox::write_bundle() {
    BundleLayout layout{paths_.rootfs, paths_.run_dir, cgroup_path(), {}, {}, {}, mount_volumes()};
    // Templates ship an empty /etc/machine-id: each sandbox gets its own (D-Bus, journald and
    // license checks tell machines apart by it), as a microVM's init writes one.
    layout.machine_id = paths_.dir / "machine-id";
    write_file_atomic(layout.machine_id, random::hex(16) + "\n", 0444);
    // The sandbox's own name and localhost without asking DNS, with a network or without one
    // (a program serving on localhost inside an offline sandbox must still find it).
    layout.hosts = paths_.dir / "hosts";
    const std::string name = spec_.hostname.empty() ? "deskbox" : spec_.hostname;
    write_file_atomic(layout.hosts,
                      "127.0.0.1\tlocalhost\n127.0.1.1\t" + name +
                          "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
                      0644);
    if (!spec_.attachment.resolv_conf.empty()) {  // the server's DNS for this sandbox
        layout.resolv_conf = paths_.dir / "resolv.conf";
        write_file_atomic(layout.resolv_conf, spec_.attachment.resolv_conf, 0644);
    }
    write_oci_config(make_oci_config(spec_, layout), paths_.bundle);
}

void ContainerSandbox::run_until_entry_started() {
    const auto& options = shared_->options;
    // runc writes the pid file (temp file + rename) once the entry was exec'd: watch for it
    // rather than polling.
    UniqueFd inotify(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    if (!inotify) throw RuntimeError(std::string("inotify_init1: ") + std::strerror(errno));
    if (::inotify_add_watch(inotify.get(), paths_.dir.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE) < 0)
        throw RuntimeError("inotify_add_watch " + paths_.dir.string() + ": " +
                           std::strerror(errno));

    SpawnOptions spawn;
    spawn.argv =
        runc_argv(options, paths_.runc_root,
                  {"--log", paths_.runc_log.string(), "--log-format", "json", "run", "--bundle",
                   paths_.bundle.string(), "--pid-file", paths_.pid_file.string(), spec_.id});
    spawn.stdout_file = paths_.console_log.string();
    spawn.stderr_file = paths_.console_log.string();
    spawn.new_process_group = true;  // our own signals to the server never reach it
    try {
        runc_ = ChildProcess::spawn(spawn);
    } catch (const std::system_error& e) {
        throw RuntimeError("cannot run " + options.runc + ": " + e.what());
    }

    auto deadline = std::chrono::steady_clock::now() + options.start_timeout;
    while (true) {
        std::error_code ec;
        if (fs::exists(paths_.pid_file, ec)) {
            std::ifstream in(paths_.pid_file);
            if (in >> entry_pid_ && entry_pid_ > 0) break;
        }
        if (!runc_.running()) {
            auto status = runc_.status();
            std::string cause = runc_errors();
            throw RuntimeError("runc run failed (exit " +
                               std::to_string(status ? status->exit_code : -1) +
                               "): " + (cause.empty() ? "no error message" : cause));
        }
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0)
            throw RuntimeError("sandbox " + spec_.id + " did not start within " +
                               std::to_string(options.start_timeout.count()) + " ms; " +
                               runc_errors());
        // Wake on the pid file, or every few ms to notice runc failing.
        pollfd p{inotify.get(), POLLIN, 0};
        ::poll(&p, 1, static_cast<int>(std::min<long>(left.count(), 5)));
        char drain[4096];
        while (::read(inotify.get(), drain, sizeof drain) > 0) {
        }
    }
    // A pidfd pins the entry's identity: signalling it later can never hit a reused pid.
    // ESRCH just means the entry already ended; runc's exit status will tell how.
    int pidfd = pidfd_open(entry_pid_);
    if (pidfd >= 0) entry_pidfd_.reset(pidfd);
}

std::string ContainerSandbox::runc_errors() const {
    std::string errors = runc_log_errors(paths_.runc_log);
    if (!errors.empty()) return errors;
    return trim(read_tail(paths_.console_log, 2048));
}

bool ContainerSandbox::entry_alive_locked() {
    // The entry's pidfd decides, not the runc monitor: the desktop lives on if the monitor dies,
    // and an adopted sandbox has no monitor of ours at all.
    if (entry_pidfd_) return !pidfd_exited(entry_pidfd_.get());
    return runc_.pid() > 0 && runc_.running();
}

ExitInfo ContainerSandbox::describe_exit_locked() {
    // The entry is gone; runc may still be cleaning up: its status says how the entry ended.
    if (runc_.pid() > 0 && runc_.running()) runc_.wait(shared_->options.stop_timeout);
    return classify_container_exit({kill_requested_, runc_.status(),
                                    runc_log_errors(paths_.runc_log), spec_.limits.memory_mb});
}

std::optional<ContainerSandbox::UsageDirs> ContainerSandbox::usage_dirs() {
    std::lock_guard lock(usage_dirs_mutex_);
    if (usage_dirs_) return usage_dirs_;
    try {
        UsageDirs dirs;
        const std::string cgroup = cgroup_path();
        dirs.pids = controller_dir("pids", cgroup);
        dirs.memory = controller_dir("memory", cgroup);
        dirs.cpuacct = controller_dir("cpuacct", cgroup);
        dirs.cpu = controller_dir("cpu", cgroup);
        std::error_code ec;
        dirs.memory_v2 = dirs.memory && fs::exists(*dirs.memory / "memory.current", ec);
        // Kept once the cgroup exists (runc makes it): before, v1 and v2 cannot be told apart.
        if (dirs.memory && !fs::is_directory(*dirs.memory, ec)) return dirs;
        usage_dirs_ = std::move(dirs);
    } catch (const std::exception&) {
        // mountinfo unreadable now (out of fds): no figures this time, found on a later call.
    }
    return usage_dirs_;
}

ResourceUsage ContainerSandbox::usage() {
    ResourceUsage u;
    if (spec_.limits.disk_mb > 0)
        if (auto disk = disk_usage(paths_.disk)) {
            u.disk_bytes = disk->used_bytes;
            u.disk_max_bytes = disk->size_bytes;
        }
    const auto dirs = usage_dirs();
    if (!dirs) return u;
    // A file that cannot be read (gone, or no fd free) is a figure not known, never an error.
    auto number = [](const std::optional<fs::path>& dir,
                     const char* file) -> std::optional<std::uint64_t> {
        if (!dir) return std::nullopt;
        auto line = read_first_line(*dir / file);
        auto value = line ? parse_integer(*line) : std::nullopt;  // missing, or "max"
        if (!value || *value < 0) return std::nullopt;
        return static_cast<std::uint64_t>(*value);
    };
    // "key value" lines: memory.stat by default, cpu.stat (v2) for the CPU time, and
    // "oom_kill N" in memory.events (v2) and memory.oom_control (v1, kernel 4.13+) alike.
    auto stat_value = [](const std::optional<fs::path>& dir, const std::string& wanted,
                         const char* file = "memory.stat") -> std::optional<std::uint64_t> {
        if (!dir) return std::nullopt;
        std::ifstream in(*dir / file);
        std::string key;
        std::uint64_t value = 0;
        while (in >> key >> value)
            if (key == wanted) return value;
        return std::nullopt;
    };
    u.pids = number(dirs->pids, "pids.current");
    u.pids_max = number(dirs->pids, "pids.max");
    const bool v2 = dirs->memory_v2;
    if (v2) {
        u.memory_bytes = number(dirs->memory, "memory.current");
        u.memory_max_bytes = number(dirs->memory, "memory.max");
        u.oom_kills = stat_value(dirs->memory, "oom_kill", "memory.events");
    } else if (dirs->memory) {  // v1
        u.memory_bytes = number(dirs->memory, "memory.usage_in_bytes");
        u.memory_max_bytes = number(dirs->memory, "memory.limit_in_bytes");
        u.oom_kills = stat_value(dirs->memory, "oom_kill", "memory.oom_control");
    }
    if (u.memory_bytes) {
        // Page cache the kernel drops first under pressure is not the sandbox's to pay for.
        const auto inactive_file =
            stat_value(dirs->memory, v2 ? "inactive_file" : "total_inactive_file");
        u.memory_resident_bytes =
            *u.memory_bytes - std::min(*u.memory_bytes, inactive_file.value_or(0));
    }
    if (!v2 && dirs->cpuacct) {
        u.cpu_ns = number(dirs->cpuacct, "cpuacct.usage");
    } else if (dirs->cpu) {
        if (auto usec = stat_value(dirs->cpu, "usage_usec", "cpu.stat")) u.cpu_ns = *usec * 1000;
    }
    return u;
}

UniqueFd ContainerSandbox::connect_agent(std::chrono::milliseconds timeout) {
    return connect_unix_retry(agent_socket_path(), std::chrono::steady_clock::now() + timeout,
                              [this]() -> std::string {
                                  std::lock_guard lock(mutex_);
                                  if (alive_locked()) return {};
                                  return exit_ ? exit_->reason : "not running";
                              });
}

void ContainerSandbox::pause() {
    std::lock_guard lock(mutex_);
    require_running_locked("pause");
    if (paused_) return;
    check_runc(run_runc(shared_->options, paths_.runc_root, {"pause", spec_.id}),
               "pause " + spec_.id);
    paused_ = true;
}

void ContainerSandbox::resume() {
    std::lock_guard lock(mutex_);
    require_running_locked("resume");
    if (!paused_) return;
    check_runc(run_runc(shared_->options, paths_.runc_root, {"resume", spec_.id}),
               "resume " + spec_.id);
    paused_ = false;
}

void ContainerSandbox::do_kill(const KillOptions& options) {
    std::lock_guard lock(mutex_);
    if (torn_down_) return;
    const auto& runtime_options = shared_->options;
    const bool monitor_running = runc_.pid() > 0 && runc_.running();
    if (monitor_running || entry_alive_locked()) {
        if (!exit_ && entry_alive_locked()) kill_requested_ = true;
        // A frozen task never handles SIGKILL (cgroup v1): thaw first.
        if (paused_) {
            if (auto freezer = controller_dir("freezer", cgroup_path()))
                std::ofstream(*freezer / "freezer.state") << "THAWED";
            paused_ = false;
        }
        // Killing PID 1 of the sandbox's PID namespace ends every process in it; runc, its
        // parent, then reaps it, removes the cgroup and its state, and exits.
        // Without a monitor (it died), init's new parent reaps it and teardown's `runc delete`
        // removes what runc would have.
        if (entry_pidfd_)
            pidfd_signal(entry_pidfd_.get(), SIGKILL);
        else
            (void)run_runc(runtime_options, paths_.runc_root, {"kill", spec_.id, "KILL"});
        if (monitor_running) {
            if (!runc_.wait(runtime_options.stop_timeout)) {
                runc_.signal(SIGKILL);
                runc_.wait();
            }
        } else if (entry_pidfd_) {
            pidfd_wait_exit(entry_pidfd_.get(), runtime_options.stop_timeout);
        }
    }
    // An adopted sandbox's monitor reaps the entry and cleans up after it, as it would have for
    // the server that started it: let it finish before teardown does the same.
    if (orphan_monitor_pidfd_ &&
        !pidfd_wait_exit(orphan_monitor_pidfd_.get(), runtime_options.stop_timeout))
        pidfd_signal(orphan_monitor_pidfd_.get(), SIGKILL);
    orphan_monitor_pidfd_.reset();
    finish_kill_locked([&] {
        entry_pidfd_.reset();
        teardown(runtime_options, spec_.state_root, spec_.id, options.keep_state);
    });
    shared_->live.erase(spec_.state_root, spec_.id);
}

UniqueFd ContainerSandbox::adopted_network_namespace() {
    std::lock_guard lock(mutex_);
    const std::string path = "/proc/" + std::to_string(entry_pid_) + "/ns/net";
    UniqueFd netns(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!netns)
        throw RuntimeError("cannot open the network namespace of sandbox " + spec_.id + " (" +
                           path + "): " + std::strerror(errno));
    return netns;
}

bool ContainerSandbox::release() {
    std::lock_guard lock(mutex_);
    if (torn_down_ || !alive_locked()) return false;
    // runc's monitor and the entry run on; the next server finds them by the pid file and
    // the process table (ContainerRuntime::adopt).
    runc_.release();
    orphan_monitor_pidfd_.reset();
    entry_pidfd_.reset();
    torn_down_ = true;
    shared_->live.erase(spec_.state_root, spec_.id);
    return true;
}

}  // namespace deskbox::runtime
