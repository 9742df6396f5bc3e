// The `microvm` runtime: each sandbox is a QEMU process running the `microvm` machine with
// its own kernel, memory and disk.
//
// Boot files come from images/build_microvm.py, next to the template's rootfs:
//   <template>/microvm/{vmlinuz, initramfs.img, rootfs.ext4, build.json}
// (<template> is spec.template_rootfs's parent). rootfs.ext4 is never written: QEMU opens it
// only as the backing file of the sandbox's own qcow2 layer.
//
// Per sandbox, under <state_root>/sandboxes/<id>/:
//   sandbox.json   who owns this dir (runtime "microvm", id, image dir) — lets a restarted
//                  server recognise leftovers (the container runtime skips it)
//   disk.qcow2     copy-on-write layer over rootfs.ext4: every guest write lands here
//   config.img     the guest's config (hostname, machine-id, uid, env, entry) as shell
//                  assignments on a small read-only disk the initramfs sources
//   agent.sock     host side of the virtio-serial port "deskbox.agent" (QEMU listens)
//   qmp.sock       QMP control socket (QEMU listens)
//   console.log    the serial console (kernel, init, and the entry's stdout/stderr)
//   qemu.log       QEMU's own stdout/stderr
//   qemu.pid       QEMU's pid, for leftover cleanup after a server crash
//   memory         a snapshot's RAM and device state (only while the sandbox is snapshotted)
// The agent comes from spec.agent_dir as a read-only ext4 image shared by all sandboxes of
// a state root: <state_root>/microvm/agent-<content hash>.img, made when its content changes.
//
// Guest disks are told apart by their virtio serial numbers (deskbox-root, deskbox-agent,
// deskbox-config), not by order. Inside, /opt/deskbox is the agent disk, /dev/virtio-ports/
// deskbox.agent the channel (kAgentChannelArg is the agent's --channel for it).
//
// Template snapshots (fast start), per state root:
//   <state_root>/microvm/templates/<key>/{memory, disk.qcow2, agent.img, snapshot.json}
// A throwaway VM of the template is booted once, the caller's `ready` check runs (the desktop
// is up, the host's agent connection closed again), and it is saved like a sandbox snapshot.
// Creates then restore from it instead of booting: their own disk.qcow2 is a qcow2 layer over
// the template's (which is never written again), their QEMU loads the shared memory file
// read-only. The key hashes everything the restored VM's command line and guest state depend
// on (image files, QEMU binary, accelerator, memory, vCPUs, network, entry, environment,
// agent image); the sandbox id and hostname are not in it: the guest gets those afterwards
// from the host (the agent's system.identity), with the clock and fresh randomness.
//
// Snapshots: after QMP `stop`, `getfd` hands QEMU an fd of <dir>/memory.tmp over the QMP
// socket (SCM_RIGHTS) and `migrate fd:NAME` writes RAM and device state into it (exec: would
// be refused by -sandbox spawn=deny); once `query-migrate` says completed, QEMU quits (which
// flushes disk.qcow2) and memory.tmp becomes memory. A restore runs the same command line
// (build_qemu_command, with new socket fds) plus `-incoming defer`, passes the memory file
// as an inherited fd, runs `migrate-incoming fd:N`, then `cont`. The memory file is removed
// once the restored VM runs: disk.qcow2 moves on, and restoring it again would not match.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/child_process.hpp"
#include "server/runtime/process_sandbox.hpp"
#include "server/runtime/qemu_process.hpp"
#include "server/runtime/qmp_client.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

// The agent's --channel inside a microVM (the virtio-serial port, named by the init).
inline constexpr const char* kAgentChannelArg = "device:/dev/virtio-ports/deskbox.agent";
// What the error for a missing image tells the operator to run (TEMPLATE replaced).
inline constexpr const char* kMicrovmBuildCommand = "sudo images/build_microvm.py TEMPLATE";

enum class Accelerator { auto_select, kvm, tcg };
const char* to_string(Accelerator accel);
// "auto", "kvm", "tcg"; throws SpecError("accelerator", ...) for anything else.
Accelerator parse_accelerator(const std::string& text);

