#include "server/runtime/container_runtime.hpp"

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
#include "server/runtime/cgroups.hpp"
#include "server/runtime/exit_classification.hpp"
#include "server/runtime/mounts.hpp"
#include "server/runtime/oci_bundle.hpp"
#include "server/runtime/runtime_util.hpp"
#include "server/runtime/user_namespace.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;
using nlohmann::json;

struct ContainerSandbox::Shared {
    ContainerRuntimeOptions options;
    LiveSandboxes live;
};

namespace {

constexpr const char* kRuntimeName = "container";

std::vector<std::string> runc_argv(const ContainerRuntimeOptions& options,
                                   const fs::path& runc_root,
                                   std::initializer_list<std::string> args) {
    std::vector<std::string> argv = {options.runc, "--root", runc_root.string()};
    argv.insert(argv.end(), args);
    return argv;
}

RunResult run_runc(const ContainerRuntimeOptions& options, const fs::path& runc_root,
                   std::initializer_list<std::string> args) {
    auto argv = runc_argv(options, runc_root, args);
    try {
        return run_process(argv, options.stop_timeout);
    } catch (const std::system_error& e) {
        throw RuntimeError("cannot run " + options.runc + ": " + e.what());
    }
}

void check_runc(const RunResult& result, const std::string& what) {
    if (result.timed_out) throw RuntimeError("runc " + what + " timed out");
    if (result.status.exit_code != 0 || result.status.signal != 0)
        throw RuntimeError("runc " + what + " failed (exit " +
                           std::to_string(result.status.exit_code) + "): " + trim(result.err));
}

bool runc_has_container(const fs::path& runc_root, const std::string& id) {
    std::error_code ec;
    return fs::exists(runc_root / id, ec);
}

// Error messages from runc's JSON log (--log-format json): one object per line.
std::string runc_log_errors(const fs::path& runc_log) {
    std::ifstream in(runc_log);
    std::string line, errors;
    while (std::getline(in, line)) {
        auto entry = json::parse(line, nullptr, false);
        if (!entry.is_object() || entry.value("level", "") != "error") continue;
        if (!errors.empty()) errors += "; ";
        errors += entry.value("msg", line);
    }
    return errors;
}

std::vector<std::string> residue_of(const ContainerRuntimeOptions& options,
                                    const fs::path& state_root, const std::string& id,
                                    bool dir_counts) {
    ContainerPaths paths(state_root, id);
    std::vector<std::string> left;
    if (runc_has_container(paths.runc_root, id)) left.push_back("runc container " + id);
    std::error_code ec;
    if (fs::exists(paths.dir, ec))
        for (const auto& mount : mounts_under(paths.dir)) left.push_back("mount " + mount.string());
    std::string cgroup = "/" + options.cgroup_parent + "/" + id;
    for (const auto& dir : existing_cgroup_dirs(cgroup)) left.push_back("cgroup " + dir.string());
    if (dir_counts && fs::exists(paths.dir, ec)) left.push_back("directory " + paths.dir.string());
    return left;
}

// Removes everything sandbox `id` may hold, in the order that lets each step succeed:
// processes (runc, then the cgroup itself), mounts, then files. Used by kill and by
// leftover cleanup alike, so a crashed server's sandbox ends up exactly like a killed one.
void teardown(const ContainerRuntimeOptions& options, const fs::path& state_root,
              const std::string& id, bool keep_state) {
    ContainerPaths paths(state_root, id);
    std::string problems;
    auto attempt = [&](auto&& step) {
        try {
            step();
        } catch (const std::exception& e) {
            problems += std::string(problems.empty() ? "" : "; ") + e.what();
        }
    };
    attempt([&] {
        if (!runc_has_container(paths.runc_root, id)) return;
        auto result = run_runc(options, paths.runc_root, {"delete", "--force", id});
        if (result.status.exit_code != 0 && runc_has_container(paths.runc_root, id))
            check_runc(result, "delete --force " + id);
    });
    attempt([&] { remove_cgroup("/" + options.cgroup_parent + "/" + id); });
    attempt([&] {
        std::error_code ec;
        if (!fs::exists(paths.dir, ec)) return;
        for (const auto& mount : mounts_under(paths.dir)) unmount_all(mount);
    });
    if (!keep_state) {
        attempt([&] {
            std::error_code ec;
            fs::remove_all(paths.dir, ec);
            if (ec) throw RuntimeError("remove " + paths.dir.string() + ": " + ec.message());
        });
    }
    auto left = residue_of(options, state_root, id, !keep_state);
    if (!left.empty()) {
        std::string list;
        for (const auto& item : left) list += (list.empty() ? "" : ", ") + item;
        throw RuntimeError("sandbox " + id + " not fully removed: " + list +
                           (problems.empty() ? "" : " (" + problems + ")"));
    }
}

}  // namespace

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

