// The sandbox runtime interface: what deskboxd needs from a place that runs one desktop.
// Two implementations share it: `container` (runc, container/runtime.hpp) and `microvm`
// (QEMU, microvm/runtime.hpp). Both boot the same template and expose the same agent
// channel. Where they differ, the server asks the interface (capabilities: snapshots,
// adoption, fast start, how the network and the agent channel attach) and never the name.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/unique_fd.hpp"

namespace deskbox::runtime {

// Bad input: names the offending field (dotted path inside SandboxSpec) and the reason.
class SpecError : public std::invalid_argument {
  public:
    SpecError(std::string field, const std::string& reason)
        : std::invalid_argument(field + ": " + reason), field_(std::move(field)) {}
    const std::string& field() const { return field_; }

  private:
    std::string field_;
};

// The runtime itself failed (runc error, mount failure, timeout). what() carries the tool's
// own message (e.g. runc's stderr) so the operator sees the cause, not just "failed".
class RuntimeError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// The filesystem a copy was written to is full (ENOSPC or a quota): the caller can say "does
// not fit" (507) rather than "failed".
class NoSpaceError : public RuntimeError {
  public:
    using RuntimeError::RuntimeError;
};

struct ResourceLimits {
    std::uint64_t memory_mb = 2048;  // hard limit incl. tmpfs (/tmp, /dev/shm); no swap
    double cpus = 2.0;               // fractional CPUs (CFS quota / period)
    std::uint32_t pids = 1024;       // max tasks (processes + threads)
    // What the sandbox may write (containers: its writable layer; 0: no cap, writes go to
    // the host's disk). tmpfs mounts count against memory_mb instead.
    std::uint64_t disk_mb = 8192;
};

// The sandbox's side of its network, made by the server (server/network/) before start and
// kept alive by it while the sandbox lives.
struct NetworkAttachment {
    // container: the network namespace runc joins (a /proc path the server holds open);
    // empty: runc makes a new one with loopback only.
    std::string netns_path;
    // container: the contents of /etc/resolv.conf (empty: the template's own file stays).
    std::string resolv_conf;
    // microVM: a new tap device for one QEMU process, in the sandbox's router namespace. Must
    // be set when SandboxSpec::network is.
    std::function<UniqueFd()> open_tap;
};

// How a runtime's sandboxes take a volume (server/volumes/).
enum class VolumeAccess {
    none,            // they cannot
    host_directory,  // the host mounts the volume's filesystem; sandboxes bind that directory
    disk_image,      // the sandbox gets the volume's ext4 image as a disk and mounts it inside
};

// A volume mounted into the sandbox.
struct VolumeMount {
    // What the runtime's VolumeAccess takes: the host directory of the volume's mounted
    // filesystem, or its ext4 image.
    std::filesystem::path source;
    std::string destination;  // absolute path inside the guest, checked by the server
    bool read_only = false;
};

struct SandboxSpec {
    std::string id;                          // [A-Za-z0-9][A-Za-z0-9_.-]{0,63}
    std::filesystem::path template_rootfs;   // read-only base (never written)
    std::filesystem::path agent_dir;         // host dir, read-only at /opt/deskbox; empty: none
    std::vector<std::string> entry;          // argv of the guest's first process (PID 1)
    std::map<std::string, std::string> env;  // added to (and overriding) the defaults
    int width = 1280, height = 800, dpi = 96;
    ResourceLimits limits;
    // The guest gets a network interface (eth0 10.0.2.15, gateway 10.0.2.2, DNS 10.0.2.3);
    // what it may reach is the server's network policy (server/network/). false: loopback only.
    bool network = false;
    NetworkAttachment attachment;
    // The guest trusts the egress proxy's CA from its first process on: agent_dir holds it
    // (kEgressCaFileName, guest_env.hpp) and bin/deskbox-agent, whose --install-egress-ca puts it
    // into the guest's trust stores before the entry starts (containers: run by the runtime on
    // the rootfs; microVMs: by the init). The guest's environment names it (default_guest_env).
    bool egress_ca = false;
    std::string hostname;  // empty: "deskbox"
    // Directory the runtime owns: sandboxes live in <state_root>/sandboxes/<id>/ and runc's
    // state in <state_root>/runc/. One server, one state root; leftovers are found there.
    std::filesystem::path state_root;
    // Identity of the guest processes. The template has `user` (1000:1000); the agent, Xvfb
    // and the apps all run as it, with no capabilities.
    std::uint32_t uid = 1000, gid = 1000;
    // Containers: processes may create user namespaces (the template's
    // security.nested_user_namespaces, for Chromium's own sandbox). Weaker: a namespace's
    // capabilities reach far more of the kernel. A microVM's guest kernel is its boundary.
    bool nested_user_namespaces = false;
    // Containers: a user namespace the server made (runtime/container/user_namespace.hpp), which
    // runc joins; ids 0..65535 inside are host ids from host_id_base. Empty: no user namespace
    // (guest ids are host ids). attachment.netns_path must then be a namespace it owns.
    std::filesystem::path user_namespace;
    std::uint32_t host_id_base = 0;
    // Mounted in this order, after everything else (nosuid, nodev). Under a user namespace the
    // files keep the guest's ids on disk (1000 is 1000 in every sandbox and on the host).
    std::vector<VolumeMount> volumes;
    // Containers: a saved writable layer (a CopySaving copy's files, owned by guest ids) the
    // sandbox starts with instead of an empty one. Empty: none.
    std::filesystem::path seed_files;
};

// Limits as JSON ({"memory_mb","cpus","pids"}), for records that outlive a server.
nlohmann::json limits_to_json(const ResourceLimits& limits);
ResourceLimits limits_from_json(const nlohmann::json& j);  // throws nlohmann::json::exception

// Why `path` cannot be where a volume is mounted in a guest, or "" if it can: an absolute,
// normal path (no ".", "..", "//" or trailing "/", at most 256 bytes of printable ASCII other
// than ',' and ':') at or under /data, /workspace, /mnt, /media, /srv, /home/user or /opt, and
// never /opt/deskbox, what holds it, or anything under it (the agent lives there).
std::string volume_path_problem(const std::string& path);

// Checks what every runtime needs (id, entry, sizes, limits, env, hostname, paths).
// Throws SpecError. Runtime-specific checks come on top.
void validate_spec(const SandboxSpec& spec);

// <state_root>/sandboxes/<id>: the per-sandbox directory, same layout rule for every runtime.
std::filesystem::path sandbox_dir(const std::filesystem::path& state_root, const std::string& id);
// Throws SpecError("id", ...) if `id` is not a valid sandbox id.
void validate_id(const std::string& id);

enum class SandboxState { running, paused, exited };
const char* to_string(SandboxState state);

struct ExitInfo {
    int exit_code = -1;      // the entry's exit code, or 128+signal
    int signal = 0;          // the signal that ended the entry, or 0
    bool requested = false;  // ended by kill(), not on its own
    std::string reason;      // one line for humans: "exited with code 3", "killed by SIGKILL ..."
};

// What a sandbox uses of its limits now; a field it cannot tell is nullopt.
struct ResourceUsage {
    std::optional<std::uint64_t> pids, pids_max;
    std::optional<std::uint64_t> memory_bytes, memory_max_bytes;
    std::optional<std::uint64_t> oom_kills;  // processes the kernel killed at the memory limit
    std::optional<std::uint64_t> disk_bytes, disk_max_bytes;  // the writable layer
    // CPU time its processes used since it started (a cgroup's counter, or QEMU's user and
    // system time); a restored microVM's QEMU starts again from 0.
    std::optional<std::uint64_t> cpu_ns;
    // Memory it holds and cannot give back at once: the cgroup's usage without its inactive
    // page cache (what `docker stats` shows), or QEMU's resident set.
    std::optional<std::uint64_t> memory_resident_bytes;
};

// A process's CPU time (user + system, all its threads) and resident set, from /proc;
// nullopt if it is gone.
struct ProcessCpuMemory {
    std::uint64_t cpu_ns = 0;
    std::uint64_t resident_bytes = 0;
};
std::optional<ProcessCpuMemory> read_process_cpu_memory(int pid);

struct KillOptions {
    bool keep_state = false;  // keep the sandbox dir (upper dir, logs) for post-mortems
};

// How the server's side of a sandbox's network (server/network/) meets the sandbox.
enum class NetworkAttach {
    none,   // the server makes no network for it
    netns,  // it joins a network namespace the server made (attachment.netns_path), made even
            // when its network is off (loopback only); exposed ports reach its loopback
    tap,    // a NIC on a tap in the server's router namespace (attachment.open_tap), none when
            // its network is off; exposed ports reach only its link address
};

// Optional capability of a sandbox: saved whole (memory, devices, disk) to its state dir with
// no process left, restored later, even by the next server.
class Snapshots {
  public:
    // Saves the sandbox and ends its process; it is `paused` afterwards, with alive() false
    // and exit_info() empty. Throws RuntimeError (the sandbox then runs on as it was).
    // Returns the bytes saved.
    virtual std::uint64_t snapshot() = 0;
    // Runs it again from the save. Throws RuntimeError (a missing or corrupted save: it stays
    // saved, with no process).
    virtual void restore_from_snapshot() = 0;
    virtual bool snapshotted() = 0;
    virtual std::uint64_t snapshot_bytes() = 0;  // of the save while snapshotted, else 0
    // The server exits: lets go of a saved sandbox without removing it (the next server
    // adopts it). False, and nothing changes, if it is not saved.
    virtual bool release_snapshot() = 0;
    // The network a later restore attaches to (an adopted sandbox's old one is gone).
    virtual void set_network_attachment(NetworkAttachment attachment) = 0;

