// Records a sandbox's frame mirror to an MP4 file (H.264), with an optional sidecar of JSON
// events (the agent's actions) on the same clock.
//
// A thread of its own waits for mirror changes (a FrameMirror listener, no polling), takes the
// latest frame (FrameSubscriber: latest wins, never a queue) at most max_fps times a second, and
// encodes it with H264Encoder (global headers, as MP4 wants them in the avcC box). Frame rate is
// variable: a frame's timestamp is the wall time since the recording started, in milliseconds;
// an idle screen costs nothing, and the first frame is stamped 0 so video time equals event time.
// Each packet is written once the next one (or the stop) tells how long it lasts, so the last
// frame lasts until the stop time.
//
// The file is fragmented MP4 (empty moov, a fragment at every keyframe and every fragment_ms, base
// data offsets in the moof): whatever has been flushed is playable, so a file cut off at any
// moment (server crash, copy taken mid-recording) still plays up to its last complete fragment.
// stop() (and the destructor, and the mirror's close() when the sandbox is killed) writes the
// last fragment and the trailer.
//
// If the screen changes size mid-recording, the new frames are scaled to the recording's size
// (the MP4 track keeps one size). The pointer is drawn into the video (draw_cursor). If no frame
// ever arrives, the file stays empty (frames() == 0).
//
// The mirror must outlive the Recorder.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "streaming/frame_mirror.hpp"
#include "streaming/video/h264_encoder.hpp"

namespace deskbox::streaming {

class Recorder {
  public:
    struct Options {
        std::string path;         // the MP4 file, created or truncated
        std::string events_path;  // JSON lines of add_event(); empty: no events track
        int max_fps = 30;         // 1..240
        int fragment_ms = 1000;   // 0: fragments only at keyframes
        bool draw_cursor = true;
        // Video settings. input_width/input_height are ignored (the screen's size is used);
        // output_width/output_height 0 mean the screen's size when the first frame arrives.
        // max_fps above wins over video.max_fps; global_header is always on.
        H264Encoder::Options video = default_video();

        static H264Encoder::Options default_video() {
            H264Encoder::Options video;
            video.preset = "superfast";  // a file is kept: spend a little more for size
            video.profile = H264Profile::main;
            video.crf = 24;
            video.keyframe_interval_ms = 2000;  // seek points
            return video;
        }
    };

    struct Stats {
        std::uint64_t frames = 0;      // frames encoded
        std::uint64_t bytes = 0;       // bytes written to the file
        std::int64_t duration_ms = 0;  // media time written (the stop time once finished)
        bool finished = false;         // stopped, mirror closed, or failed
        std::string error;             // why it failed, if it did
    };

    // Opens the file (and the events file) at once and starts recording. Throws ParameterError
    // for a bad option ("path", "events_path", "max_fps", "fragment_ms", "video.<field>", ...),
    // including a file that cannot be created.
    Recorder(const FrameMirror& mirror, Options options);
    ~Recorder();  // stop()
    Recorder(const Recorder&) = delete;
    Recorder& operator=(const Recorder&) = delete;

    // Ends the recording now and finalises the file. Idempotent; returns the final stats.
    Stats stop();
    // Waits until the recording has ended on its own (mirror closed, error) or `timeout`;
    // true if it has.
    bool wait(std::chrono::milliseconds timeout) const;

    // Appends {"t_ms": <ms since the recording started>, ...event's members} to the events
    // file. `event` must be an object without "t_ms" (ParameterError "event"). Returns false
    // (and writes nothing) when there is no events file or the recording has ended.
    bool add_event(const nlohmann::json& event);

    Stats stats() const;

  private:
    struct State;
    std::unique_ptr<State> state_;
};

}  // namespace deskbox::streaming
