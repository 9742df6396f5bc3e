// SandboxMedia: the VNC server (its input queued behind the viewers') and recordings.
#include "server/sandbox/sandbox_media.hpp"

#include "common/random.hpp"
#include "server/sandbox/sandbox_error.hpp"

namespace deskbox::server {
namespace {

// VNC authentication compares 8 characters: 8 random letters and digits.
std::string vnc_password() {
    return random::from_alphabet("abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789", 8);
}

}  // namespace

SandboxMedia::SandboxMedia(streaming::FrameMirror& mirror, SandboxInput& input, MediaLink link)
    : mirror_(mirror), input_(input), link_(std::move(link)) {}

SandboxMedia::~SandboxMedia() {
    stop();
}

void SandboxMedia::start_vnc(input::Size screen) {
    std::lock_guard lock(mutex_);
    vnc_password_ = vnc_password();
    do vnc_view_password_ = vnc_password();
    while (vnc_view_password_ == vnc_password_);
    vnc_input_ = std::make_unique<VncInput>(
        input::PointerInput(input::rfb_buttons(), screen.width, screen.height));
    streaming::VncServer::Options options;
    options.password = vnc_password_;
    options.view_only_password = vnc_view_password_;
    options.desktop_name = "deskbox " + link_.sandbox_id;
    streaming::VncServer::InputHandler input;
    // Called on the VNC server's thread: only queue, never wait for the agent.
    input.pointer = [this](int x, int y, int mask) {
        std::vector<input::Action> actions;
        {
            std::lock_guard guard(vnc_input_->mutex);
            actions = vnc_input_->pointer.pointer(x, y, static_cast<unsigned>(mask));
        }
        input_.queue_input(std::move(actions), "vnc");
    };
    input.key = [this](std::uint32_t keysym, bool down) {
        std::vector<input::Action> actions;
        {
            std::lock_guard guard(vnc_input_->mutex);
            actions = vnc_input_->pointer.key(keysym, down);
        }
        input_.queue_input(std::move(actions), "vnc");
    };
    input.cut_text = [this](std::string text) { input_.queue_clipboard(std::move(text)); };
    vnc_ = std::make_unique<streaming::VncServer>(mirror_, options, std::move(input));
}

bool SandboxMedia::has_vnc() const {
    std::lock_guard lock(mutex_);
    return vnc_ != nullptr;
}

std::optional<unsigned short> SandboxMedia::vnc_port() const {
    std::lock_guard lock(mutex_);
    if (!vnc_) return std::nullopt;
    return static_cast<unsigned short>(vnc_->port());
}

void SandboxMedia::stop() {
    std::unique_ptr<streaming::VncServer> vnc;
    std::unique_ptr<streaming::Recorder> recorder;
    {
        std::lock_guard lock(mutex_);
        vnc = std::move(vnc_);
        recorder = std::move(recorder_);
    }
    if (recorder) recorder->stop();  // finalised with the screen as it was last
    if (vnc) vnc->stop();
}

nlohmann::json SandboxMedia::start_recording(const RecordingRequest& request) {
    auto started = begin_recording(request);
    link_.recording_changed();  // a crash from here on still knows it was recording
    return started;
}

nlohmann::json SandboxMedia::begin_recording(const RecordingRequest& request) {
    const bool actions = request.actions;
    const int fps = request.fps;
    link_.check_recordable();
    std::lock_guard lock(mutex_);
    if (recorder_)
        throw SandboxError(SandboxFault::conflict, "already_recording",
                           "recording " + recording_id_ + " is running; stop it first");
    // An adopted sandbox counts from 0 again: never reuse an id whose files exist.
    std::string id;
    do id = link_.sandbox_id + "-" + std::to_string(++recordings_started_);
    while (std::filesystem::exists(link_.recordings_dir / (id + ".mp4")));
    std::filesystem::create_directories(link_.recordings_dir);
    streaming::Recorder::Options o;
    o.path = (link_.recordings_dir / (id + ".mp4")).string();
    if (actions) o.events_path = (link_.recordings_dir / (id + ".events.jsonl")).string();
    o.max_fps = fps;
    try {
        recorder_ = std::make_unique<streaming::Recorder>(mirror_, o);
    } catch (const streaming::ParameterError& e) {
        throw SandboxError(SandboxFault::failed, "recording_failed", e.what());
    }
    recording_id_ = id;
    recording_actions_ = actions;
    recording_options_ = request.to_json();
    return {{"recording", id}, {"state", "recording"}, {"actions", actions}, {"fps", fps}};
}

void SandboxMedia::continue_recording() {
    std::optional<nlohmann::json> options;
    {
        std::lock_guard lock(mutex_);
        if (recorder_) return;
        options = std::exchange(recording_options_, std::nullopt);
    }
    if (!options) return;
    // The old server's encoder finished its file at exit (or left a crash's fragments);
    // the video goes on in a new recording.
    try {
        auto started = start_recording(read_recording_request(*options));
        link_.audit("record", {{"continued", started["recording"]}, {"reason", "server restart"}});
    } catch (const std::exception& e) {
        link_.audit("record",
                    {{"error", std::string("cannot continue the recording: ") + e.what()}});
    }
}

nlohmann::json SandboxMedia::stop_recording() {
    std::unique_ptr<streaming::Recorder> recorder;
    std::string id;
    {
        std::lock_guard lock(mutex_);
        if (!recorder_)
            throw SandboxError(SandboxFault::conflict, "not_recording",
                               "sandbox " + link_.sandbox_id + " is not recording");
        recorder = std::move(recorder_);
        id = recording_id_;
        recording_options_.reset();
    }
    link_.recording_changed();
    auto stats = recorder->stop();
    nlohmann::json out = {{"recording", id},
                          {"state", "finished"},
                          {"frames", stats.frames},
                          {"bytes", stats.bytes},
                          {"duration_ms", stats.duration_ms}};
    if (!stats.error.empty()) out["error"] = stats.error;
    return out;
}

nlohmann::json SandboxMedia::recording_status() const {
    std::lock_guard lock(mutex_);
    if (!recorder_) return {{"state", "idle"}};
    auto stats = recorder_->stats();
    return {{"recording", recording_id_},    {"state", stats.finished ? "finished" : "recording"},
            {"actions", recording_actions_}, {"frames", stats.frames},
            {"bytes", stats.bytes},          {"duration_ms", stats.duration_ms}};
}

void SandboxMedia::record_event(const std::string& kind, const nlohmann::json& detail) {
    std::lock_guard lock(mutex_);
    if (recorder_ && recording_actions_) recorder_->add_event({{"kind", kind}, {"detail", detail}});
}

std::optional<nlohmann::json> SandboxMedia::recording_options() const {
    std::lock_guard lock(mutex_);
    return recording_options_;
}

void SandboxMedia::set_recording_options(nlohmann::json options) {
    std::lock_guard lock(mutex_);
    recording_options_ = std::move(options);
}

void SandboxMedia::describe_into(nlohmann::json& j, bool with_tokens) const {
    std::lock_guard lock(mutex_);
    if (vnc_) {
        j["vnc"] = {{"host", vnc_->listen_address()}, {"port", vnc_->port()}};
        if (with_tokens) {
            j["vnc"]["password"] = vnc_password_;
            j["vnc"]["view_password"] = vnc_view_password_;
        }
    }
    if (recorder_) j["recording"] = recording_id_;
}

}  // namespace deskbox::server