struct MicrovmRuntimeOptions {
    std::string qemu = "qemu-system-x86_64";
    std::string qemu_img = "qemu-img";
    std::string mkfs_ext4 = "mkfs.ext4";
    // auto: KVM only if a timed probe shows it beating TCG (a /dev/kvm that exists can still
    // be ~2000x slower than native under nested virtualisation); never waits long.
    Accelerator accelerator = Accelerator::auto_select;
    // Where vmlinuz, initramfs.img and rootfs.ext4 are; empty: <template_rootfs>/../microvm.
    std::filesystem::path image_dir;
    // QEMU started and answering QMP. The guest's boot is bounded by connect_agent's timeout.
    std::chrono::milliseconds start_timeout{30000};
    std::chrono::milliseconds stop_timeout{10000};
    // Bounds a snapshot's save and a restore's load (a 1 GiB guest is mostly zero pages).
    std::chrono::milliseconds snapshot_timeout{120000};
    // Appended to the kernel command line (debugging: "deskbox.debug=1"; tests).
    std::string extra_kernel_args;
};

// The files of one sandbox (see the layout above).
struct MicrovmPaths {
    explicit MicrovmPaths(const std::filesystem::path& state_root, const std::string& id);
    std::filesystem::path dir, metadata, disk, config, agent_socket, qmp_socket, console_log,
        qemu_log, pid_file, memory;
};

// The boot files of one template.
struct MicrovmImage {
    std::filesystem::path dir, kernel, initramfs, rootfs;
};

// What the accelerator probe measured (zero durations: not run).
struct AcceleratorChoice {
    Accelerator accelerator = Accelerator::tcg;
    std::chrono::milliseconds tcg_probe{0}, kvm_probe{0};
    std::string reason;  // one line: why this one
};

class MicrovmRuntime;

class MicrovmSandbox : public ProcessSandbox, public Snapshots {
  public:
    ~MicrovmSandbox() override;

    const std::string& id() const override { return spec_.id; }
    std::filesystem::path agent_socket_path() const override { return paths_.agent_socket; }
    // Connects to the agent.sock (QEMU's side of the port) and returns once the agent has
    // spoken (its hello is waiting to be read), so a returned fd is a live agent. Fails with
    // the console's last lines if the VM stops or the timeout passes first. One host
    // connection at a time: a reconnect waits until the previous one is closed.
    UniqueFd connect_agent(std::chrono::milliseconds timeout) override;
    void pause() override;   // QMP stop: vCPUs halt, memory stays
    void resume() override;  // QMP cont

    // Saves the whole VM (RAM, devices; the disk layer is flushed) to <dir>/memory and ends
    // the QEMU process. Afterwards the sandbox is `paused` with no process: alive() is
    // false, exit_info() empty, and only restore_from_snapshot() or kill() are valid.
    // The host's agent connection ends with QEMU. Throws RuntimeError with QEMU's message
    // (the VM then keeps running, paused if it was). Returns the memory file's size.
    std::uint64_t snapshot() override;
    // Starts QEMU again from <dir>/memory and returns once the VM runs; connect_agent then
    // reconnects to the agent inside. A missing or corrupted memory file gives a
    // RuntimeError naming it (with QEMU's words) and leaves no QEMU: the sandbox stays
    // snapshotted.
    void restore_from_snapshot() override;
    bool snapshotted() override;
    // An adopted snapshot's network (the attachment does not survive a server restart).
    void set_network_attachment(NetworkAttachment attachment) override;
    // Lets go of a snapshotted sandbox without tearing it down (the server stops; the next
    // one adopts it). False, and nothing changes, if it is not snapshotted.
    bool release_snapshot() override;
    // Lets go of a running (or paused) sandbox without stopping it: QEMU runs on for the next
    // server's adopt_running. False, and nothing changes, if it is not running.
    bool release() override;
    // The network namespace of QEMU's tap device: the router an earlier server built, which
    // an adopted sandbox's network takes over. Empty without a network. Throws RuntimeError.
    UniqueFd adopted_network_namespace() override;
    // Bytes of the memory file while snapshotted, else 0.
    std::uint64_t snapshot_bytes() override;
    Snapshots* snapshots() override { return this; }
    bool shares_host_clock() const override { return false; }  // a guest kernel keeps its own

    const MicrovmPaths& paths() const { return paths_; }
    const MicrovmImage& image() const { return image_; }
    pid_t qemu_pid() const { return qemu_.pid(); }
    Accelerator accelerator() const { return accelerator_; }
    const std::vector<std::string>& qemu_command() const { return command_; }
    // Runs a QMP command (for tools and tests: query-status, ...). Throws like QmpClient.
    nlohmann::json qmp(const std::string& command,
                       const nlohmann::json& arguments = nlohmann::json::object());

    class Key {
        friend class MicrovmRuntime;
        Key() = default;
    };
    struct Shared;
    MicrovmSandbox(Key, std::shared_ptr<Shared> shared, const SandboxSpec& spec, MicrovmImage image,
                   Accelerator accelerator);

