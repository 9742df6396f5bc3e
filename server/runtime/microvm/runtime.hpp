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
// except those of a template the server's store holds, which live with its image (removed
// with it): <image dir>/microvm/snapshots/<key>/ (derived_image.hpp).
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
// (qemu_command.hpp, with new socket fds) plus `-incoming defer`, passes the memory file
// as an inherited fd, runs `migrate-incoming fd:N`, then `cont`. The memory file is removed
// once the restored VM runs: disk.qcow2 moves on, and restoring it again would not match.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/runtime/microvm/accelerator.hpp"
#include "server/runtime/microvm/sandbox.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

// The agent's --channel inside a microVM (the virtio-serial port, named by the init).
inline constexpr const char* kAgentChannelArg = "device:/dev/virtio-ports/deskbox.agent";
// What the error for a missing image tells the operator to run (TEMPLATE replaced).
inline constexpr const char* kMicrovmBuildCommand = "sudo images/build_microvm.py TEMPLATE";
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
class MicrovmRuntime : public Runtime,
                       public RunningAdoption,
                       public SnapshotAdoption,
                       public TemplateSnapshots,
                       public CopyStarts {
  public:
    explicit MicrovmRuntime(MicrovmRuntimeOptions options = {});
    ~MicrovmRuntime() override;

    const char* name() const override { return "microvm"; }
    std::unique_ptr<SandboxInstance> start(const SandboxSpec& spec) override;
    std::unique_ptr<MicrovmSandbox> start_microvm(const SandboxSpec& spec);
    std::vector<std::string> list_leftovers(const std::filesystem::path& state_root) override;
    void cleanup_leftover(const std::filesystem::path& state_root, const std::string& id) override;
    NetworkAttach network_attach() const override { return NetworkAttach::tap; }
    // A VM's writable disk is its own qcow2 overlay, not a capped ext4 image.
    bool caps_disk() const override { return false; }
    // Each volume's ext4 image is a virtio disk of its own (serial deskbox-vol<N>), mounted
    // by the guest's init: the guest kernel, not the host's, runs the filesystem.
    VolumeAccess volume_access() const override { return VolumeAccess::disk_image; }
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
    CopyStarts* copy_starts() override { return this; }
    CopyKind copy_kind() const override { return CopyKind::memory; }
    // A restore of the copy (a template snapshot's files) with `spec`'s identity.
    std::unique_ptr<SandboxInstance> start_from_copy(const SandboxSpec& spec,
                                                     const std::filesystem::path& dir) override;
    // The saved machine's memory, vCPUs, network and accelerator must be `spec`'s.
    std::string copy_spec_problem(const SandboxSpec& spec,
                                  const std::filesystem::path& dir) override;

    // What of sandbox `id` still exists: a QEMU process, its directory. Empty: nothing.
    std::vector<std::string> residue(const std::filesystem::path& state_root,
                                     const std::string& id) const;
    // The boot files for a template, checked: RuntimeError naming the build command if any
    // is missing. A template of the store (derived_image.hpp) passes once its base's kernel
    // is built; its rootfs.ext4 may not be made yet.
    MicrovmImage image_for(const std::filesystem::path& template_rootfs) const;
    // image_for, making a store template's image first if it has none (once per rootfs; a
    // few seconds). Throws RuntimeError.
    MicrovmImage made_image_for(const std::filesystem::path& template_rootfs);
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
    // Where the template snapshots of `template_rootfs` are kept (see the layout above).
    std::filesystem::path template_snapshots_root(const std::filesystem::path& state_root,
                                                  const std::filesystem::path& template_rootfs,
                                                  const MicrovmImage& image) const;
    // What outdates every snapshot of a template: its image files, QEMU, the agent image.
    std::string template_generation(const SandboxSpec& spec, const MicrovmImage& image);
    void prune_template_snapshots(const std::filesystem::path& made, const nlohmann::json& record);

    std::shared_ptr<MicrovmSandbox::Shared> shared_;
};

}  // namespace deskbox::runtime
