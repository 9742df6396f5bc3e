// Sandbox's server record (<state>/sandboxes/<id>/server.json): what a restarted deskboxd
// needs to take a sandbox over (ids, tokens, deadlines, settings), written on every change, and
// the adoption of a saved or running sandbox from it.
#include "server/sandbox/sandbox.hpp"

#include <cstdio>

#include "common/atomic_file.hpp"
#include "server/runtime/runtime_util.hpp"

namespace deskbox::server {

std::filesystem::path Sandbox::record_path(const std::filesystem::path& state_root,
                                           const std::string& id) {
    return runtime::sandbox_dir(state_root, id) / "server.json";
}

namespace {
long long to_ms(SystemClock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
SystemClock::time_point from_ms(long long ms) {
    return SystemClock::time_point(std::chrono::milliseconds(ms));
}
}  // namespace

void Sandbox::save_record() {
    nlohmann::json record = {{"id", config_.id},
                             {"template", config_.template_name},
                             {"runtime", config_.runtime_name},
                             {"width", config_.width},
                             {"height", config_.height},
                             {"dpi", config_.dpi},
                             {"timeout_s", config_.timeout.count()},
                             {"pause_on_timeout", config_.pause_on_timeout},
                             {"auto_resume", config_.auto_resume},
                             {"from_snapshot", config_.from_snapshot},
                             {"metadata", config_.metadata},
                             {"env", config_.env},
                             {"limits", runtime::limits_to_json(config_.limits)},
                             {"network", network_policy().to_json()},
                             {"egress_kbps", egress_kbps()},
                             {"recordings_dir", config_.recordings_dir.string()},
                             {"vnc", config_.vnc},
                             {"pooled", config_.pooled},
                             {"workdir", config_.workdir},
                             {"view_token", view_token_},
                             {"control_token", control_token_},
                             {"created_at_ms", to_ms(created_at_)},
                             {"expires_at_ms", to_ms(expires_at())}};
    if (config_.api_resolution)
        record["api_resolution"] = {config_.api_resolution->width, config_.api_resolution->height};
    if (!config_.volumes.empty()) record["volumes"] = volumes_to_json(config_.volumes);
    if (auto recording = media_.recording_options()) record["recording"] = *recording;
    bool saved_to_disk = false;
    {
        std::lock_guard lock(mutex_);
        record["snapshot_bytes"] = snapshot_bytes_;
        record["snapshot_at_ms"] = to_ms(snapshot_at_);
        if (namespaces_) record["host_id_base"] = namespaces_->host_base();
        if (ready_ms_) record["ready_ms"] = *ready_ms_;
        record["paused_reason"] = to_string(paused_reason_);
        saved_to_disk = snapshotted_;
    }
    // A snapshot outlives a host reboot and its record must too; a running sandbox does not
    // (it holds tokens: owner-only).
    atomic_file::write(record_path(config_.recordings_dir.parent_path(), config_.id),
                       record.dump(2) + '\n',
                       {.mode = 0600,
                        .durability = saved_to_disk ? atomic_file::Durability::power_loss
                                                    : atomic_file::Durability::process_crash});
}

namespace {

SandboxConfig config_from_record(const nlohmann::json& r) {
    SandboxConfig c;
    c.id = r.at("id");
    c.template_name = r.at("template");
    c.runtime_name = r.at("runtime");
    c.width = r.at("width");
    c.height = r.at("height");
    c.dpi = r.at("dpi");
    c.timeout = std::chrono::seconds(r.at("timeout_s").get<long long>());
    c.pause_on_timeout = r.at("pause_on_timeout");
    c.auto_resume = r.value("auto_resume", false);
    c.from_snapshot = r.value("from_snapshot", "");
    c.metadata = r.at("metadata");
    c.env = r.at("env").get<std::map<std::string, std::string>>();
    c.limits = runtime::limits_from_json(r.at("limits"));
    c.network = network::NetworkPolicy::parse(r.at("network"));
    c.egress_kbps = r.value("egress_kbps", std::uint64_t{0});
    c.recordings_dir = r.at("recordings_dir").get<std::string>();
    c.vnc = r.at("vnc");
    c.workdir = r.value("workdir", "");
    if (r.contains("api_resolution"))
        c.api_resolution = input::Size{r["api_resolution"][0], r["api_resolution"][1]};
    for (const auto& v : r.value("volumes", nlohmann::json::array()))
        c.volumes.push_back({v.at("name"), v.at("path"), v.at("read_only")});
    return c;
}

}  // namespace

std::shared_ptr<Sandbox> Sandbox::from_record(const nlohmann::json& r,
                                              std::unique_ptr<runtime::SandboxInstance> instance,
                                              const std::filesystem::path& audit_path,
                                              std::chrono::milliseconds agent_timeout) {
    auto sandbox = std::make_shared<Sandbox>(config_from_record(r), audit_path);
    sandbox->view_token_ = r.at("view_token");
    sandbox->control_token_ = r.at("control_token");
    sandbox->created_at_ = from_ms(r.at("created_at_ms"));
    sandbox->expires_at_ = from_ms(r.at("expires_at_ms"));
    sandbox->agent_timeout_ = agent_timeout;
    sandbox->instance_ = std::move(instance);
    if (r.contains("recording") && r["recording"].is_object())
        sandbox->media_.set_recording_options(r["recording"]);
    if (r.contains("ready_ms") && r["ready_ms"].is_number_integer())
        sandbox->ready_ms_ = r["ready_ms"].get<long long>();
    // Only a paused sandbox keeps a reason (adopt and adopt_running set the status).
    const std::string reason = r.value("paused_reason", "none");
    sandbox->paused_reason_ = reason == "timeout"   ? PauseReason::timeout
                              : reason == "request" ? PauseReason::request
                                                    : PauseReason::none;
    return sandbox;
}

std::shared_ptr<Sandbox> Sandbox::adopt(const nlohmann::json& r,
                                        std::unique_ptr<runtime::SandboxInstance> instance,
                                        const std::filesystem::path& audit_path,
                                        std::chrono::milliseconds agent_timeout) {
    auto sandbox = from_record(r, std::move(instance), audit_path, agent_timeout);
    sandbox->snapshot_bytes_ = r.at("snapshot_bytes");
    sandbox->snapshot_at_ = from_ms(r.at("snapshot_at_ms"));
    sandbox->snapshotted_ = true;
    sandbox->status_ = SandboxStatus::paused;
    sandbox->screen_.mirror().reset(sandbox->config_.width, sandbox->config_.height,
                                    0);  // black until resumed
    sandbox->attached_once_ = true;
    return sandbox;
}

std::shared_ptr<Sandbox> Sandbox::adopt_running(const nlohmann::json& record,
                                                std::unique_ptr<runtime::SandboxInstance> instance,
                                                const std::filesystem::path& audit_path,
                                                std::chrono::milliseconds agent_timeout) {
    bool paused = instance->state() == runtime::SandboxState::paused;
    // Frozen with no pause recorded: a server died copying it (save_copy freezes a container
    // for the copy), and no one asked for the pause. It runs on.
    if (paused && record.value("paused_reason", "none") == "none") {
        try {
            instance->resume();
            paused = false;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "deskboxd: %s: thawing what a save left frozen: %s\n",
                         record.value("id", "").c_str(), e.what());
        }
    }
    auto sandbox = from_record(record, std::move(instance), audit_path, agent_timeout);
    sandbox->status_ = paused ? SandboxStatus::paused : SandboxStatus::starting;
    // A frozen agent cannot answer: a paused sandbox is attached on resume.
    if (paused) sandbox->screen_.mirror().reset(sandbox->config_.width, sandbox->config_.height, 0);
    return sandbox;
}

void Sandbox::reattach(std::chrono::milliseconds timeout) {
    if (status() != SandboxStatus::paused) {
        try {
            attach_agent(timeout);
            if (config_.vnc) start_vnc();
        } catch (const std::exception& e) {
            throw std::runtime_error(std::string("its agent does not answer: ") + e.what());
        }
        std::lock_guard lock(mutex_);
        status_ = SandboxStatus::running;
    }
    media_.continue_recording();  // a paused one records its (black) mirror until resumed
}

}  // namespace deskbox::server
