// One sandbox as the server sees it: its lifecycle (boot, ready, pause and snapshots, adoption,
// kill), the runtime instance, the agent channel, tokens, deadline, server record and audit log.
// It owns the parts the routes use, each with its own state and lock:
//   screen() — the frame mirror the agent's damage events feed, screenshots, analysis;
//   input()  — actions, coordinate scaling, targets, viewers' and VNC clients' input;
//   media()  — live encoders, the VNC server, recordings.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "protocol/rpc.hpp"
#include "server/network/network_policy.hpp"
#include "server/network/sandbox_network.hpp"
#include "server/runtime/container/user_namespace.hpp"
#include "server/runtime/runtime.hpp"
#include "server/sandbox/agent_client.hpp"
#include "server/sandbox/command_streams.hpp"
#include "server/sandbox/network_change.hpp"
#include "server/sandbox/sandbox_config.hpp"
#include "server/sandbox/sandbox_error.hpp"
#include "server/sandbox/sandbox_input.hpp"
#include "server/sandbox/sandbox_media.hpp"
#include "server/sandbox/sandbox_screen.hpp"
#include "server/volumes/volume_store.hpp"

namespace deskbox::server {

using SystemClock = std::chrono::system_clock;

enum class SandboxStatus { starting, running, paused, error, killed };
const char* to_string(SandboxStatus status);

// Why a paused sandbox is paused: a client asked, or its timeout did (on_timeout "pause").
enum class PauseReason { none, request, timeout };
const char* to_string(PauseReason reason);

class Sandbox {
  public:
    Sandbox(SandboxConfig config, std::filesystem::path audit_path);
    ~Sandbox();
    Sandbox(const Sandbox&) = delete;
    Sandbox& operator=(const Sandbox&) = delete;

    // Runs `start` (the runtime's start or a restore from a template snapshot), connects to
    // the agent and waits for the first frame. `fresh_identity`: the guest is a copy of a
    // saved one and gets its own hostname, clock and randomness first. Throws SandboxError.
    using InstanceStarter = std::function<std::unique_ptr<runtime::SandboxInstance>()>;
    // Steps the server took before boot (namespaces, network): boot adds the runtime's and
    // its own and writes them all to the audit log as one start_phases line.
    void set_start_phases(runtime::StartPhases phases) { start_phases_ = std::move(phases); }
    void boot(const InstanceStarter& start, std::chrono::milliseconds agent_timeout,
              bool fresh_identity = false);
    // After boot (or claiming a pooled one): waits until `condition` holds (readiness.hpp),
    // asking the agent what the /windows, /ports and /commands routes ask. The time it took is
    // the sandbox's ready_ms (describe, audit). Throws SandboxError (timed_out) not_ready naming
    // what did not appear; an agent or sandbox that dies meanwhile throws its own error. The caller
    // kills the sandbox on any throw.
    void wait_ready(const ReadyCondition& condition);
    // A sandbox a previous server saved to a snapshot (`record` is what save_record wrote):
    // paused and snapshotted, resumed by resume(). Throws std::exception on a bad record.
    static std::shared_ptr<Sandbox> adopt(const nlohmann::json& record,
                                          std::unique_ptr<runtime::SandboxInstance> instance,
                                          const std::filesystem::path& audit_path,
                                          std::chrono::milliseconds agent_timeout);
    // A running (or paused) sandbox a previous server left to its successor (shutdown with
    // keep_running, or a crash): `record` is what save_record wrote. Then reattach() connects
    // its agent, frame mirror and VNC. Throws std::exception on a bad record.
    static std::shared_ptr<Sandbox> adopt_running(
        const nlohmann::json& record, std::unique_ptr<runtime::SandboxInstance> instance,
        const std::filesystem::path& audit_path, std::chrono::milliseconds agent_timeout);
    // After adopt_running and attach_network: running again (a paused one waits for resume).
    // Throws std::exception if its agent does not answer within `timeout` (a running agent
    // answers at once: it waits for the next host session).
    void reattach(std::chrono::milliseconds timeout);
    // Where this sandbox's server-side record lives (written once it runs, kept up to date
    // with its deadline; what adopt and adopt_running read).
    static std::filesystem::path record_path(const std::filesystem::path& state_root,
                                             const std::string& id);
    // A sandbox made ahead (the pool) is handed to a client: its lifetime, metadata and API
    // resolution become the request's.
    void claim(const SandboxConfig& request);
    // The host side of its network (server/network/), made before boot; the sandbox ends it
    // after its processes (kill, shutdown). Its egress decisions go to this audit log.
    void attach_network(std::shared_ptr<network::SandboxNetwork> network);
    // Its user namespace (containers): unpinned after its processes and network are gone,
    // kept pinned when the sandbox runs on for the next server (its record has the range).
    void attach_namespaces(std::unique_ptr<runtime::SandboxNamespaces> namespaces);
    // Its volumes' mounts (config().volumes, in order): released after its processes, kept
    // mounted when the sandbox runs on for the next server.
    void attach_volumes(std::vector<volumes::VolumeLease> leases);
    std::shared_ptr<network::SandboxNetwork> network() const;
    // The network policy and egress limit in force (a live change replaces the create's).
    network::NetworkPolicy network_policy() const;
    std::uint64_t egress_kbps() const;
    // PATCH .../network: applies `change` to the policy in force (`check` sees the new policy
    // first, e.g. that its secrets exist), cuts the connections it forbids, keeps it in the
    // record and audits it; returns the network as inspect shows it. Throws SandboxError:
    // invalid (the change), conflict network_disabled (created without a network).
    nlohmann::json change_network(const NetworkChange& change,
                                  const std::function<void(const network::NetworkPolicy&)>& check);
    void kill();  // idempotent; leaves nothing behind
    // The server stops: a sandbox saved to a snapshot keeps its files for the next server
    // (adopt); with `keep_running`, a running or paused one whose runtime can leave it running
    // does too (adopt_running); any other is killed.
    void shutdown(bool keep_running = false);

