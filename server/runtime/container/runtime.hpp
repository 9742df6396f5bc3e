// The `container` runtime: each sandbox is a runc container.
//
// Per sandbox, under <state_root>/sandboxes/<id>/:
//   sandbox.json        who owns this dir (runtime, id, cgroup) — lets a restarted server
//                       recognise leftovers
//   disk.img, disk/     the writable layer: a sparse ext4 image of limits.disk_mb on a loop
//                       device, mounted at disk/ (a plain dir when disk_mb is 0)
//   disk/upper/ work/   overlayfs upper and work dirs (the sandbox's writes)
//   bundle/config.json  OCI config; bundle/rootfs is the overlay mount (template = lowerdir)
//   run/                bind-mounted at /run/deskbox; the agent listens on run/agent.sock
//   console.log         the container's stdout and stderr; runc.log: runc's own (JSON) log
//   container.pid       host pid of the entry (written by runc)
// runc keeps its state in <state_root>/runc; cgroups are /<cgroup_parent>/<id> in every
// hierarchy.
//
// runc runs in the foreground (`runc run`, not `run -d`), one process per sandbox: it is the
// subreaper and parent of the entry, so the entry's exit status reaches us and no zombie is
// left even where the host's PID 1 does not reap orphans. start() returns once runc wrote
// the pid file, which it does after the entry was exec'd.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/child_process.hpp"
#include "common/unique_fd.hpp"
#include "server/runtime/process_sandbox.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

struct ContainerRuntimeOptions {
    std::string runc = "runc";  // program name or path
    // Sandbox cgroups are /<cgroup_parent>/<id>. Use one parent per state root (see
    // cgroup_parent_for): leftover cleanup treats every cgroup under it as its own, so two
    // servers sharing a parent would kill each other's sandboxes.
    std::string cgroup_parent = "deskbox";
    std::chrono::milliseconds start_timeout{30000};
    std::chrono::milliseconds stop_timeout{10000};
    std::string mkfs_ext4 = "mkfs.ext4";  // formats each sandbox's capped writable layer
};

// The files of one sandbox (see the layout above).
struct ContainerPaths {
    explicit ContainerPaths(const std::filesystem::path& state_root, const std::string& id);
    std::filesystem::path runc_root, dir, metadata, disk_image, disk, upper, work, bundle, rootfs,
        run_dir, console_log, runc_log, pid_file,
        lower;  // the template idmapped into the sandbox's host id range (user namespaces)
};

class ContainerRuntime;

class ContainerSandbox : public ProcessSandbox, public CopySaving {
  public:
    ~ContainerSandbox() override;

    const std::string& id() const override { return spec_.id; }
    std::filesystem::path agent_socket_path() const override;
    UniqueFd connect_agent(std::chrono::milliseconds timeout) override;
    void pause() override;
    void resume() override;
    ResourceUsage usage() override;
    bool release() override;
    // The sandbox's own network namespace (its entry's).
    UniqueFd adopted_network_namespace() override;
    // The writable layer's files (owners as guest ids) in <dir>/files, copied while the
    // sandbox is frozen. Its processes are not saved: a start from the copy boots afresh.
    SavedCopy save_copy(const std::filesystem::path& dir) override;
    CopyKind copy_kind() const override { return CopyKind::filesystem; }
    CopySaving* copy_saving() override { return this; }
    StartPhases start_phases() const override { return phases_; }

    const ContainerPaths& paths() const { return paths_; }
    std::string cgroup_path() const;
    pid_t entry_pid() const { return entry_pid_; }  // host pid of the entry (PID 1 inside)
    pid_t runc_pid() const { return runc_.pid(); }  // the `runc run` monitoring it

    // Only ContainerRuntime can make one (it needs the shared live-sandbox registry).
    class Key {
        friend class ContainerRuntime;
        Key() = default;
    };
    struct Shared;
    ContainerSandbox(Key, std::shared_ptr<Shared> shared, const SandboxSpec& spec);

  protected:
    void do_kill(const KillOptions& options) override;
    bool process_running_locked() override { return entry_alive_locked(); }
    ExitInfo describe_exit_locked() override;