// ---------------------------------------------------------------- ContainerSandbox

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
    const auto& options = shared_->options;
    {
        json metadata = {{"runtime", kRuntimeName},
                         {"id", spec_.id},
                         {"cgroup", cgroup_path()},
                         {"template_rootfs", spec_.template_rootfs.string()},
                         {"created_unix", static_cast<std::int64_t>(std::time(nullptr))}};
        std::ofstream out(paths_.metadata);
        out << metadata.dump(2) << '\n';
        if (!out) throw RuntimeError("cannot write " + paths_.metadata.string());
    }
    make_dir(paths_.disk, 0755);
    if (spec_.limits.disk_mb > 0)
        mount_capped_disk(paths_.disk_image, paths_.disk, spec_.limits.disk_mb, options.mkfs_ext4);
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
    }
    mount_overlay(lower, paths_.upper, paths_.work, paths_.rootfs);

    BundleLayout layout{paths_.rootfs, paths_.run_dir, cgroup_path(), {}, {}};
    if (!spec_.attachment.resolv_conf.empty()) {
        // The server's DNS for this sandbox, and the sandbox's own name without asking it.
        layout.resolv_conf = paths_.dir / "resolv.conf";
        layout.hosts = paths_.dir / "hosts";
        const std::string name = spec_.hostname.empty() ? "deskbox" : spec_.hostname;
        write_file_atomic(layout.resolv_conf, spec_.attachment.resolv_conf, 0644);
        write_file_atomic(layout.hosts,
                          "127.0.0.1\tlocalhost\n127.0.1.1\t" + name +
                              "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
                          0644);
    }
    write_oci_config(make_oci_config(spec_, layout), paths_.bundle);

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