  protected:
    ~Snapshots() = default;
};

// What a saved copy of a sandbox (CopySaving) holds: `memory` (a microVM: memory, devices and
// disk; a start from it runs on where the copy stood) or `filesystem` (a container: the files
// it wrote; a start from it boots the template's entry on them).
enum class CopyKind { memory, filesystem };
const char* to_string(CopyKind kind);

struct SavedCopy {
    CopyKind kind = CopyKind::filesystem;
    std::uint64_t bytes = 0;  // what the copy's directory holds on disk
};

// Optional capability of a sandbox: a copy of it saved to a directory that outlives it (a named
// snapshot, a fork's source) while it runs on.
class CopySaving {
  public:
    // Saves into `dir` (made here; it must not exist yet), synced to disk on return. The
    // sandbox stands still meanwhile and then runs on as it was (a paused one stays paused).
    // A memory copy's agent must have no host session (copies wait for a host of their own).
    // Throws RuntimeError: the sandbox runs on and the caller removes `dir`.
    virtual SavedCopy save_copy(const std::filesystem::path& dir) = 0;
    virtual CopyKind copy_kind() const = 0;

  protected:
    ~CopySaving() = default;
};

// How long each step of a start took, in milliseconds and in order ("runc_run", 212.5): the
// audit log's start_phases line, which benches read.
using StartPhases = std::vector<std::pair<std::string, double>>;

// Appends the time since the last mark to `phases` under a name.
class PhaseClock {
  public:
    explicit PhaseClock(StartPhases& phases) : phases_(phases) {}
    void mark(std::string name) {
        const auto now = std::chrono::steady_clock::now();
        phases_.emplace_back(std::move(name),
                             std::chrono::duration<double, std::milli>(now - last_).count());
        last_ = now;
    }