    const SandboxConfig& config() const { return config_; }
    const std::string& id() const { return config_.id; }
    SandboxStatus status() const;
    std::string error_reason() const;
    SystemClock::time_point created_at() const { return created_at_; }
    SystemClock::time_point expires_at() const;
    void set_timeout(std::chrono::seconds from_now);
    const std::string& view_token() const { return view_token_; }
    const std::string& control_token() const { return control_token_; }
    nlohmann::json describe(bool with_tokens) const;

    // `snapshot`: save the whole VM (memory, devices, disk) to the state dir and end its
    // process (microvm runtime only); resume restores it. Survives a server restart.
    void pause(bool snapshot = false, PauseReason reason = PauseReason::request);
    void resume();
    // A request needs the sandbox: one its timeout paused resumes if it has auto_resume, and
    // its timeout starts again. True if it did. Throws SandboxError like resume().
    bool wake();
    // A copy of the sandbox in `dir` that outlives it (a named snapshot, a fork's source),
    // while it runs on; requests meanwhile wait for it. Throws SandboxError: invalid unsupported
    // (its runtime cannot), conflict (not running, or saved to disk), no_space (disk full), failed.
    runtime::SavedCopy save_copy(const std::filesystem::path& dir);
    // Its settings as a create request would give them (template, runtime, resolution, dpi,
    // limits, env, network, api_resolution, vnc): what a start from a copy of it begins with.
    nlohmann::json create_settings() const;
    bool snapshotted() const;
    bool can_snapshot() const;  // its runtime can save it (pause with `snapshot`)
    // How long a sandbox saved to a snapshot is kept without a resume (the server's maximum
    // timeout).
    void set_max_saved_lifetime(std::chrono::seconds lifetime) { max_saved_lifetime_ = lifetime; }
    // Checks the runtime: a dead sandbox becomes `error` with the reason. Returns status.
    SandboxStatus check_health();

    // --- the parts (see the top of this file); each throws SandboxError ---
    SandboxScreen& screen() { return screen_; }
    SandboxInput& input() { return input_; }
    SandboxMedia& media() { return media_; }
    // The agent's methods, typed (each throws SandboxError); what the routes and MCP tools call.
    AgentClient& agent_client() { return agent_client_; }
    // Stream commands' output and exits as the agent sends them (watch a pid exec.run gave).
    CommandStreams& command_streams() { return command_streams_; }
    runtime::ResourceUsage usage() const;

