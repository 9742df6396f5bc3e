#include "server/sandbox/sandbox.hpp"

#include "common/atomic_file.hpp"
#include "common/base64.hpp"
#include "common/random.hpp"
#include "common/utf8.hpp"

#include "server/runtime/runtime_util.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "common/utc_time.hpp"

namespace deskbox::server {
namespace {

std::string iso8601(SystemClock::time_point t) {
    return utc_rfc3339(t);
}

}  // namespace

const char* to_string(SandboxStatus status) {
    switch (status) {
        case SandboxStatus::starting:
            return "starting";
        case SandboxStatus::running:
            return "running";
        case SandboxStatus::paused:
            return "paused";
        case SandboxStatus::error:
            return "error";
        case SandboxStatus::killed:
            return "killed";
    }
    return "unknown";
}

Sandbox::Sandbox(SandboxConfig config, std::filesystem::path audit_path)
    : config_(std::move(config)),
      view_token_(random::hex(16)),
      control_token_(random::hex(16)),
      expires_at_(SystemClock::now() + config_.timeout) {
    std::filesystem::create_directories(audit_path.parent_path());
    audit_.open(audit_path, std::ios::app);
}

Sandbox::~Sandbox() {
    kill();
}

namespace {
// The line for the audit log. Bytes that are not UTF-8 (a guest's DNS name, a client's text)
// stay in it as \xHH: only then is the detail walked and escaped (into `escaped`, if given).
std::string audit_line(const std::string& id, const std::string& kind, const nlohmann::json& detail,
                       nlohmann::json* escaped = nullptr) {
    nlohmann::json line = {{"ts", iso8601(SystemClock::now())},
                           {"ts_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                         SystemClock::now().time_since_epoch())
                                         .count()},
                           {"sandbox", id},
                           {"kind", kind},
                           {"detail", detail}};
    try {
        return line.dump() + '\n';
    } catch (const nlohmann::json::type_error&) {
        line["detail"] = utf8::escape_invalid_in(detail);
        if (escaped) *escaped = line["detail"];
        return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + '\n';
    }
}
}  // namespace

void Sandbox::append_audit(const std::filesystem::path& audit_path, const std::string& id,
                           const std::string& kind, const nlohmann::json& detail) {
    std::error_code ec;
    std::filesystem::create_directories(audit_path.parent_path(), ec);
    std::ofstream(audit_path, std::ios::app) << audit_line(id, kind, detail);
}

void Sandbox::audit(const std::string& kind, const nlohmann::json& detail) {
    nlohmann::json escaped;  // set when `detail` holds bytes that are not UTF-8
    {
        std::lock_guard lock(audit_mutex_);
        audit_ << audit_line(config_.id, kind, detail, &escaped);
        audit_.flush();
    }
    // The recording's actions track carries the same events on the video's clock.
    media_.record_event(kind, escaped.is_null() ? detail : escaped);
    if (audit_listener_) audit_listener_(*this, kind, escaped.is_null() ? detail : escaped);
}

void Sandbox::boot(const InstanceStarter& start, std::chrono::milliseconds agent_timeout,
                   bool fresh_identity) {
    agent_timeout_ = agent_timeout;
    try {
        runtime::StartPhases own;
        runtime::PhaseClock clock(own);
        instance_ = start();
        clock.mark("runtime");
        attach_agent(agent_timeout);
        clock.mark("agent_handshake");  // the agent's start, Xvfb's, and the first sync
        if (fresh_identity) {
            sync_guest(/*new_identity=*/true);
            clock.mark("identity");
        }
        if (config_.vnc) {
            start_vnc();
            clock.mark("vnc");
        }
        // The runtime's own steps stand in for the "runtime" total they add up to (roughly).
        auto runtime_steps = instance_->start_phases();
        auto phases = start_phases_;
        if (runtime_steps.empty()) runtime_steps.push_back(own.front());
        phases.insert(phases.end(), runtime_steps.begin(), runtime_steps.end());
        phases.insert(phases.end(), own.begin() + 1, own.end());
        nlohmann::json detail = nlohmann::json::object();
        for (const auto& [name, ms] : phases) detail[name] = std::round(ms * 10) / 10;
        audit("start_phases", detail);
    } catch (const runtime::SpecError& e) {
        kill();
        audit("error", {{"reason", e.what()}});
        throw SandboxError(SandboxFault::invalid, "bad_request", e.what(), e.field());
    } catch (const SandboxError& e) {
        kill();
        audit("error", {{"reason", e.what()}});
        throw;
    } catch (const std::exception& e) {
        std::string tail = instance_ ? instance_->log_tail(2000) : "";
        kill();
        const std::string reason = std::string("sandbox did not start: ") + e.what() +
                                   (tail.empty() ? "" : "; console: " + tail);
        audit("error", {{"reason", reason}});
        throw SandboxError(SandboxFault::agent_failed, "sandbox_start_failed", reason);
    }
    {
        std::lock_guard lock(mutex_);
        status_ = SandboxStatus::running;
    }
    save_record_or_audit();
}

void Sandbox::wait_ready(const ReadyCondition& condition) {
    if (!condition.wait) {  // "ready": false: no ready_ms, the client did not wait
        audit("ready", {{"condition", false}});
        std::lock_guard lock(mutex_);
        ready_ms_.reset();  // a pooled one's was the pool's wait
        return;
    }
    // An agent that answers "no" (or late) may answer "yes" later; one that is gone, or a
    // sandbox that is no longer running, never will.
    AgentReadinessProbe probe(agent_client_, [this] { return status() == SandboxStatus::running; });
    const ReadyOutcome outcome = wait_until_ready(condition, probe);
    nlohmann::json detail = {{"condition", condition.to_json()},
                             {"ready", outcome.ready},
                             {"waited_ms", outcome.waited.count()}};
    if (!outcome.ready) {
        detail["unmet"] = outcome.unmet;
        audit("ready", detail);
        throw SandboxError(
            SandboxFault::timed_out, "not_ready",
            "sandbox " + config_.id + " was not ready: " + outcome.unmet + "; it was removed",
            "ready");
    }
    audit("ready", detail);
    {
        std::lock_guard lock(mutex_);
        ready_ms_ = outcome.waited.count();
    }
    save_record_or_audit();
}

void Sandbox::save_record_or_audit() {
    // Without it a restarted server cannot adopt this sandbox, but it still serves now.
    try {
        save_record();
    } catch (const std::exception& e) {
        audit("record", {{"error", e.what()}});
    }
}

void Sandbox::attach_agent(std::chrono::milliseconds timeout) {
    UniqueFd fd = instance_->connect_agent(timeout);
    int raw = fd.release();
    auto channel = std::make_unique<protocol::Channel>(raw, raw);
    nlohmann::json hello = protocol::handshake(*channel, "host");
    int w = hello["screen"]["width"], h = hello["screen"]["height"];
    auto& mirror = screen_.mirror();
    if (!attached_once_ || w != config_.width || h != config_.height)
        mirror.reset(w, h, 0);
    else
        mirror.restart_seq();  // a restored agent: keep showing the last frame until its own
    config_.width = w;
    config_.height = h;
    screen_.set_size({w, h});
    auto client = std::make_shared<protocol::RpcClient>(std::move(channel));
    protocol::RpcClient* self = client.get();  // the callbacks run on its own reader thread
    client->on_event([this, self](protocol::Message&& m) { on_event(*self, std::move(m)); });
    client->on_close([this, self](const std::string& reason) { on_close(*self, reason); });
    client->start();
    // The agent sends a full frame first; a sync makes sure the mirror has it.
    mirror.wait_for_seq(AgentClient::over(client).sync_screen().seq, std::chrono::seconds(5));
    command_streams_.reconnected();
    std::lock_guard lock(mutex_);
    agent_ = std::move(client);
    attached_once_ = true;
}

void Sandbox::detach_agent() {
    std::shared_ptr<protocol::RpcClient> client;
    {
        std::lock_guard lock(mutex_);
        client = std::move(agent_);
    }
    if (!client) return;
    client->close();  // its on_close finds it is no longer the sandbox's agent
}

void Sandbox::sync_guest(bool new_identity) {
    // After a restore the guest's clock stands where it was saved (or paused), and a copy of
    // a template VM shares its name and random state with every other copy.
    std::vector<std::uint8_t> seed = random::bytes(64);
    auto now_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(SystemClock::now().time_since_epoch())
            .count();
    GuestIdentity identity{now_ns, base64_encode(seed), std::nullopt};
    if (new_identity) identity.hostname = config_.id;
    std::shared_ptr<protocol::RpcClient> client;  // set before the sandbox counts as running
    {
        std::lock_guard lock(mutex_);
        client = agent_;
    }
    try {
        if (!client) throw std::runtime_error("no agent connection");
        audit("identity", AgentClient::over(client).set_identity(identity));
    } catch (const std::exception& e) {
        if (new_identity)
            throw SandboxError(
                SandboxFault::agent_failed, "sandbox_start_failed",
                std::string("the restored guest refused its new identity: ") + e.what());
        // The guest runs either way; its clock is then late by the pause.
        audit("identity", {{"error", e.what()}});
    }
}

void Sandbox::kill() {
    if (killing_.exchange(true)) return;
    media_.stop();  // the recording gets the last frame; VNC stops feeding input
    std::shared_ptr<protocol::RpcClient> client;
    {
        std::lock_guard lock(mutex_);
        client = agent_;
    }
    if (client) client->close();
    input_.stop();
    if (instance_) {
        try {
            instance_->kill();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "deskboxd: kill %s: %s\n", config_.id.c_str(), e.what());
        }
    }
    // Its processes are gone: now its interfaces, rules, proxies and namespaces (an exposed
    // port's relay may hold them a moment longer: its peer is gone, so it ends).
    std::shared_ptr<network::SandboxNetwork> net;
    {
        std::lock_guard lock(mutex_);
        net = std::move(network_);
    }
    if (net) net->set_audit({});  // it may outlive us by that moment
    net.reset();
    std::unique_ptr<runtime::SandboxNamespaces> namespaces;
    {
        std::lock_guard lock(mutex_);
        namespaces = std::move(namespaces_);
    }
    namespaces.reset();
    std::vector<volumes::VolumeLease> leases;
    {
        std::lock_guard lock(mutex_);
        leases = std::move(volumes_);
    }
    leases.clear();
    screen_.mirror().close();
    std::lock_guard lock(mutex_);
    agent_.reset();
    status_ = SandboxStatus::killed;
}