  protected:
    void do_kill(const KillOptions& options) override;
    bool process_running_locked() override { return qemu_.running(); }
    ExitInfo describe_exit_locked() override;  // from the console, QEMU's status and log
    bool saved_locked() const override { return snapshotted_; }

  private:
    friend class MicrovmRuntime;
    void launch();  // files, sockets, QEMU, QMP; throws
    std::string vcpu_whereabouts_locked();
    // Sockets, command line, QEMU, QMP (launch and restore); `incoming_fd` >= 0: restore.
    void spawn_qemu_locked(int incoming_fd);
    // Starts QEMU on `memory` and runs the VM; `consume`: the file is this sandbox's own and
    // goes once loaded (a template's is shared and stays). Throws RuntimeError, no QEMU left.
    void restore_locked(const std::filesystem::path& memory, bool consume);
    void launch_from_template(const std::filesystem::path& template_dir);
    void write_metadata_locked(const nlohmann::json& extra);
    bool agent_port_connected_locked();  // QEMU has a host connection on agent.sock
    std::string console_lines(std::size_t lines);
    std::string failure_detail();  // console tail (+ QEMU's stderr if it said anything)

    std::shared_ptr<Shared> shared_;
    SandboxSpec spec_;
    MicrovmPaths paths_;
    MicrovmImage image_;
    Accelerator accelerator_;
    std::vector<std::string> command_;
    QemuProcess qemu_;
    QmpClient qmp_;
    bool snapshotted_ = false;  // saved to paths_.memory, no QEMU process
    std::optional<std::filesystem::path> agent_image_;
    std::optional<std::filesystem::path> template_dir_;  // restored from this template snapshot
    std::uint64_t tsc_khz_ = 0;
    bool agent_connected_before_ = false;  // a later connect_agent is a reconnect
};

