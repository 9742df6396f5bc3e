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
#include "server/runtime/container/cgroups.hpp"
#include "server/runtime/container/mounts.hpp"
#include "server/runtime/container/oci_bundle.hpp"
#include "server/runtime/container/runc.hpp"
#include "server/runtime/container/runtime_state.hpp"
#include "server/runtime/container/teardown.hpp"
#include "server/runtime/container/user_namespace.hpp"
#include "server/runtime/content_hash.hpp"
#include "server/runtime/exit_classification.hpp"
#include "server/runtime/runtime_util.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;
using nlohmann::json;

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
    Fnv64 hash;
    const std::string path = canonical.string();
    hash.add(path.data(), path.size());
    return "deskbox-" + hash.hex();
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

std::string ContainerRuntime::copy_spec_problem(const SandboxSpec& spec, const fs::path& dir) {
    (void)spec;  // files fit any container of the same template
    std::error_code ec;
    if (!fs::is_directory(dir / "files", ec))
        return "'" + dir.string() + "' holds no saved files of a container";
    return {};
}

std::unique_ptr<SandboxInstance> ContainerRuntime::start_from_copy(const SandboxSpec& spec,
                                                                   const fs::path& dir) {
    if (auto problem = copy_spec_problem(spec, dir); !problem.empty())
        throw SpecError("seed_files", problem);
    SandboxSpec seeded = spec;
    seeded.seed_files = dir / "files";
    return start_container(seeded);
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
    make_new_sandbox_dir(spec.state_root, spec.id);
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
            if (metadata.is_object() &&
                metadata.value("runtime", kContainerRuntimeName) != kContainerRuntimeName)
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