void Sandbox::attach_volumes(std::vector<volumes::VolumeLease> leases) {
    std::lock_guard lock(mutex_);
    volumes_ = std::move(leases);
}

void Sandbox::attach_namespaces(std::unique_ptr<runtime::SandboxNamespaces> namespaces) {
    std::lock_guard lock(mutex_);
    namespaces_ = std::move(namespaces);
}

bool Sandbox::agent_connected() const {
    std::lock_guard lock(mutex_);
    return agent_ != nullptr;
}

void Sandbox::claim(const SandboxConfig& request) {
    // The create's network policy and egress limit replace the pool's (a pooled container
    // waits reaching nothing); one that cannot be applied hands nothing out.
    if (auto net = network(); net && (net->policy().to_json() != request.network.to_json() ||
                                      net->egress_kbps() != request.egress_kbps)) {
        std::lock_guard serial(network_change_mutex_);
        net->change(request.network, request.egress_kbps);
    }
    claim_locked(request);
    save_record_or_audit();
}

void Sandbox::claim_locked(const SandboxConfig& request) {
    std::lock_guard lock(mutex_);
    config_.pooled = false;
    // Nobody saw the pool's tokens, and nobody will: the claim's are drawn now. (Nothing reads
    // them before the create registers the sandbox.)
    view_token_ = random::hex(16);
    control_token_ = random::hex(16);
    config_.network = request.network;
    config_.egress_kbps = request.egress_kbps;
    config_.metadata = request.metadata;
    config_.timeout = request.timeout;
    config_.pause_on_timeout = request.pause_on_timeout;
    config_.auto_resume = request.auto_resume;
    config_.api_resolution = request.api_resolution;
    screen_.set_api_resolution(config_.api_resolution);
    created_at_ = SystemClock::now();
    expires_at_ = created_at_ + config_.timeout;
}