ResourceUsage ContainerSandbox::usage() {
    ResourceUsage u;
    auto number = [](const std::optional<fs::path>& dir,
                     const char* file) -> std::optional<std::uint64_t> {
        if (!dir) return std::nullopt;
        auto line = read_first_line(*dir / file);
        auto value = line ? parse_integer(*line) : std::nullopt;  // missing, or "max"
        if (!value || *value < 0) return std::nullopt;
        return static_cast<std::uint64_t>(*value);
    };
    if (spec_.limits.disk_mb > 0)
        if (auto disk = disk_usage(paths_.disk)) {
            u.disk_bytes = disk->used_bytes;
            u.disk_max_bytes = disk->size_bytes;
        }
    auto pids = controller_dir("pids", cgroup_path());
    u.pids = number(pids, "pids.current");
    u.pids_max = number(pids, "pids.max");
    auto memory = controller_dir("memory", cgroup_path());
    // "oom_kill N": memory.events (v2) and memory.oom_control (v1, kernel 4.13+) alike.
    auto oom_kills = [&](const char* file) -> std::optional<std::uint64_t> {
        std::ifstream in(*memory / file);
        std::string key;
        std::uint64_t value = 0;
        while (in >> key >> value)
            if (key == "oom_kill") return value;
        return std::nullopt;
    };
    if (memory && fs::exists(*memory / "memory.current")) {  // v2
        u.memory_bytes = number(memory, "memory.current");
        u.memory_max_bytes = number(memory, "memory.max");
        u.oom_kills = oom_kills("memory.events");
    } else if (memory) {  // v1
        u.memory_bytes = number(memory, "memory.usage_in_bytes");
        u.memory_max_bytes = number(memory, "memory.limit_in_bytes");
        u.oom_kills = oom_kills("memory.oom_control");
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

pid_t find_runc_monitor(const fs::path& runc_root, const std::string& id) {
    std::error_code ec;
    for (auto it = fs::directory_iterator("/proc", ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
        const auto pid = parse_integer(it->path().filename().string());
        if (!pid || *pid <= 0) continue;
        std::ifstream in(it->path() / "cmdline", std::ios::binary);
        std::vector<std::string> argv;
        for (std::string arg; std::getline(in, arg, '\0');) argv.push_back(arg);
        if (argv.size() < 4 || fs::path(argv[0]).filename() != "runc" || argv.back() != id)
            continue;
        const auto root = std::find(argv.begin(), argv.end(), "--root");
        if (root == argv.end() || root + 1 == argv.end() || fs::path(root[1]) != runc_root)
            continue;
        if (std::find(argv.begin(), argv.end(), "run") != argv.end()) return pid_t(*pid);
    }
    return -1;
}

// ---------------------------------------------------------------- ContainerRuntime

ContainerRuntime::ContainerRuntime(ContainerRuntimeOptions options)
    : shared_(std::make_shared<ContainerSandbox::Shared>()) {
    if (options.runc.empty()) throw SpecError("runc", "must name the runc program");
    try {
        validate_id(options.cgroup_parent);  // one path component, same character rules
    } catch (const SpecError& e) {
        throw SpecError("cgroup_parent", std::string(e.what()).substr(e.field().size() + 2));
    }
    shared_->options = std::move(options);
}

ContainerRuntime::~ContainerRuntime() {
    // Sandboxes outliving the runtime keep their cgroups, so rmdir fails on a busy parent
    // and that is fine; an empty parent would otherwise stay behind per state root.
    for (const auto& dir : existing_cgroup_dirs("/" + shared_->options.cgroup_parent))
        ::rmdir(dir.c_str());
}

std::string ContainerRuntime::cgroup_parent_for(const fs::path& state_root) {
    std::error_code ec;
    auto canonical = fs::weakly_canonical(state_root, ec);
    if (ec) canonical = fs::absolute(state_root, ec);
    if (canonical == "/var/lib/deskbox") return "deskbox";
    // FNV-1a: stable across runs and builds, unlike std::hash.
    std::uint64_t hash = 14695981039346656037ull;
    for (unsigned char c : canonical.string()) hash = (hash ^ c) * 1099511628211ull;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
    return std::string("deskbox-") + hex;
}

const ContainerRuntimeOptions& ContainerRuntime::options() const {
    return shared_->options;
}

std::string ContainerRuntime::cgroup_path(const std::string& id) const {
    return "/" + shared_->options.cgroup_parent + "/" + id;
}

std::unique_ptr<SandboxInstance> ContainerRuntime::start(const SandboxSpec& spec) {
    return start_container(spec);
}

std::unique_ptr<ContainerSandbox> ContainerRuntime::start_container(const SandboxSpec& spec) {
    validate_spec(spec);
    if (spec.network && spec.attachment.netns_path.empty())
        throw SpecError("network",
                        "a container with a network joins the namespace the server made for it "
                        "(attachment.netns_path is empty)");
    std::error_code ec;
    if (!fs::is_directory(spec.template_rootfs, ec))
        throw SpecError("template_rootfs", "'" + spec.template_rootfs.string() +
                                               "' is not a directory (template not built?)");
    if (!fs::exists(spec.template_rootfs / "bin", ec) &&
        !fs::exists(spec.template_rootfs / "usr", ec))
        throw SpecError("template_rootfs", "'" + spec.template_rootfs.string() +
                                               "' has no bin/ or usr/: not a root filesystem");
    if (auto problem = overlay_path_problem(spec.template_rootfs); !problem.empty())
        throw SpecError("template_rootfs", problem);
    if (auto problem = overlay_path_problem(spec.state_root); !problem.empty())
        throw SpecError("state_root", problem);
    if (!spec.agent_dir.empty() && !fs::is_directory(spec.agent_dir, ec))
        throw SpecError("agent_dir", "'" + spec.agent_dir.string() + "' is not a directory");
    if (!spec.agent_dir.empty() && !spec.agent_dir.is_absolute())
        throw SpecError("agent_dir", "must be an absolute path");
    if (!spec.template_rootfs.is_absolute())
        throw SpecError("template_rootfs", "must be an absolute path");

    if (shared_->live.contains(spec.state_root, spec.id))
        throw SpecError("id", "sandbox '" + spec.id + "' already runs in this state root");
    fs::create_directories(spec.state_root / "sandboxes", ec);
    if (ec)
        throw RuntimeError("cannot create " + (spec.state_root / "sandboxes").string() + ": " +
                           ec.message());
    ContainerPaths paths(spec.state_root, spec.id);
    if (::mkdir(paths.dir.c_str(), 0700) != 0) {
        if (errno == EEXIST)
            throw RuntimeError("sandbox directory " + paths.dir.string() +
                               " already exists (a leftover? see list_leftovers)");
        throw RuntimeError("mkdir " + paths.dir.string() + ": " + std::strerror(errno));
    }
    // From here on the sandbox object owns the directory: its destructor removes it and
    // whatever launch() managed to create when launch() throws.
    auto sandbox = std::make_unique<ContainerSandbox>(ContainerSandbox::Key(), shared_, spec);
    shared_->live.insert(spec.state_root, spec.id);
    sandbox->launch();
    return sandbox;
}

std::unique_ptr<ContainerSandbox> ContainerRuntime::adopt(const SandboxSpec& spec) {
    validate_id(spec.id);
    if (shared_->live.contains(spec.state_root, spec.id))
        throw RuntimeError("sandbox " + spec.id + " is already live in this server");
    auto sandbox = std::make_unique<ContainerSandbox>(ContainerSandbox::Key(), shared_, spec);
    // Until it is adopted for real, the destructor must not tear down what we only looked at.
    sandbox->torn_down_ = true;
    const ContainerPaths& paths = sandbox->paths_;
    auto result = run_runc(shared_->options, paths.runc_root, {"state", spec.id});
    check_runc(result, "state " + spec.id);
    const auto state = json::parse(result.out, nullptr, false);
    const std::string status = state.is_object() ? state.value("status", "") : "";
    if (status != "running" && status != "paused")
        throw RuntimeError("runc says sandbox " + spec.id + " is " +
                           (status.empty() ? "unknown" : status));
    const pid_t pid = state.value("pid", -1);
    UniqueFd pidfd(pid > 0 ? pidfd_open(pid) : -1);
    if (!pidfd) throw RuntimeError("the entry of sandbox " + spec.id + " is gone");
    // The pid must still be that sandbox's init (not a reused pid): it sits in its cgroup.
    const std::string cgroup = "/" + shared_->options.cgroup_parent + "/" + spec.id;
    std::ifstream cgroup_file("/proc/" + std::to_string(pid) + "/cgroup");
    const std::string memberships((std::istreambuf_iterator<char>(cgroup_file)), {});
    if (memberships.find(":" + cgroup + "\n") == std::string::npos)
        throw RuntimeError("pid " + std::to_string(pid) + " is not in sandbox " + spec.id +
                           "'s cgroup " + cgroup);
    if (pidfd_exited(pidfd.get())) throw RuntimeError("the entry of sandbox " + spec.id + " ended");
    if (pid_t monitor = find_runc_monitor(paths.runc_root, spec.id); monitor > 0)
        sandbox->orphan_monitor_pidfd_.reset(pidfd_open(monitor));
    sandbox->entry_pid_ = pid;
    sandbox->entry_pidfd_ = std::move(pidfd);
    sandbox->paused_ = status == "paused";
    if (!shared_->live.insert(spec.state_root, spec.id))
        throw RuntimeError("sandbox " + spec.id + " is already live in this server");
    sandbox->torn_down_ = false;
    return sandbox;
}

std::string ContainerRuntime::agent_channel_arg() const {
    return std::string("unix-listen:") + kGuestRunDir + "/" + kAgentSocketName;
}

std::unique_ptr<SandboxInstance> ContainerRuntime::adopt_left_running(
    const fs::path& state_root, const std::string& id, const ResourceLimits& limits) {
    SandboxSpec spec;
    spec.id = id;
    spec.state_root = state_root;
    spec.limits = limits;
    return adopt(spec);
}

std::vector<std::string> ContainerRuntime::list_leftovers(const fs::path& state_root) {
    const auto& options = shared_->options;
    std::set<std::string> ids;
    std::error_code ec;
    fs::path sandboxes = state_root / "sandboxes";
    for (const auto& entry : fs::directory_iterator(sandboxes, ec)) {
        if (!entry.is_directory(ec)) continue;
        // Another runtime's sandbox says so in its sandbox.json; a dir without one is a
        // start that crashed early, ours to clean as much as anyone's.
        std::ifstream in(entry.path() / "sandbox.json");
        if (in) {
            auto metadata = json::parse(in, nullptr, false);
            if (metadata.is_object() && metadata.value("runtime", kRuntimeName) != kRuntimeName)
                continue;
        }
        ids.insert(entry.path().filename().string());
    }
    fs::path runc_root = state_root / "runc";
    if (fs::is_directory(runc_root, ec)) {
        auto result = run_runc(options, runc_root, {"list", "--format", "json"});
        check_runc(result, "list");
        auto list = json::parse(result.out, nullptr, false);
        if (list.is_array())
            for (const auto& container : list)
                if (container.is_object() && container.contains("id"))
                    ids.insert(container["id"].get<std::string>());
    }
    auto canonical_sandboxes = fs::weakly_canonical(sandboxes, ec);
    if (ec) canonical_sandboxes = sandboxes;
    for (const auto& mount : mounts_under(canonical_sandboxes)) {
        auto relative = mount.lexically_relative(canonical_sandboxes);
        if (!relative.empty() && *relative.begin() != "..") ids.insert(relative.begin()->string());
    }
    for (const auto& name : child_cgroups("/" + options.cgroup_parent)) ids.insert(name);

    std::vector<std::string> leftovers;
    for (const auto& id : ids) {
        bool valid = true;
        try {
            validate_id(id);
        } catch (const SpecError&) {
            valid = false;
        }
        if (valid && !shared_->live.contains(state_root, id)) leftovers.push_back(id);
    }
    return leftovers;
}

void ContainerRuntime::cleanup_leftover(const fs::path& state_root, const std::string& id) {
    validate_id(id);
    if (shared_->live.contains(state_root, id))
        throw RuntimeError("sandbox " + id + " is live in this server; kill it instead");
    teardown(shared_->options, state_root, id, /*keep_state=*/false);
}

std::vector<std::string> ContainerRuntime::residue(const fs::path& state_root,
                                                   const std::string& id) const {
    return residue_of(shared_->options, state_root, id, true);
}

}  // namespace deskbox::runtime