  private:
    StartPhases& phases_;
    std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

class SandboxInstance {
  public:
    virtual ~SandboxInstance() = default;  // implementations kill and tear everything down
    SandboxInstance() = default;
    SandboxInstance(const SandboxInstance&) = delete;
    SandboxInstance& operator=(const SandboxInstance&) = delete;

    virtual const std::string& id() const = 0;
    // Host-side path of the agent channel socket (the agent listens, the host connects).
    virtual std::filesystem::path agent_socket_path() const = 0;
    // Connects to the agent channel, retrying until the agent listens, the sandbox dies
    // (RuntimeError with its exit reason) or the timeout passes (RuntimeError).
    virtual UniqueFd connect_agent(std::chrono::milliseconds timeout) = 0;

    virtual void pause() = 0;  // freezes every process; memory and state are kept
    virtual void resume() = 0;
    // Kills every process and removes mounts, cgroups and (unless kept) the state dir, then
    // checks nothing is left (RuntimeError naming what is). Idempotent.
    void kill(const KillOptions& options = {}) { do_kill(options); }
    virtual bool alive() = 0;
    virtual SandboxState state() = 0;
    virtual std::optional<ExitInfo> exit_info() = 0;  // set once the entry has ended
    // The last bytes the sandbox wrote to its stdout/stderr (console log).
    virtual std::string log_tail(std::size_t max_bytes = 4096) = 0;
    // From the host's side (cgroups); a microVM's guest knows more of itself than this.
    virtual ResourceUsage usage() { return {}; }
    // The steps its start took on the host (none known: empty).
    virtual StartPhases start_phases() const { return {}; }
    // The server exits but the sandbox runs on for the next server to adopt: forget it without
    // killing it (this object is inert afterwards). False: this runtime cannot leave its
    // sandboxes running (they are killed as usual).
    virtual bool release() { return false; }
    // Snapshots of this sandbox, or nullptr if its runtime cannot save one.
    virtual Snapshots* snapshots() { return nullptr; }
    // Copies of this sandbox that outlive it, or nullptr if its runtime cannot save one.
    virtual CopySaving* copy_saving() { return nullptr; }
    // True: its clock is the host's (a container), so it is right after a pause. False: a
    // guest kernel keeps its own, which the server sets after a resume or restore.
    virtual bool shares_host_clock() const { return true; }
    // An adopted sandbox's network namespace for the server's new network to take over (see
    // NetworkAttach: netns, the sandbox's own; tap, the router that holds its tap). Empty: it
    // has none. Throws RuntimeError.
    virtual UniqueFd adopted_network_namespace() { return {}; }

