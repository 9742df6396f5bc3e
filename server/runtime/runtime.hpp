// The sandbox runtime interface: what deskboxd needs from a place that runs one desktop.
// Two implementations share it: `container` (runc, container_runtime.hpp) and, later,
// `microvm` (QEMU). Both boot the same template and expose the same agent channel, so the
// server above never knows which one it talks to.
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
    // Containers: a user namespace the server made (runtime/user_namespace.hpp), which runc
    // joins; ids 0..65535 inside are host ids from host_id_base. Empty: no user namespace
    // (guest ids are host ids). attachment.netns_path must then be a namespace it owns.
    std::filesystem::path user_namespace;
    std::uint32_t host_id_base = 0;
};

// Limits as JSON ({"memory_mb","cpus","pids"}), for records that outlive a server.
nlohmann::json limits_to_json(const ResourceLimits& limits);
ResourceLimits limits_from_json(const nlohmann::json& j);  // throws nlohmann::json::exception

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
};

struct KillOptions {
    bool keep_state = false;  // keep the sandbox dir (upper dir, logs) for post-mortems
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
    // The server exits but the sandbox runs on for the next server to adopt: forget it without
    // killing it (this object is inert afterwards). False: this runtime cannot leave its
    // sandboxes running (they are killed as usual).
    virtual bool release() { return false; }

  protected:
    virtual void do_kill(const KillOptions& options) = 0;
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
};

// Connects to a Unix stream socket, retrying while it is missing or refusing until
// `deadline`; `still_alive` is asked between attempts so a dead sandbox fails fast (it
// returns an empty string while alive, else the reason). Paths longer than sun_path are
// reached through /proc/self/fd of their directory. Throws RuntimeError.
UniqueFd connect_unix_retry(const std::filesystem::path& path,
                            std::chrono::steady_clock::time_point deadline,
                            const std::function<std::string()>& still_alive);

}  // namespace deskbox::runtime