    void audit(const std::string& kind, const nlohmann::json& detail);
    // Sees each of its audit lines after it is written: the server's lifecycle events are
    // made of them (server/events/). Set before its first line (create).
    using AuditListener = std::function<void(const Sandbox& sandbox, const std::string& kind,
                                             const nlohmann::json& detail)>;
    void set_audit_listener(AuditListener listener) { audit_listener_ = std::move(listener); }
    // One line in the audit log of a sandbox there is no object for (one that is cleaned up).
    static void append_audit(const std::filesystem::path& audit_path, const std::string& id,
                             const std::string& kind, const nlohmann::json& detail);

  private:
    // A conflict, sandbox_exhausted, naming the limit the sandbox is at, if it is at one.
    std::optional<SandboxError> exhaustion(const std::string& what_failed) const;
    std::string way_back() const;  // "; POST .../processes/kill ...", for those answers
    // Connects to the agent (again, after a restore), handshakes and waits for a frame.
    void attach_agent(std::chrono::milliseconds timeout);
    void detach_agent();  // closes the host's session; the agent waits for the next one
    // Sets the guest's clock and reseeds its randomness (a restored microVM); `new_identity`:
    // also its hostname, and failing is fatal (a template copy must not keep another's name).
    void sync_guest(bool new_identity);
    void save_record();  // what adopt() needs, next to the runtime's files
    void save_record_or_audit();
    void claim_locked(const SandboxConfig& request);
    bool agent_connected() const;
    static std::shared_ptr<Sandbox> from_record(const nlohmann::json& record,
                                                std::unique_ptr<runtime::SandboxInstance> instance,
                                                const std::filesystem::path& audit_path,
                                                std::chrono::milliseconds agent_timeout);
    void on_event(protocol::RpcClient& client, protocol::Message&& message);
    void on_close(protocol::RpcClient& client, const std::string& reason);
    void fail(const std::string& reason);
    std::shared_ptr<protocol::RpcClient> connection();  // throws SandboxError unless running
    AgentLink agent_link();                             // agent_client_'s view of this
    InputLink input_link();                             // input_'s
    MediaLink media_link();                             // media_'s
    void start_vnc();                                   // after boot: the mirror has a frame

    SandboxConfig config_;
    SystemClock::time_point created_at_ = SystemClock::now();
    std::string view_token_;
    std::string control_token_;

    mutable std::mutex mutex_;
    SandboxStatus status_ = SandboxStatus::starting;
    std::string error_reason_;
    SystemClock::time_point expires_at_;
    std::atomic<bool> killing_{false};
    bool snapshotted_ = false;
    PauseReason paused_reason_ = PauseReason::none;
    // save_copy is at work: connection() waits (the agent's session is closed meanwhile).
    bool saving_ = false;
    std::condition_variable saved_;
    bool attached_once_ = false;         // the mirror has this screen's size
    std::optional<long long> ready_ms_;  // how long the create waited for ready (wait_ready)
    runtime::StartPhases start_phases_;  // set_start_phases, then boot's
    std::uint64_t snapshot_bytes_ = 0;
    SystemClock::time_point snapshot_at_{};
    std::chrono::milliseconds agent_timeout_{30000};
    std::chrono::seconds max_saved_lifetime_{24 * 3600};
    // Serialises pause, snapshot and resume (they drop mutex_ while the runtime works).
    std::mutex lifecycle_mutex_;
    AuditListener audit_listener_;

    std::unique_ptr<runtime::SandboxInstance> instance_;
    std::shared_ptr<network::SandboxNetwork> network_;        // kill() ends it after the instance
    std::unique_ptr<runtime::SandboxNamespaces> namespaces_;  // and these after the network
    std::vector<volumes::VolumeLease> volumes_;               // and these after its processes
    CommandStreams command_streams_;  // before agent_: the agent's reader thread feeds it
    std::shared_ptr<protocol::RpcClient> agent_;
    AgentClient agent_client_{agent_link()};

    std::mutex audit_mutex_;
    std::mutex network_change_mutex_;  // one live network change at a time (read, merge, apply)
    std::ofstream audit_;

    // The parts, each using those declared before it: input runs on the screen (targets,
    // screenshots), media reads the screen's mirror and feeds input (VNC). Destroyed in
    // reverse, so VNC and recording stop before the input worker and the mirror they use go,
    // and the input worker before the agent client its jobs call.
    SandboxScreen screen_{agent_client_, {config_.width, config_.height}, config_.api_resolution};
    SandboxInput input_{agent_client_, screen_, input_link()};
    SandboxMedia media_{screen_.mirror(), input_, media_link()};
};

}  // namespace deskbox::server