  protected:
    virtual void do_kill(const KillOptions& options) = 0;
};

// Optional capability of a runtime: sandboxes that run on after their server exited (an
// upgrade, a crash) are taken over by the next one.
class RunningAdoption {
  public:
    // Sandboxes under `state_root` an earlier server may have left running, for
    // adopt_left_running to try (it decides).
    virtual std::vector<std::string> adoption_candidates(
        const std::filesystem::path& state_root) = 0;
    // Takes over sandbox `id`, running or paused as it was; `limits` as the server's record
    // has them. Throws RuntimeError if it cannot be (then it is a leftover to clean).
    virtual std::unique_ptr<SandboxInstance> adopt_left_running(
        const std::filesystem::path& state_root, const std::string& id,
        const ResourceLimits& limits) = 0;
    // How long an adopted sandbox's agent may take to answer the new server at most.
    virtual std::chrono::milliseconds reconnect_timeout() const = 0;

  protected:
    ~RunningAdoption() = default;
};

// Optional capability of a runtime: sandboxes saved to snapshots (Snapshots) by an earlier
// server are taken over by the next one.
class SnapshotAdoption {
  public:
    // Saved sandboxes under `state_root` no live instance owns (list_leftovers leaves them out).
    virtual std::vector<std::string> list_snapshotted(const std::filesystem::path& state_root) = 0;
    // Takes one over, still saved (restore_from_snapshot runs it). Throws RuntimeError.
    virtual std::unique_ptr<SandboxInstance> adopt_saved(const std::filesystem::path& state_root,
                                                         const std::string& id) = 0;

  protected:
    ~SnapshotAdoption() = default;
};

// Optional capability of a runtime: a start restores a saved, booted copy of the template
// instead of booting. Copies share the saved guest's identity (hostname, clock, random
// state) until the server gives them their own.
class TemplateSnapshots {
  public:
    // Called with the throwaway sandbox a template snapshot is made of, once it runs; it must
    // leave no agent connection open.
    using Ready = std::function<void(SandboxInstance&)>;
    // The template snapshot for `spec`, made first if there is none. Throws RuntimeError.
    virtual std::filesystem::path template_snapshot_for(const SandboxSpec& spec,
                                                        const Ready& ready) = 0;
    // A running sandbox restored from the snapshot in `dir`. Throws SpecError, RuntimeError.
    virtual std::unique_ptr<SandboxInstance> restore_template_snapshot(
        const SandboxSpec& spec, const std::filesystem::path& dir) = 0;
    // Whether a template snapshot of `template_rootfs` was made under `state_root` (for some
    // spec): a cluster places fast starts where one is.
    virtual bool has_template_snapshot(const std::filesystem::path& state_root,
                                       const std::filesystem::path& template_rootfs) = 0;