  private:
    friend class ContainerRuntime;
    void launch();  // mounts, writes the bundle, runs runc; throws
    // The steps of launch():
    void write_metadata();  // sandbox.json: this dir is a container sandbox's
    // The overlay at paths_.rootfs: the template (idmapped into the sandbox's id range with a
    // user namespace) under a writable layer, on a capped disk if limits.disk_mb says so.
    void mount_rootfs(PhaseClock& clock);
    // spec.egress_ca: the CA into the rootfs's trust stores, as `guest_root` (the host id of the
    // guest's root), before runc starts anything there.
    void install_egress_ca(std::uint32_t guest_root);
    // The volumes' host directories for the bundle: id-mapped copies under the sandbox dir
    // when it has a user namespace (teardown unmounts them with the rest).
    std::vector<std::filesystem::path> mount_volumes();
    void write_bundle();  // resolv.conf and hosts for the sandbox's DNS, config.json
    // `runc run`, until runc wrote the entry's pid file; the entry's pidfd.
    void run_until_entry_started();
    bool entry_alive_locked();
    std::string runc_errors() const;
    // Where usage() reads: the cgroup's directories, found once (reading mountinfo on every
    // sample cost O(mounts) per sandbox, and needs an fd deskboxd may not have).
    struct UsageDirs {
        std::optional<std::filesystem::path> pids, memory, cpuacct, cpu;
        bool memory_v2 = false;
    };
    std::optional<UsageDirs> usage_dirs();

    std::shared_ptr<Shared> shared_;
    SandboxSpec spec_;
    ContainerPaths paths_;
    ChildProcess runc_;              // none in an adopted sandbox
    UniqueFd orphan_monitor_pidfd_;  // an adopted sandbox's `runc run`, our predecessor's child
    UniqueFd entry_pidfd_;
    pid_t entry_pid_ = -1;
    std::mutex usage_dirs_mutex_;
    std::optional<UsageDirs> usage_dirs_;  // none until mountinfo could be read
    StartPhases phases_;                   // launch()'s steps
};

class ContainerRuntime : public Runtime, public RunningAdoption, public CopyStarts {
  public:
    explicit ContainerRuntime(ContainerRuntimeOptions options = {});
    // Removes the cgroup parent's directories if they are empty (never kills anything).
    ~ContainerRuntime() override;

    // "deskbox" for the default state root /var/lib/deskbox, else "deskbox-<hash of the
    // canonical path>": one parent per state root.
    static std::string cgroup_parent_for(const std::filesystem::path& state_root);

    const char* name() const override { return "container"; }
    std::unique_ptr<SandboxInstance> start(const SandboxSpec& spec) override;
    // Same as start(), typed, for callers (tests, tools) that need container details.
    std::unique_ptr<ContainerSandbox> start_container(const SandboxSpec& spec);
    // Takes over sandbox `spec.id` that a previous server left running under `spec.state_root`
    // (its entry alive in its own cgroup, runc saying running or paused); only id, state_root
    // and limits of `spec` are used. Throws RuntimeError if it is not in a state to adopt (then
    // it is a leftover to clean).
    std::unique_ptr<ContainerSandbox> adopt(const SandboxSpec& spec);
    std::vector<std::string> list_leftovers(const std::filesystem::path& state_root) override;
    void cleanup_leftover(const std::filesystem::path& state_root, const std::string& id) override;
    NetworkAttach network_attach() const override { return NetworkAttach::netns; }
    std::string agent_channel_arg() const override;
    bool needs_user_namespace() const override { return true; }
    VolumeAccess volume_access() const override { return VolumeAccess::host_directory; }
    RunningAdoption* running_adoption() override { return this; }
    CopyStarts* copy_starts() override { return this; }
    CopyKind copy_kind() const override { return CopyKind::filesystem; }
    // A start whose writable layer begins as the copy's files (SandboxSpec::seed_files).
    std::unique_ptr<SandboxInstance> start_from_copy(const SandboxSpec& spec,
                                                     const std::filesystem::path& dir) override;
    std::string copy_spec_problem(const SandboxSpec& spec,
                                  const std::filesystem::path& dir) override;
    // Every sandbox no live instance owns: adopt_left_running finds out which still run.
    std::vector<std::string> adoption_candidates(const std::filesystem::path& state_root) override {
        return list_leftovers(state_root);
    }
    std::unique_ptr<SandboxInstance> adopt_left_running(const std::filesystem::path& state_root,
                                                        const std::string& id,
                                                        const ResourceLimits& limits) override;
    // A running agent answers a new host at once.
    std::chrono::milliseconds reconnect_timeout() const override {
        return std::chrono::milliseconds(5000);
    }

    // What of sandbox `id` still exists: runc container, mounts, cgroup dirs, its directory.
    // Empty means nothing is left.
    std::vector<std::string> residue(const std::filesystem::path& state_root,
                                     const std::string& id) const;
    std::string cgroup_path(const std::string& id) const;
    const ContainerRuntimeOptions& options() const;

  private:
    std::shared_ptr<ContainerSandbox::Shared> shared_;
};

// The `runc run` process (argv "runc ... --root RUNC_ROOT ... run ... ID") monitoring sandbox
// `id`, whoever's child it is; -1 if there is none.
pid_t find_runc_monitor(const std::filesystem::path& runc_root, const std::string& id);

}  // namespace deskbox::runtime