class MicrovmRuntime : public Runtime,
                       public RunningAdoption,
                       public SnapshotAdoption,
                       public TemplateSnapshots {
  public:
    explicit MicrovmRuntime(MicrovmRuntimeOptions options = {});
    ~MicrovmRuntime() override;

    const char* name() const override { return "microvm"; }
    std::unique_ptr<SandboxInstance> start(const SandboxSpec& spec) override;
    std::unique_ptr<MicrovmSandbox> start_microvm(const SandboxSpec& spec);
    std::vector<std::string> list_leftovers(const std::filesystem::path& state_root) override;
    void cleanup_leftover(const std::filesystem::path& state_root, const std::string& id) override;
    NetworkAttach network_attach() const override { return NetworkAttach::tap; }
    std::string agent_channel_arg() const override { return kAgentChannelArg; }
    // RuntimeError naming the build command if the template's microVM image is missing.
    void check_template(const std::filesystem::path& template_rootfs) override {
        image_for(template_rootfs);
    }
    // A microVM boots a kernel and the desktop, under emulation where KVM is not usable:
    // at least 180 s.
    std::chrono::milliseconds boot_timeout(std::chrono::milliseconds configured) const override;
    RunningAdoption* running_adoption() override { return this; }
    SnapshotAdoption* snapshot_adoption() override { return this; }
    TemplateSnapshots* template_snapshots() override { return this; }

    // What of sandbox `id` still exists: a QEMU process, its directory. Empty: nothing.
    std::vector<std::string> residue(const std::filesystem::path& state_root,
                                     const std::string& id) const;
    // The boot files for a template, checked: RuntimeError naming the build command if any
    // is missing.
    MicrovmImage image_for(const std::filesystem::path& template_rootfs) const;
    // Resolves `auto` (probing once per runtime; later calls return the cached answer).
    AcceleratorChoice accelerator();
    const MicrovmRuntimeOptions& options() const;

    // ---- snapshots that outlive this object (a server restart) ----
    // Sandboxes under `state_root` saved by snapshot() that no live instance owns.
    // list_leftovers leaves these out: they are kept until adopted and killed.
    std::vector<std::string> list_snapshotted(const std::filesystem::path& state_root) override;
    // Takes over such a sandbox: snapshotted, ready for restore_from_snapshot() or kill().
    // RuntimeError if its record or memory file is missing or unreadable.
    std::unique_ptr<MicrovmSandbox> adopt_snapshot(const std::filesystem::path& state_root,
                                                   const std::string& id);
    std::unique_ptr<SandboxInstance> adopt_saved(const std::filesystem::path& state_root,
                                                 const std::string& id) override {
        return adopt_snapshot(state_root, id);
    }
    // Sandboxes under `state_root` whose QEMU still runs with no live instance owning them:
    // an earlier server's, crashed or stopped with --on-exit keep.
    std::vector<std::string> list_running(const std::filesystem::path& state_root);
    // Takes over such a sandbox: QMP reconnected, running or paused as QEMU says; its agent
    // is reached with connect_agent. RuntimeError if it cannot be driven, and then its QEMU
    // is killed and its files removed.
    std::unique_ptr<MicrovmSandbox> adopt_running(const std::filesystem::path& state_root,
                                                  const std::string& id);
    std::vector<std::string> adoption_candidates(const std::filesystem::path& state_root) override {
        return list_running(state_root);
    }
    // `limits` come from the VM's own record (sandbox.json).
    std::unique_ptr<SandboxInstance> adopt_left_running(const std::filesystem::path& state_root,
                                                        const std::string& id,
                                                        const ResourceLimits&) override {
        return adopt_running(state_root, id);
    }
    // The guest's agent learns of the old host's end over virtio-serial and waits for the
    // next; under TCG that takes seconds.
    std::chrono::milliseconds reconnect_timeout() const override {
        return std::chrono::milliseconds(30000);
    }

    // ---- template snapshots (see the layout above) ----
    // Where the template snapshot for `spec` lives (it may not exist yet). Throws like start.
    std::filesystem::path template_snapshot_dir(const SandboxSpec& spec);
    static bool template_snapshot_complete(const std::filesystem::path& dir);
    // Returns the template snapshot for `spec`, making it first if there is none: boots a
    // throwaway sandbox of the spec (id and hostname replaced), calls `ready` (which must
    // leave no agent connection open) and saves it. One maker per key at a time; the others
    // wait for it. Throws RuntimeError with the cause; nothing is left on failure.
    std::filesystem::path ensure_template_snapshot(
        const SandboxSpec& spec, const std::function<void(MicrovmSandbox&)>& ready);
    // A running sandbox restored from the template snapshot in `dir` (made for an equal
    // spec); connect_agent then reaches its agent. Throws SpecError / RuntimeError.
    std::unique_ptr<MicrovmSandbox> start_from_template(const SandboxSpec& spec,
                                                        const std::filesystem::path& dir);
    std::filesystem::path template_snapshot_for(const SandboxSpec& spec,
                                                const Ready& ready) override {
        return ensure_template_snapshot(spec, [&](MicrovmSandbox& vm) { ready(vm); });
    }
    std::unique_ptr<SandboxInstance> restore_template_snapshot(
        const SandboxSpec& spec, const std::filesystem::path& dir) override {
        return start_from_template(spec, dir);
    }
    bool has_template_snapshot(const std::filesystem::path& state_root,
                               const std::filesystem::path& template_rootfs) override;
    // Removes every template snapshot of `state_root`. Returns how many. (Making one already
    // removes those of the same template from an older image, QEMU or agent.)
    std::size_t remove_template_snapshots(const std::filesystem::path& state_root);

  private:
    // Sandbox dirs of this runtime no live instance owns: saved ones or the others.
    std::vector<std::string> unowned(const std::filesystem::path& state_root, bool saved);
    std::unique_ptr<MicrovmSandbox> adoptable(const std::filesystem::path& state_root,
                                              const std::string& id, bool saved,
                                              const std::string& what);
    // Checks `spec`, makes its directory and returns the (not yet started) sandbox.
    std::unique_ptr<MicrovmSandbox> prepare(const SandboxSpec& spec);
    std::string template_key(const SandboxSpec& spec, const MicrovmImage& image, Accelerator accel);
    // What outdates every snapshot of a template: its image files, QEMU, the agent image.
    std::string template_generation(const SandboxSpec& spec, const MicrovmImage& image);
    void prune_template_snapshots(const std::filesystem::path& made, const nlohmann::json& record);

    std::shared_ptr<MicrovmSandbox::Shared> shared_;
};

// Runs the timed probe: a tiny guest (a loop with some VM exits) under TCG, then under KVM
// with a deadline of TCG's own time plus a margin. KVM wins only if it finishes first.
AcceleratorChoice probe_accelerator(const std::string& qemu);

// The host's TSC frequency in kHz, measured (TCG guests read the host's TSC, and the kernel
// cannot calibrate it against the emulated PIT reliably). 0 if it cannot be measured.
std::uint64_t host_tsc_khz();

}  // namespace deskbox::runtime
