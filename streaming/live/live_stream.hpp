// Live video of one sandbox for any number of viewers, read from its frame mirror.
//
// A LiveEncoder encodes the mirror once per distinct StreamSettings (codec, output size, frame
// rate, quality) on a thread of its own, at most at the settings' frame rate and only when the
// screen changed (damage-driven), and hands every packet to all its subscribers. Packets are
// shared, immutable and already framed as the WebSocket binary message (see StreamPacket).
//
// Keyframes stand alone: an H.264 IDR with its SPS/PPS, or a whole JPEG frame. Other packets
// build on what came since the last keyframe (H.264 P-frames; JPEG patches of the damaged
// rects). A new subscriber, and one that fell behind, asks for a keyframe and skips everything
// until one arrives (PacketQueue), so a slow viewer never holds an unbounded queue and never
// slows the encoder, other viewers, or the agent (the encoder only reads the mirror).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "streaming/frame_mirror.hpp"

namespace deskbox::streaming {

enum class StreamCodec { jpeg, h264 };
// "jpeg" or "h264"; anything else is a ParameterError on "codec".
StreamCodec parse_stream_codec(std::string_view name);
std::string_view codec_name(StreamCodec codec);

struct StreamSettings {
    StreamCodec codec = StreamCodec::jpeg;
    int max_width = 0;   // 0: the screen's; else the output fits in max_width x max_height,
    int max_height = 0;  // keeping the aspect ratio (never upscaled; even sizes for h264)
    int max_fps = 30;    // 1..60
    int quality = 70;    // jpeg: 1..100; h264: 1 (worst) .. 100 (best), mapped to x264's CRF
    auto operator<=>(const StreamSettings&) const = default;
};
// Throws ParameterError naming the field ("width", "height", "fps", "quality").
void validate(const StreamSettings& settings);
// `settings` (valid) moved to the nearest of a few presets, so viewers asking for nearly the
// same picture share one encoder: quality 30/50/70/90, fps 5/10/15/30/60, and a width or
// height of 0 (the screen's) or one of 320..3840 (kOutputSizePresets). The presets hold the
// common screens' sides (720, 768, 1080, 1200, 1440, 2160), so a viewer asking for its screen's
// own size is never snapped below it and scaled (1080 went to 960: a full-frame swscale that
// cost more than the H.264 encode at 1080p60).
StreamSettings snap_to_preset(StreamSettings settings);
inline constexpr int kOutputSizePresets[] = {320,  480,  640,  720,  768,  800,  960,  1080,
                                             1200, 1280, 1440, 1600, 1920, 2160, 2560, 3840};
// Live encoders one sandbox runs at once: each is a thread and frame buffers.
inline constexpr std::size_t kMaxEncodersPerSandbox = 4;

// A viewer asked for settings no running encoder has, and the sandbox runs its maximum.
class TooManyEncoders : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// The binary WebSocket message of one video packet, little-endian:
//   0  u8  kind: 1 = H.264 access unit (Annex B), 2 = JPEG image
//   1  u8  flags: bit 0 keyframe
//   2  u16 x, u16 y, u16 w, u16 h: where the image goes in the output (H.264: 0, 0, size)
//   10 u16 output width, u16 output height (the whole picture the viewer shows)
//   14 u16 reserved (0)
//   16 u64 capture time, microseconds since the Unix epoch (when the pixels left the mirror)
//   24 payload
inline constexpr std::size_t kPacketHeaderSize = 24;
enum class PacketKind : std::uint8_t { h264 = 1, jpeg = 2 };

struct StreamPacket {
    std::string message;  // header + payload, sent as is
    bool keyframe = false;
};
using StreamPacketPtr = std::shared_ptr<const StreamPacket>;

// Builds the message header (see above) in front of `payload`.
std::string frame_packet(PacketKind kind, bool keyframe, int x, int y, int w, int h,
                         int output_width, int output_height, std::uint64_t capture_us,
                         std::string_view payload);

// A viewer's outgoing packets, bounded. Past the limit everything queued is dropped and the
// queue waits for a keyframe (dropping all else until one comes): the viewer skips ahead to
// the present instead of falling further behind.
class PacketQueue {
  public:
    explicit PacketQueue(std::size_t max_packets = 60, std::size_t max_bytes = 8 << 20)
        : max_packets_(max_packets), max_bytes_(max_bytes) {}
    // False if it is waiting for a keyframe (the packet was dropped) — ask the encoder for one.
    bool push(StreamPacketPtr packet);
    std::optional<StreamPacketPtr> pop();
    bool waiting_for_keyframe() const { return waiting_; }
    std::size_t size() const { return queue_.size(); }
    std::uint64_t dropped() const { return dropped_; }