void Sandbox::shutdown(bool keep_running) {
    {
        std::lock_guard lifecycle(lifecycle_mutex_);
        auto* saved = instance_ ? instance_->snapshots() : nullptr;
        if (saved && snapshotted() && saved->release_snapshot()) {
            audit("shutdown", {{"kept", "snapshot"}});
            instance_.reset();
        } else if (keep_running && instance_) {
            const auto status = this->status();
            if (status == SandboxStatus::running || status == SandboxStatus::paused) {
                // The recording ends here (its encoder is ours); the desktop runs on.
                media_.stop();
                try {
                    save_record();
                    if (instance_->release()) {
                        audit("shutdown", {{"kept", "running"}});
                        instance_.reset();
                        std::lock_guard lock(mutex_);
                        if (namespaces_) namespaces_->release();
                        for (auto& lease : volumes_) lease.keep_for_next_server();
                    }
                } catch (const std::exception& e) {
                    audit("shutdown", {{"error", e.what()}});
                }
            }
        }
    }
    kill();  // what is left: the agent session, the host side of the network, or everything
}

SandboxStatus Sandbox::status() const {
    std::lock_guard lock(mutex_);
    return status_;
}

std::string Sandbox::error_reason() const {
    std::lock_guard lock(mutex_);
    return error_reason_;
}