  protected:
    ~TemplateSnapshots() = default;
};

// Optional capability of a runtime: sandboxes started from a saved copy (CopySaving), any
// number of times; each gets the copy's state and `spec`'s identity. A memory copy runs the saved
// machine: `spec`'s memory, vCPUs and network must be the source's (copy_spec_problem tells).
class CopyStarts {
  public:
    // Throws SpecError, RuntimeError; on failure nothing is left behind.
    virtual std::unique_ptr<SandboxInstance> start_from_copy(const SandboxSpec& spec,
                                                             const std::filesystem::path& dir) = 0;
    // Why `spec` cannot start from the copy in `dir`, or "" if it can.
    virtual std::string copy_spec_problem(const SandboxSpec& spec,
                                          const std::filesystem::path& dir) = 0;
    virtual CopyKind copy_kind() const = 0;  // what its sandboxes' copies hold

  protected:
    ~CopyStarts() = default;
};

class Runtime {
  public:
    virtual ~Runtime() = default;
    virtual const char* name() const = 0;
    // Returns once the entry runs. Throws SpecError (bad spec) or RuntimeError; on failure
    // nothing is left behind.
    virtual std::unique_ptr<SandboxInstance> start(const SandboxSpec& spec) = 0;
    // Sandboxes of this runtime under `state_root` not owned by a live instance of this
    // object: what a crashed server left (containers, mounts, cgroups, directories).
    virtual std::vector<std::string> list_leftovers(const std::filesystem::path& state_root) = 0;
    // Removes everything a leftover holds. Idempotent; RuntimeError if something stays.
    virtual void cleanup_leftover(const std::filesystem::path& state_root,
                                  const std::string& id) = 0;

    // ---- what the server needs to know of it ----
    virtual NetworkAttach network_attach() const = 0;
    // The agent's --channel inside its sandboxes.
    virtual std::string agent_channel_arg() const = 0;
    // Throws RuntimeError, naming what to build, if the template in `template_rootfs` cannot
    // run here yet (a microVM needs its own image of it).
    virtual void check_template(const std::filesystem::path& template_rootfs) {
        (void)template_rootfs;
    }
    // False: a sandbox's writable disk cannot be capped (limits.disk_mb is refused, not
    // silently ignored).
    virtual bool caps_disk() const { return true; }
    // none: SandboxSpec::volumes is refused (SpecError "volumes").
    virtual VolumeAccess volume_access() const { return VolumeAccess::none; }
    // True: the server gives each sandbox a user namespace with host ids of its own
    // (SandboxSpec::user_namespace); its processes run on the host's kernel.
    virtual bool needs_user_namespace() const { return false; }
    // How long a start may take until the agent answers, given the server's setting.
    virtual std::chrono::milliseconds boot_timeout(std::chrono::milliseconds configured) const {
        return configured;
    }
    // Optional capabilities: nullptr if this runtime has none.
    virtual RunningAdoption* running_adoption() { return nullptr; }
    virtual SnapshotAdoption* snapshot_adoption() { return nullptr; }
    virtual TemplateSnapshots* template_snapshots() { return nullptr; }
    virtual CopyStarts* copy_starts() { return nullptr; }
};

// Connects to a Unix stream socket, retrying while it is missing or refusing until
// `deadline`; `still_alive` is asked between attempts so a dead sandbox fails fast (it
// returns an empty string while alive, else the reason). Paths longer than sun_path are
// reached through /proc/self/fd of their directory. Throws RuntimeError.
UniqueFd connect_unix_retry(const std::filesystem::path& path,
                            std::chrono::steady_clock::time_point deadline,
                            const std::function<std::string()>& still_alive);

}  // namespace deskbox::runtime