  private:
    std::size_t max_packets_, max_bytes_;
    std::deque<StreamPacketPtr> queue_;
    std::size_t bytes_ = 0;
    bool waiting_ = true;  // the first packet a viewer sees must be a keyframe
    std::uint64_t dropped_ = 0;
};

// What the encoder thread tells each subscriber. Callbacks run on the encoder thread: they
// must be quick (queue and return).
struct StreamCallbacks {
    std::function<void(const StreamPacketPtr&)> packet;
    // A JSON text message about the pointer ({"type":"cursor",...} or "cursor_shape"), in
    // output coordinates; shared by all subscribers.
    std::function<void(const std::shared_ptr<const std::string>&)> cursor;
    std::function<void()> end;  // the mirror closed: nothing more will come
};

class LiveEncoder {
  public:
    // Throws ParameterError for bad settings. Starts its thread at once.
    LiveEncoder(const FrameMirror& mirror, StreamSettings settings);
    ~LiveEncoder();
    LiveEncoder(const LiveEncoder&) = delete;
    LiveEncoder& operator=(const LiveEncoder&) = delete;

    class Subscription;
    // The next packet this subscriber gets is a keyframe (one is requested now), then the
    // current cursor shape and position follow.
    [[nodiscard]] Subscription subscribe(StreamCallbacks callbacks);
    void request_keyframe();
    // Ends the encoder thread now (idempotent); no callback runs after it returns. For a server
    // shutting down while viewers are still attached (their sockets' executors are going away).
    void stop();

    const StreamSettings& settings() const { return settings_; }
    std::size_t subscribers() const;
    // WebCodecs codec string for h264 ("avc1.42e01f"...), "jpeg" otherwise.
    std::string codec_string() const;
    std::uint64_t frames_encoded() const { return frames_encoded_.load(); }

  private:
    struct Subscriber {
        std::uint64_t id;
        StreamCallbacks callbacks;
    };
    // The encoder thread: collect, publish the cursor, wait for the rate, encode, publish.
    void run();
    bool stop_requested();
    void collect(FrameSubscriber& source, std::optional<FrameUpdate>& pending);
    void end_stream();
    void publish_cursor_change(FrameUpdate& pending);
    bool wait_for_slot(FrameSubscriber& source, FrameUpdate& pending,
                       std::chrono::steady_clock::time_point slot);
    void encode_and_publish(const FrameUpdate& pending);
    void publish(const std::vector<StreamPacketPtr>& packets);
    void publish_cursor(const CursorState& cursor, int screen_width, int screen_height, bool shape);

    const FrameMirror& mirror_;
    StreamSettings settings_;

  public:
    struct Codec;  // jpeg or h264 (in the .cpp)

  private:
    std::unique_ptr<Codec> codec_;

    // Held while callbacks run, so unsubscribing waits for a running one; then mutex_.
    mutable std::mutex publish_mutex_;
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::string codec_string_;
    std::vector<Subscriber> subscribers_;
    std::uint64_t next_id_ = 1;
    bool stopping_ = false;
    std::atomic<bool> keyframe_requested_{true};
    std::atomic<std::uint64_t> frames_encoded_{0};
    std::shared_ptr<const std::string> last_cursor_shape_, last_cursor_position_;
    // The cursor shape subscribers have (the encoder thread's only).
    std::uint64_t shape_serial_ = 0;
    bool have_shape_ = false;
    std::mutex join_mutex_;  // stop() may be called from several threads
    std::thread thread_;
};

class LiveEncoder::Subscription {
  public:
    Subscription() = default;
    Subscription(LiveEncoder* encoder, std::uint64_t id) : encoder_(encoder), id_(id) {}
    ~Subscription() { reset(); }
    Subscription(Subscription&& other) noexcept { *this = std::move(other); }
    Subscription& operator=(Subscription&& other) noexcept;
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;
    // Unsubscribes; once it returns, no callback of this subscriber runs any more.
    void reset();

  private:
    LiveEncoder* encoder_ = nullptr;
    std::uint64_t id_ = 0;
};

// The live encoders of one sandbox, one per distinct settings (snapped to presets), shared by
// the viewers asking for them and stopped when the last one leaves; at most `max_encoders`.
class StreamHub {
  public:
    explicit StreamHub(const FrameMirror& mirror, std::size_t max_encoders = kMaxEncodersPerSandbox)
        : mirror_(mirror), max_encoders_(max_encoders) {}
    // The encoder of snap_to_preset(settings); throws TooManyEncoders when it would be one too
    // many.
    std::shared_ptr<LiveEncoder> encoder(const StreamSettings& settings);
    std::size_t active_encoders() const;
    // Stops every live encoder (see LiveEncoder::stop).
    void stop_all();

  private:
    const FrameMirror& mirror_;
    const std::size_t max_encoders_;
    mutable std::mutex mutex_;
    std::map<StreamSettings, std::weak_ptr<LiveEncoder>> encoders_;
};

}  // namespace deskbox::streaming