SystemClock::time_point Sandbox::expires_at() const {
    std::lock_guard lock(mutex_);
    return expires_at_;
}

void Sandbox::set_timeout(std::chrono::seconds from_now) {
    {
        std::lock_guard lock(mutex_);
        expires_at_ = SystemClock::now() + from_now;
    }
    save_record_or_audit();
}

nlohmann::json Sandbox::describe(bool with_tokens) const {
    nlohmann::json j = {{"id", config_.id},
                        {"state", to_string(status())},
                        {"runtime", config_.runtime_name},
                        {"template", config_.template_name},
                        {"resolution", {config_.width, config_.height}},
                        {"dpi", config_.dpi},
                        {"created_at", iso8601(created_at_)},
                        {"expires_at", iso8601(expires_at())},
                        {"on_timeout", config_.pause_on_timeout ? "pause" : "kill"},
                        {"auto_resume", config_.auto_resume},
                        {"metadata", config_.metadata}};
    if (!config_.from_snapshot.empty()) j["from_snapshot"] = config_.from_snapshot;
    if (config_.api_resolution)
        j["api_resolution"] = {config_.api_resolution->width, config_.api_resolution->height};
    if (!config_.volumes.empty()) j["volumes"] = volumes_to_json(config_.volumes);
    if (auto net = network())
        j["network"] = net->describe();
    else
        j["network"] = {{"policy", config_.network.describe()}};
    std::string reason = error_reason();
    if (!reason.empty()) {
        j["error"] = reason;
        // What the sandbox printed last (a microVM's serial console): the why behind it.
        if (instance_) j["log_tail"] = runtime::console_excerpt(instance_->log_tail(16384), 40);
    }
    {
        std::lock_guard lock(mutex_);
        if (snapshotted_)
            j["snapshot"] = {{"bytes", snapshot_bytes_}, {"saved_at", iso8601(snapshot_at_)}};
        if (ready_ms_) j["ready_ms"] = *ready_ms_;
        // Paused with no reason kept (adopted from an older record): only a resume wakes it.
        if (status_ == SandboxStatus::paused)
            j["paused_reason"] = to_string(
                paused_reason_ == PauseReason::none ? PauseReason::request : paused_reason_);
    }
    auto u = usage();
    nlohmann::json used = nlohmann::json::object();
    if (u.pids) used["pids"] = *u.pids;
    if (u.memory_bytes) used["memory_mb"] = *u.memory_bytes >> 20;
    if (u.oom_kills) used["oom_kills"] = *u.oom_kills;
    if (u.disk_bytes) used["disk_mb"] = *u.disk_bytes >> 20;
    if (!used.empty()) j["usage"] = used;
    if (with_tokens) {
        j["view_token"] = view_token_;
        j["control_token"] = control_token_;
    }
    media_.describe_into(j, with_tokens);
    return j;
}

