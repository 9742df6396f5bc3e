// One sandbox as the server sees it: the runtime instance, the agent channel, the frame
// mirror fed by the agent's damage events, tokens, deadline and audit log.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/serial_worker.hpp"
#include "input/parse.hpp"
#include "input/scaling.hpp"
#include "protocol/rpc.hpp"
#include "server/runtime/runtime.hpp"
#include "server/sandbox/api_error.hpp"
#include "server/stream/pointer_input.hpp"
#include "streaming/frame_mirror.hpp"
#include "streaming/image_encoder.hpp"
#include "streaming/live/live_stream.hpp"
#include "streaming/video/recorder.hpp"
#include "streaming/vnc/vnc_server.hpp"

namespace deskbox::server {

using SystemClock = std::chrono::system_clock;

enum class SandboxStatus { starting, running, paused, error, killed };
const char* to_string(SandboxStatus status);

struct SandboxConfig {
    std::string id;
    std::string template_name;
    std::string runtime_name;
    int width = 1280, height = 800, dpi = 96;
    std::optional<input::Size> api_resolution;
    std::chrono::seconds timeout{300};
    bool pause_on_timeout = false;
    nlohmann::json metadata = nlohmann::json::object();
    std::map<std::string, std::string> env;
    runtime::ResourceLimits limits;
    bool network = false;
    std::filesystem::path recordings_dir;  // where recordings go (they outlive the sandbox)
    bool vnc = true;                       // serve VNC on a loopback port
};

// The VNC clients' pointer and key state. libvncserver's callbacks do not say which client
// sent an event, so all of a sandbox's control clients share one.
struct VncInput {
    explicit VncInput(PointerInput p) : pointer(std::move(p)) {}
    std::mutex mutex;
    PointerInput pointer;
};

class Sandbox {
  public:
    Sandbox(SandboxConfig config, std::filesystem::path audit_path);
    ~Sandbox();
    Sandbox(const Sandbox&) = delete;
    Sandbox& operator=(const Sandbox&) = delete;

    // Runs the runtime, connects to the agent and waits for the first frame. Throws ApiError.
    void boot(runtime::Runtime& runtime, const runtime::SandboxSpec& spec,
              std::chrono::milliseconds agent_timeout);
    void kill();  // idempotent; leaves nothing behind

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

    void pause();
    void resume();
    // Checks the runtime: a dead sandbox becomes `error` with the reason. Returns status.
    SandboxStatus check_health();

    // --- desktop operations; each throws ApiError ---
    streaming::EncodedImage screenshot(const streaming::EncodeOptions& options, int settle_ms = 30);
    nlohmann::json actions(const nlohmann::json& body, input::Dialect dialect);
    protocol::Reply call(const std::string& method,
                         nlohmann::json params = nlohmann::json::object(), std::string body = {},
                         std::chrono::milliseconds timeout = std::chrono::seconds(30));
    streaming::FrameMirror& mirror() { return mirror_; }
    // Live encoders of this sandbox's screen, shared by its viewers.
    streaming::StreamHub& streams() { return streams_; }
    // The loopback port of this sandbox's VNC server; nullopt if it has none.
    std::optional<unsigned short> vnc_port() const;

    // ---- recording (sandbox_streams.cpp): one at a time, MP4 plus optional actions track ----
    // {"actions": bool, "fps": 1..60}; throws ApiError (409 if one is running, 400 bad field).
    nlohmann::json start_recording(const nlohmann::json& options);
    nlohmann::json stop_recording();  // 409 if none is running
    nlohmann::json recording_status() const;
    // Input from a viewer or VNC client (screen coordinates, already on screen): run in order
    // on the sandbox's input thread, so I/O threads never wait for the agent. False if it was
    // dropped: the sandbox is not running or too much input is queued.
    bool queue_input(std::vector<input::Action> actions, const std::string& source);

    void audit(const std::string& kind, const nlohmann::json& detail);

  private:
    void on_event(protocol::Message&& message);
    void on_close(const std::string& reason);
    void fail(const std::string& reason);
    protocol::RpcClient& agent();  // throws ApiError unless running
    nlohmann::json run_segment(const std::vector<input::Action>& actions, std::size_t offset);
    void start_vnc();     // after boot: the mirror has a frame
    void stop_streams();  // VNC and recording, first thing on kill

    SandboxConfig config_;
    SystemClock::time_point created_at_ = SystemClock::now();
    std::string view_token_;
    std::string control_token_;

    mutable std::mutex mutex_;
    SandboxStatus status_ = SandboxStatus::starting;
    std::string error_reason_;
    SystemClock::time_point expires_at_;
    std::atomic<bool> killing_{false};

    std::unique_ptr<runtime::SandboxInstance> instance_;
    std::unique_ptr<protocol::RpcClient> agent_;
    streaming::FrameMirror mirror_;
    std::optional<input::CoordinateScaler> scaler_;

    std::mutex audit_mutex_;
    std::ofstream audit_;

    streaming::StreamHub streams_{mirror_};
    SerialWorker input_worker_{512};  // stopped before what its jobs use goes away

    // VNC and recording read the mirror and feed the input worker: declared after both, so
    // they go first.
    mutable std::mutex streams_mutex_;
    std::string vnc_password_, vnc_view_password_;
    std::unique_ptr<streaming::VncServer> vnc_;
    std::unique_ptr<VncInput> vnc_input_;
    std::unique_ptr<streaming::Recorder> recorder_;
    std::string recording_id_;
    bool recording_actions_ = false;
    int recordings_started_ = 0;
};

std::string random_token(std::size_t bytes);

}  // namespace deskbox::server
