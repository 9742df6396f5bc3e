// The parts of a sandbox that serve people rather than the agent: its VNC server and its
// recordings. Both read the frame mirror; VNC input joins the viewers' input path.

#include <cstdio>

#include "common/random.hpp"
#include "server/sandbox/request_reader.hpp"
#include "server/sandbox/sandbox.hpp"

namespace deskbox::server {
namespace {

// VNC authentication compares 8 characters: 8 random letters and digits.
std::string vnc_password() {
    return random::from_alphabet("abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789", 8);
}

}  // namespace

void Sandbox::start_vnc() {
    std::lock_guard lock(streams_mutex_);
    vnc_password_ = vnc_password();
    do vnc_view_password_ = vnc_password();
    while (vnc_view_password_ == vnc_password_);
    vnc_input_ = std::make_unique<VncInput>(
        input::PointerInput(input::rfb_buttons(), config_.width, config_.height));
    streaming::VncServer::Options options;
    options.password = vnc_password_;
    options.view_only_password = vnc_view_password_;
    options.desktop_name = "deskbox " + config_.id;
    streaming::VncServer::InputHandler input;
    // Called on the VNC server's thread: only queue, never wait for the agent.
    input.pointer = [this](int x, int y, int mask) {
        std::vector<input::Action> actions;
        {
            std::lock_guard guard(vnc_input_->mutex);
            actions = vnc_input_->pointer.pointer(x, y, static_cast<unsigned>(mask));
        }
        queue_input(std::move(actions), "vnc");
    };
    input.key = [this](std::uint32_t keysym, bool down) {
        std::vector<input::Action> actions;
        {
            std::lock_guard guard(vnc_input_->mutex);
            actions = vnc_input_->pointer.key(keysym, down);
        }
        queue_input(std::move(actions), "vnc");
    };
    input.cut_text = [this](std::string text) {
        if (text.size() > 256 * 1024 || status() != SandboxStatus::running) return;
        input_worker_.post([this, text = std::move(text)] {
            try {
                agent_client_.set_clipboard(text);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "deskboxd: %s: VNC clipboard: %s\n", config_.id.c_str(),
                             e.what());
            }
        });
    };
    vnc_ = std::make_unique<streaming::VncServer>(mirror_, options, std::move(input));
}

std::optional<unsigned short> Sandbox::vnc_port() const {
    std::lock_guard lock(streams_mutex_);
    if (!vnc_) return std::nullopt;
    return static_cast<unsigned short>(vnc_->port());
}

void Sandbox::stop_streams() {
    std::unique_ptr<streaming::VncServer> vnc;
    std::unique_ptr<streaming::Recorder> recorder;
    {
        std::lock_guard lock(streams_mutex_);
        vnc = std::move(vnc_);
        recorder = std::move(recorder_);
    }
    if (recorder) recorder->stop();  // finalised with the screen as it was last
    if (vnc) vnc->stop();
}

nlohmann::json Sandbox::start_recording(const nlohmann::json& options) {
    auto started = begin_recording(options);
    save_record_or_audit();  // a crash from here on still knows it was recording
    return started;
}

nlohmann::json Sandbox::begin_recording(const nlohmann::json& options) {
    RequestReader reader(options);
    const bool actions = reader.boolean("actions").value_or(false);
    const int fps = static_cast<int>(reader.integer("fps", 1, 60).value_or(30));
    reader.finish();
    if (status() != SandboxStatus::running && status() != SandboxStatus::paused)
        throw ApiError(409, "conflict", std::string("sandbox is ") + to_string(status()));
    std::lock_guard lock(streams_mutex_);
    if (recorder_)
        throw ApiError(409, "already_recording",
                       "recording " + recording_id_ + " is running; stop it first");
    // An adopted sandbox counts from 0 again: never reuse an id whose files exist.
    std::string id;
    do id = config_.id + "-" + std::to_string(++recordings_started_);
    while (std::filesystem::exists(config_.recordings_dir / (id + ".mp4")));
    std::filesystem::create_directories(config_.recordings_dir);
    streaming::Recorder::Options o;
    o.path = (config_.recordings_dir / (id + ".mp4")).string();
    if (actions) o.events_path = (config_.recordings_dir / (id + ".events.jsonl")).string();
    o.max_fps = fps;
    try {
        recorder_ = std::make_unique<streaming::Recorder>(mirror_, o);
    } catch (const streaming::ParameterError& e) {
        throw ApiError(500, "recording_failed", e.what());
    }
    recording_id_ = id;
    recording_actions_ = actions;
    recording_options_ = nlohmann::json{{"actions", actions}, {"fps", fps}};
    return {{"recording", id}, {"state", "recording"}, {"actions", actions}, {"fps", fps}};
}

void Sandbox::continue_recording() {
    std::optional<nlohmann::json> options;
    {
        std::lock_guard lock(streams_mutex_);
        if (recorder_) return;
        options = std::exchange(recording_options_, std::nullopt);
    }
    if (!options) return;
    // The old server's encoder finished its file at exit (or left a crash's fragments);
    // the video goes on in a new recording.
    try {
        auto started = start_recording(*options);
        audit("record", {{"continued", started["recording"]}, {"reason", "server restart"}});
    } catch (const std::exception& e) {
        audit("record", {{"error", std::string("cannot continue the recording: ") + e.what()}});
    }
}

nlohmann::json Sandbox::stop_recording() {
    std::unique_ptr<streaming::Recorder> recorder;
    std::string id;
    {
        std::lock_guard lock(streams_mutex_);
        if (!recorder_)
            throw ApiError(409, "not_recording", "sandbox " + config_.id + " is not recording");
        recorder = std::move(recorder_);
        id = recording_id_;
        recording_options_.reset();
    }
    save_record_or_audit();
    auto stats = recorder->stop();
    nlohmann::json out = {{"recording", id},
                          {"state", "finished"},
                          {"frames", stats.frames},
                          {"bytes", stats.bytes},
                          {"duration_ms", stats.duration_ms}};
    if (!stats.error.empty()) out["error"] = stats.error;
    return out;
}

nlohmann::json Sandbox::recording_status() const {
    std::lock_guard lock(streams_mutex_);
    if (!recorder_) return {{"state", "idle"}};
    auto stats = recorder_->stats();
    return {{"recording", recording_id_},    {"state", stats.finished ? "finished" : "recording"},
            {"actions", recording_actions_}, {"frames", stats.frames},
            {"bytes", stats.bytes},          {"duration_ms", stats.duration_ms}};
}

}  // namespace deskbox::server