void Sandbox::on_event(protocol::RpcClient& client, protocol::Message&& m) {
    const auto& h = m.header;
    const std::string event = h.value("event", "");
    auto& mirror = screen_.mirror();
    try {
        if (event == "damage") {
            mirror.apply_damage(h.at("seq").get<std::uint64_t>(), h.at("x").get<int>(),
                                h.at("y").get<int>(), h.at("width").get<int>(),
                                h.at("height").get<int>(), std::string_view(m.body));
            // Pixels were copied into the mirror; the next large frame reuses this buffer
            // instead of faulting in fresh pages (about 2x channel throughput on full frames).
            client.channel().recycle(std::move(m.body));
        } else if (event == "cursor.position") {
            mirror.set_cursor_position(h.at("x").get<int>(), h.at("y").get<int>());
        } else if (event == "cursor.shape") {
            mirror.set_cursor_shape(
                h.at("width").get<int>(), h.at("height").get<int>(), h.at("xhot").get<int>(),
                h.at("yhot").get<int>(), h.at("serial").get<std::uint64_t>(),
                std::span(reinterpret_cast<const std::uint8_t*>(m.body.data()), m.body.size()));
        } else if (event == "process.output") {
            command_streams_.output(h.at("pid").get<pid_t>(), h.at("stream").get<std::string>(),
                                    std::move(m.body));
        } else if (event == "process.exit") {
            command_streams_.exited(h.at("pid").get<pid_t>(), h.at("exit_code").get<int>(),
                                    h.value("signal", 0));
        } else if (event == "session.state") {
            audit("session", h);
            if (h.value("state", "") == "failed") fail("desktop failed: " + h.value("reason", ""));
        }
    } catch (const std::exception& e) {
        // A guest that sends nonsense loses its channel; the sandbox is reported broken.
        throw std::runtime_error("bad " + event + " event from the agent: " + e.what());
    }
}

