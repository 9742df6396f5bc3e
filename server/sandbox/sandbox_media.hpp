// The parts of a sandbox that serve people rather than the agent: the live encoders its viewers
// share (StreamHub), its VNC server and its recordings. All read the frame mirror; VNC input
// joins the viewers' input path. It needs of its sandbox only what MediaLink says.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "input/pointer_input.hpp"
#include "server/sandbox/recording_request.hpp"
#include "server/sandbox/sandbox_input.hpp"
#include "streaming/frame_mirror.hpp"
#include "streaming/live/live_stream.hpp"
#include "streaming/video/recorder.hpp"
#include "streaming/vnc/vnc_server.hpp"

namespace deskbox::server {

struct MediaLink {
    std::string sandbox_id;
    std::filesystem::path recordings_dir;
    // Throws SandboxError (conflict) unless a recording may start now (the sandbox runs or is
    // paused).
    std::function<void()> check_recordable;
    std::function<void(const std::string& kind, const nlohmann::json& detail)> audit;
    // A recording started or stopped: the server record (which keeps its options) is saved.
    std::function<void()> recording_changed;
};

// The VNC clients' pointer and key state. libvncserver's callbacks do not say which client
// sent an event, so all of a sandbox's control clients share one.
struct VncInput {
    explicit VncInput(input::PointerInput p) : pointer(std::move(p)) {}
    std::mutex mutex;
    input::PointerInput pointer;
};

class SandboxMedia {
  public:
    // `mirror` and `input` outlive the media (all are the sandbox's).
    SandboxMedia(streaming::FrameMirror& mirror, SandboxInput& input, MediaLink link);
    ~SandboxMedia();
    SandboxMedia(const SandboxMedia&) = delete;
    SandboxMedia& operator=(const SandboxMedia&) = delete;

    // Live encoders of the screen, shared by its viewers.
    streaming::StreamHub& streams() { return streams_; }

    // ---- VNC ----
    // After the mirror has a frame of `screen` size; new passwords each time.
    void start_vnc(input::Size screen);
    bool has_vnc() const;
    // The loopback port of the VNC server; nullopt if there is none.
    std::optional<unsigned short> vnc_port() const;
    // describe's "vnc" ({"host","port"}, passwords with_tokens) and "recording" members.
    void describe_into(nlohmann::json& description, bool with_tokens) const;

    // ---- recording: one at a time, MP4 plus an optional actions track ----
    // Throws SandboxError (conflict if one is running or the sandbox is neither running nor
    // paused).
    nlohmann::json start_recording(const RecordingRequest& request);
    nlohmann::json stop_recording();  // conflict if none is running
    nlohmann::json recording_status() const;
    // An audit line, also written to the running recording's actions track (if it has one).
    void record_event(const std::string& kind, const nlohmann::json& detail);
    // The running recording's options ({"actions","fps"}) until a client stops it: kept in the
    // server record, so the next server continues it (as a new recording) on adoption.
    std::optional<nlohmann::json> recording_options() const;
    void set_recording_options(nlohmann::json options);  // from an adopted sandbox's record
    // An adopted sandbox that was recording when its old server stopped: a new recording with
    // the same options (audited).
    void continue_recording();

    // VNC and recording end (the recording gets the last frame); first thing on kill.
    void stop();

  private:
    nlohmann::json begin_recording(const RecordingRequest& request);

    streaming::FrameMirror& mirror_;
    SandboxInput& input_;
    MediaLink link_;
    streaming::StreamHub streams_{mirror_};

    mutable std::mutex mutex_;
    std::string vnc_password_, vnc_view_password_;
    std::unique_ptr<streaming::VncServer> vnc_;
    std::unique_ptr<VncInput> vnc_input_;
    std::unique_ptr<streaming::Recorder> recorder_;
    std::string recording_id_;
    bool recording_actions_ = false;
    int recordings_started_ = 0;
    std::optional<nlohmann::json> recording_options_;
};

}  // namespace deskbox::server