void Sandbox::on_close(protocol::RpcClient& client, const std::string& reason) {
    {
        // A session the sandbox let go of (snapshot) or had not taken yet (attach) ends
        // without breaking it.
        std::lock_guard lock(mutex_);
        if (agent_.get() != &client) return;
    }
    // Stream commands' watchers learn that no more output will come (on a kill too).
    command_streams_.lost("the sandbox's agent channel closed: " + reason);
    if (killing_) return;
    std::string detail = "agent channel closed: " + reason;
    if (instance_) {
        // A guest going down (its init ending, a panic) closes the channel a moment before
        // its runtime ends: wait for that briefly, so the reason says why.
        for (int i = 0; i < 50 && instance_->alive(); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (auto exit = instance_->exit_info()) detail += "; sandbox " + exit->reason;
    }
    fail(detail);
}

void Sandbox::fail(const std::string& reason) {
    {
        std::lock_guard lock(mutex_);
        if (status_ == SandboxStatus::killed || status_ == SandboxStatus::error) return;
        status_ = SandboxStatus::error;
        if (error_reason_.empty()) error_reason_ = reason;
    }
    audit("error", {{"reason", reason}});
}

SandboxStatus Sandbox::check_health() {
    if (status() == SandboxStatus::running && instance_ && !instance_->alive()) {
        auto exit = instance_->exit_info();
        fail("sandbox stopped: " + (exit ? exit->reason : std::string("unknown reason")));
    }
    return status();
}

std::shared_ptr<protocol::RpcClient> Sandbox::connection() {
    wake();
    std::unique_lock lock(mutex_);
    if (saving_) saved_.wait_for(lock, agent_timeout_, [&] { return !saving_; });
    switch (status_) {
        case SandboxStatus::running:
            if (!agent_)
                throw SandboxError(SandboxFault::unavailable, "agent_unavailable",
                                   "the agent is reconnecting");
            return agent_;
        case SandboxStatus::paused:
            throw SandboxError(SandboxFault::conflict, "sandbox_paused",
                               "sandbox " + config_.id + " is paused; resume it first");
        case SandboxStatus::error:
            throw SandboxError(SandboxFault::unavailable, "sandbox_error",
                               "sandbox " + config_.id + " is broken: " + error_reason_);
        default:
            throw SandboxError(SandboxFault::conflict, "conflict",
                               std::string("sandbox is ") + to_string(status_));
    }
}

AgentLink Sandbox::agent_link() {
    AgentLink link;
    link.connection = [this] { return connection(); };
    link.exhaustion = [this](const std::string& what) { return exhaustion(what); };
    link.lost = [this] {
        check_health();
        return error_reason();
    };
    link.audit = [this](const std::string& kind, const nlohmann::json& detail) {
        audit(kind, detail);
    };
    link.way_back = way_back();
    link.default_cwd = [this] { return config_.workdir; };
    return link;
}

InputLink Sandbox::input_link() {
    InputLink link;
    link.sandbox_id = config_.id;
    link.running = [this] { return status() == SandboxStatus::running; };
    link.audit = [this](const std::string& kind, const nlohmann::json& detail) {
        audit(kind, detail);
    };
    return link;
}

MediaLink Sandbox::media_link() {
    MediaLink link;
    link.sandbox_id = config_.id;
    link.recordings_dir = config_.recordings_dir;
    link.check_recordable = [this] {
        const auto status = this->status();
        if (status != SandboxStatus::running && status != SandboxStatus::paused)
            throw SandboxError(SandboxFault::conflict, "conflict",
                               std::string("sandbox is ") + to_string(status));
    };
    link.audit = [this](const std::string& kind, const nlohmann::json& detail) {
        audit(kind, detail);
    };
    link.recording_changed = [this] { save_record_or_audit(); };
    return link;
}

void Sandbox::start_vnc() {
    media_.start_vnc({config_.width, config_.height});
}

runtime::ResourceUsage Sandbox::usage() const {
    return instance_ ? instance_->usage() : runtime::ResourceUsage{};
}

std::string Sandbox::way_back() const {
    return "; POST /v1/sandboxes/" + config_.id +
           "/processes/kill ends every process but the desktop";
}

std::optional<SandboxError> Sandbox::exhaustion(const std::string& what_failed) const {
    auto u = usage();
    // Threads count too, and the agent's own need a few slots: near the limit is at it.
    if (u.pids && u.pids_max && *u.pids + 4 >= *u.pids_max)
        return SandboxError(SandboxFault::conflict, "sandbox_exhausted",
                            "the sandbox is at its process limit (" + std::to_string(*u.pids) +
                                " of limits.pids " + std::to_string(*u.pids_max) +
                                " processes and threads): " + what_failed + way_back(),
                            "limits.pids");
    if (u.memory_bytes && u.memory_max_bytes && *u.memory_bytes >= *u.memory_max_bytes / 100 * 98)
        return SandboxError(SandboxFault::conflict, "sandbox_exhausted",
                            "the sandbox is at its memory limit (" +
                                std::to_string(*u.memory_bytes >> 20) + " of limits.memory_mb " +
                                std::to_string(*u.memory_max_bytes >> 20) +
                                " MiB): " + what_failed + way_back(),
                            "limits.memory_mb");
    return std::nullopt;
}

}  // namespace deskbox::server
