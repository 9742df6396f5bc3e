#include "streaming/live/live_stream.hpp"

#include <malloc.h>

#include <boost/beast/core/detail/base64.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "streaming/image_encoder.hpp"
#include "streaming/video/h264_encoder.hpp"

namespace deskbox::streaming {

using Clock = std::chrono::steady_clock;

StreamCodec parse_stream_codec(std::string_view name) {
    if (name == "jpeg" || name == "jpg") return StreamCodec::jpeg;
    if (name == "h264") return StreamCodec::h264;
    throw ParameterError(
        "codec", "unknown codec '" + std::string(name.substr(0, 32)) + "' (expected h264 or jpeg)");
}

std::string_view codec_name(StreamCodec codec) {
    return codec == StreamCodec::h264 ? "h264" : "jpeg";
}

void validate(const StreamSettings& s) {
    if (s.max_width < 0 || s.max_width > kMaxOutputDimension)
        throw ParameterError(
            "width", "must be 0 (the screen's) or 1.." + std::to_string(kMaxOutputDimension));
    if (s.max_height < 0 || s.max_height > kMaxOutputDimension)
        throw ParameterError(
            "height", "must be 0 (the screen's) or 1.." + std::to_string(kMaxOutputDimension));
    if ((s.max_width > 0 && s.max_width < 16) || (s.max_height > 0 && s.max_height < 16))
        throw ParameterError(s.max_width > 0 && s.max_width < 16 ? "width" : "height",
                             "must be at least 16");
    if (s.max_fps < 1 || s.max_fps > 60) throw ParameterError("fps", "must be 1..60");
    if (s.quality < 1 || s.quality > 100) throw ParameterError("quality", "must be 1..100");
}

namespace {

// The preset of `presets` nearest to `value` (the lower one of two as near).
template <std::size_t N>
int nearest(int value, const int (&presets)[N]) {
    int best = presets[0];
    for (int preset : presets)
        if (std::abs(preset - value) < std::abs(best - value)) best = preset;
    return best;
}

}  // namespace

StreamSettings snap_to_preset(StreamSettings s) {
    static constexpr int kQualities[] = {30, 50, 70, 90};
    static constexpr int kFps[] = {5, 10, 15, 30, 60};
    s.quality = nearest(s.quality, kQualities);
    s.max_fps = nearest(s.max_fps, kFps);
    if (s.max_width > 0) s.max_width = nearest(s.max_width, kOutputSizePresets);
    if (s.max_height > 0) s.max_height = nearest(s.max_height, kOutputSizePresets);
    return s;
}

namespace {

void put16(std::string& out, std::size_t at, int v) {
    auto u = static_cast<std::uint16_t>(std::clamp(v, 0, 65535));
    out[at] = static_cast<char>(u & 0xff);
    out[at + 1] = static_cast<char>(u >> 8);
}

std::uint64_t now_us() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
}

// The output size for a screen: fits the settings' box, keeps the aspect ratio, never upscales.
std::pair<int, int> fit_output(int width, int height, const StreamSettings& s, bool even) {
    double scale = 1.0;
    if (s.max_width > 0) scale = std::min(scale, static_cast<double>(s.max_width) / width);
    if (s.max_height > 0) scale = std::min(scale, static_cast<double>(s.max_height) / height);
    int w = std::max(1, static_cast<int>(width * scale + 0.5));
    int h = std::max(1, static_cast<int>(height * scale + 0.5));
    if (even) {
        w = std::max(2, w & ~1);
        h = std::max(2, h & ~1);
    }
    return {w, h};
}

std::string base64(std::string_view in) {
    std::string out(boost::beast::detail::base64::encoded_size(in.size()), '\0');
    out.resize(boost::beast::detail::base64::encode(out.data(), in.data(), in.size()));
    return out;
}

// The pointer image as a PNG with alpha (un-premultiplied for the browser), base64.
std::string cursor_png_base64(const CursorImage& shape) {
    cv::Mat bgra(shape.height, shape.width, CV_8UC4);
    for (int y = 0; y < shape.height; ++y) {
        auto* row = bgra.ptr<std::uint8_t>(y);
        for (int x = 0; x < shape.width; ++x) {
            std::uint32_t p = shape.argb[static_cast<std::size_t>(y) * shape.width + x];
            unsigned a = p >> 24, r = (p >> 16) & 0xff, g = (p >> 8) & 0xff, b = p & 0xff;
            if (a > 0 && a < 255) {
                r = std::min(255u, r * 255 / a);
                g = std::min(255u, g * 255 / a);
                b = std::min(255u, b * 255 / a);
            }
            row[4 * x] = static_cast<std::uint8_t>(b);
            row[4 * x + 1] = static_cast<std::uint8_t>(g);
            row[4 * x + 2] = static_cast<std::uint8_t>(r);
            row[4 * x + 3] = static_cast<std::uint8_t>(a);
        }
    }
    std::vector<std::uint8_t> png;
    cv::imencode(".png", bgra, png);
    return base64(std::string_view(reinterpret_cast<const char*>(png.data()), png.size()));
}

// Merges a later update into an earlier one that was not encoded yet.
void merge_into(FrameUpdate& pending, FrameUpdate&& later) {
    pending.frame_changed |= later.frame_changed;
    pending.cursor_changed |= later.cursor_changed;
    pending.closed |= later.closed;
    if (later.changes.full || pending.snapshot.generation != later.snapshot.generation) {
        pending.changes.full = true;
        pending.changes.rects.clear();
    } else if (!pending.changes.full) {
        pending.changes.rects.insert(pending.changes.rects.end(), later.changes.rects.begin(),
                                     later.changes.rects.end());
    }
    pending.changes.version = later.changes.version;
    pending.snapshot = std::move(later.snapshot);
}

}  // namespace

std::string frame_packet(PacketKind kind, bool keyframe, int x, int y, int w, int h,
                         int output_width, int output_height, std::uint64_t capture_us,
                         std::string_view payload) {
    std::string out(kPacketHeaderSize, '\0');
    out[0] = static_cast<char>(kind);
    out[1] = static_cast<char>(keyframe ? 1 : 0);
    put16(out, 2, x);
    put16(out, 4, y);
    put16(out, 6, w);
    put16(out, 8, h);
    put16(out, 10, output_width);
    put16(out, 12, output_height);
    for (int i = 0; i < 8; ++i) out[16 + i] = static_cast<char>((capture_us >> (8 * i)) & 0xff);
    out.append(payload);
    return out;
}

// ---------------------------------------------------------------- PacketQueue

bool PacketQueue::push(StreamPacketPtr packet) {
    if (waiting_) {
        if (!packet->keyframe) {
            ++dropped_;
            return false;
        }
        waiting_ = false;
    }
    if (queue_.size() >= max_packets_ || bytes_ + packet->message.size() > max_bytes_) {
        // Behind: skip to the present. A keyframe restarts the queue at once.
        dropped_ += queue_.size();
        queue_.clear();
        bytes_ = 0;
        if (!packet->keyframe) {
            ++dropped_;
            waiting_ = true;
            return false;
        }
    }
    bytes_ += packet->message.size();
    queue_.push_back(std::move(packet));
    return true;
}

std::optional<StreamPacketPtr> PacketQueue::pop() {
    if (queue_.empty()) return std::nullopt;
    StreamPacketPtr p = std::move(queue_.front());
    queue_.pop_front();
    bytes_ -= p->message.size();
    return p;
}

// ---------------------------------------------------------------- codecs

struct LiveEncoder::Codec {
    virtual ~Codec() = default;
    virtual std::vector<StreamPacketPtr> encode(const FrameUpdate& update, bool keyframe) = 0;
    virtual std::string codec_string() const = 0;
    // The output size for the current screen (after the first encode).
    int output_width = 0, output_height = 0;
};

namespace {

class JpegCodec : public LiveEncoder::Codec {
  public:
    explicit JpegCodec(StreamSettings settings) : settings_(settings) {}

    std::vector<StreamPacketPtr> encode(const FrameUpdate& update, bool keyframe) override {
        const FrameSnapshot& snap = update.snapshot;
        auto [w, h] = fit_output(snap.width(), snap.height(), settings_, false);
        output_width = w;
        output_height = h;
        EncodeOptions options;
        options.format = ImageFormat::jpeg;
        options.quality = settings_.quality;
        const bool scaled = w != snap.width() || h != snap.height();
        std::uint64_t captured = now_us();
        std::vector<StreamPacketPtr> out;
        std::int64_t area = 0;
        for (const Rect& r : update.changes.rects)
            area += static_cast<std::int64_t>(r.width) * r.height;
        // Patches only pay when unscaled (a scaled patch would not line up exactly) and small.
        const bool whole = keyframe || scaled || update.changes.full ||
                           area * 2 > static_cast<std::int64_t>(snap.width()) * snap.height();
        if (whole) {
            if (scaled) {
                options.width = w;
                options.height = h;
            }
            auto image = encode_image(snap.frame->view(), options);
            auto message =
                frame_packet(PacketKind::jpeg, true, 0, 0, w, h, w, h, captured,
                             std::string_view(reinterpret_cast<const char*>(image.bytes.data()),
                                              image.bytes.size()));
            out.push_back(std::make_shared<StreamPacket>(StreamPacket{std::move(message), true}));
            return out;
        }
        for (const Rect& r : update.changes.rects) {
            if (r.width <= 0 || r.height <= 0) continue;
            options.region = r;
            auto image = encode_image(snap.frame->view(), options);
            auto message =
                frame_packet(PacketKind::jpeg, false, r.x, r.y, r.width, r.height, w, h, captured,
                             std::string_view(reinterpret_cast<const char*>(image.bytes.data()),
                                              image.bytes.size()));
            out.push_back(std::make_shared<StreamPacket>(StreamPacket{std::move(message), false}));
        }
        return out;
    }
    std::string codec_string() const override { return "jpeg"; }

  private:
    StreamSettings settings_;
};

class H264Codec : public LiveEncoder::Codec {
  public:
    explicit H264Codec(StreamSettings settings) : settings_(settings) {}

    std::vector<StreamPacketPtr> encode(const FrameUpdate& update, bool keyframe) override {
        const FrameSnapshot& snap = update.snapshot;
        auto [w, h] = fit_output(snap.width(), snap.height(), settings_, true);
        if (!encoder_ || generation_ != snap.generation || w != output_width ||
            h != output_height) {
            H264Encoder::Options o;
            o.input_width = snap.width();
            o.input_height = snap.height();
            o.output_width = w;
            o.output_height = h;
            o.max_fps = settings_.max_fps;
            // quality 1..100 onto CRF 46..16: screen text stays legible from about 60 up.
            o.crf = std::clamp(46 - settings_.quality * 30 / 100, 16, 46);
            encoder_.emplace(o);
            generation_ = snap.generation;
            output_width = w;
            output_height = h;
            keyframe = true;
        }
        // Timestamps only need to increase: milliseconds since the stream began.
        auto pts =
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_).count();
        pts = std::max<std::int64_t>(pts, last_pts_ + 1);
        last_pts_ = pts;
        std::uint64_t captured = now_us();
        std::vector<StreamPacketPtr> out;
        // What changed since the previous frame it encoded (every update is encoded or has no
        // change), so the encoder converts only that to YUV.
        std::optional<std::span<const Rect>> changed;
        if (!update.changes.full) changed = std::span<const Rect>(update.changes.rects);
        for (auto& unit : encoder_->encode(snap.frame->view(), pts, keyframe, changed)) {
            auto message =
                frame_packet(PacketKind::h264, unit.keyframe, 0, 0, w, h, w, h, captured,
                             std::string_view(reinterpret_cast<const char*>(unit.annexb.data()),
                                              unit.annexb.size()));
            out.push_back(
                std::make_shared<StreamPacket>(StreamPacket{std::move(message), unit.keyframe}));
        }
        return out;
    }
    std::string codec_string() const override {
        return encoder_ ? encoder_->codec_string() : std::string();
    }

  private:
    StreamSettings settings_;
    std::optional<H264Encoder> encoder_;
    std::uint64_t generation_ = 0;
    Clock::time_point start_ = Clock::now();
    std::int64_t last_pts_ = -1;
};

}  // namespace

// ---------------------------------------------------------------- LiveEncoder

LiveEncoder::LiveEncoder(const FrameMirror& mirror, StreamSettings settings)
    : mirror_(mirror), settings_(settings) {
    validate(settings_);
    if (settings_.codec == StreamCodec::h264)
        codec_ = std::make_unique<H264Codec>(settings_);
    else
        codec_ = std::make_unique<JpegCodec>(settings_);
    thread_ = std::thread([this] { run(); });
}

LiveEncoder::~LiveEncoder() {
    stop();
    // Its frame buffers and codec state are large and freed in pieces: hand the memory back
    // to the system now rather than keep it in the allocator's free lists.
    codec_.reset();
    subscribers_.clear();
    ::malloc_trim(0);
}

void LiveEncoder::stop() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    std::lock_guard joining(join_mutex_);
    if (thread_.joinable()) thread_.join();
}

LiveEncoder::Subscription LiveEncoder::subscribe(StreamCallbacks callbacks) {
    std::lock_guard publishing(publish_mutex_);
    std::lock_guard lock(mutex_);
    std::uint64_t id = next_id_++;
    // Catch the newcomer up on the pointer; the keyframe follows from the thread.
    if (last_cursor_shape_ && callbacks.cursor) callbacks.cursor(last_cursor_shape_);
    if (last_cursor_position_ && callbacks.cursor) callbacks.cursor(last_cursor_position_);
    subscribers_.push_back({id, std::move(callbacks)});
    keyframe_requested_ = true;
    wake_.notify_all();
    return Subscription(this, id);
}

void LiveEncoder::request_keyframe() {
    keyframe_requested_ = true;
    wake_.notify_all();
}

std::size_t LiveEncoder::subscribers() const {
    std::lock_guard lock(mutex_);
    return subscribers_.size();
}

std::string LiveEncoder::codec_string() const {
    std::lock_guard lock(mutex_);
    return codec_string_;
}

LiveEncoder::Subscription& LiveEncoder::Subscription::operator=(Subscription&& other) noexcept {
    if (this != &other) {
        reset();
        encoder_ = std::exchange(other.encoder_, nullptr);
        id_ = other.id_;
    }
    return *this;
}

void LiveEncoder::Subscription::reset() {
    if (!encoder_) return;
    std::lock_guard publishing(encoder_->publish_mutex_);
    std::lock_guard lock(encoder_->mutex_);
    auto& subs = encoder_->subscribers_;
    subs.erase(
        std::remove_if(subs.begin(), subs.end(), [&](const Subscriber& s) { return s.id == id_; }),
        subs.end());
    encoder_ = nullptr;
}

void LiveEncoder::publish(const std::vector<StreamPacketPtr>& packets) {
    std::lock_guard publishing(publish_mutex_);
    // Every subscriber gets this keyframe, including one that joined (and asked for a
    // keyframe) while it was being encoded: that request is served. Left set, it made the
    // next change a whole frame instead of a patch (LiveStreamTest.JpegKeyframe... under load).
    if (!packets.empty() && packets.front()->keyframe) keyframe_requested_ = false;
    for (const auto& s : subscribers_)
        if (s.callbacks.packet)
            for (const auto& p : packets) s.callbacks.packet(p);
}

void LiveEncoder::publish_cursor(const CursorState& cursor, int screen_width, int screen_height,
                                 bool shape) {
    if (screen_width <= 0 || screen_height <= 0) return;
    int out_w = codec_->output_width > 0 ? codec_->output_width : screen_width;
    int out_h = codec_->output_height > 0 ? codec_->output_height : screen_height;
    double sx = static_cast<double>(out_w) / screen_width,
           sy = static_cast<double>(out_h) / screen_height;
    std::shared_ptr<const std::string> shape_message, position_message;
    if (shape && cursor.shape) {
        const CursorImage& image = *cursor.shape;
        shape_message = std::make_shared<const std::string>(nlohmann::json{
            {"type", "cursor_shape"},
            {"width", image.width},
            {"height", image.height},
            {"xhot", image.xhot},
            {"yhot", image.yhot},
            {"scale", sx},
            {"png", image.width > 0 && image.height > 0 ? cursor_png_base64(image)
                                                        : ""}}.dump());
    }
    if (cursor.position_known) {
        position_message = std::make_shared<const std::string>(nlohmann::json{
            {"type", "cursor"},
            {"x", static_cast<int>(cursor.x * sx)},
            {"y", static_cast<int>(cursor.y * sy)}}.dump());
    }
    std::lock_guard publishing(publish_mutex_);
    {
        std::lock_guard lock(mutex_);
        if (shape_message) last_cursor_shape_ = shape_message;
        if (position_message) last_cursor_position_ = position_message;
    }
    for (const auto& s : subscribers_) {
        if (!s.callbacks.cursor) continue;
        if (shape_message) s.callbacks.cursor(shape_message);
        if (position_message) s.callbacks.cursor(position_message);
    }
}

void LiveEncoder::run() {
    FrameSubscriber source(mirror_);
    const auto interval = std::chrono::microseconds(1'000'000 / settings_.max_fps);
    Clock::time_point next_allowed = Clock::now();
    std::optional<FrameUpdate> pending;
    while (!stop_requested()) {
        collect(source, pending);
        if (!pending) continue;
        if (pending->closed) return end_stream();
        publish_cursor_change(*pending);
        // Nothing to encode: neither a changed frame nor a keyframe request, or no frame yet.
        if ((!pending->frame_changed && !keyframe_requested_.load()) || !pending->snapshot.frame) {
            pending.reset();
            continue;
        }
        if (Clock::now() < next_allowed) {
            if (!wait_for_slot(source, *pending, next_allowed)) return;
            if (pending->closed) continue;
        }
        next_allowed = std::max(next_allowed + interval, Clock::now());
        encode_and_publish(*pending);
        pending.reset();
    }
}

bool LiveEncoder::stop_requested() {
    std::lock_guard lock(mutex_);
    return stopping_;
}

// Collects changes; a pending keyframe request encodes the current frame even unchanged.
void LiveEncoder::collect(FrameSubscriber& source, std::optional<FrameUpdate>& pending) {
    auto update = source.next(std::chrono::milliseconds(50));
    if (update) {
        if (pending)
            merge_into(*pending, std::move(*update));
        else
            pending = std::move(update);
    } else if (keyframe_requested_ && !pending) {
        pending = source.poll();
    }
}

// The mirror closed: tells every subscriber, then waits to be stopped.
void LiveEncoder::end_stream() {
    {
        std::lock_guard publishing(publish_mutex_);
        for (const auto& s : subscribers_)
            if (s.callbacks.end) s.callbacks.end();
    }
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return stopping_; });
}

void LiveEncoder::publish_cursor_change(FrameUpdate& pending) {
    if (!pending.cursor_changed && have_shape_) return;
    const auto& cursor = pending.snapshot.cursor;
    const bool new_shape = cursor.shape && (!have_shape_ || cursor.shape->serial != shape_serial_);
    if (new_shape) {
        shape_serial_ = cursor.shape->serial;
        have_shape_ = true;
    }
    if (pending.cursor_changed || new_shape)
        publish_cursor(cursor, pending.snapshot.width(), pending.snapshot.height(), new_shape);
    pending.cursor_changed = false;
}

// Rate limit: waits out the interval, taking in what changes meanwhile (latest wins). False if
// the encoder is stopped meanwhile.
bool LiveEncoder::wait_for_slot(FrameSubscriber& source, FrameUpdate& pending,
                                Clock::time_point slot) {
    std::unique_lock lock(mutex_);
    wake_.wait_until(lock, slot, [&] { return stopping_; });
    if (stopping_) return false;
    lock.unlock();
    auto more = source.poll();
    if (more.frame_changed || more.cursor_changed || more.closed)
        merge_into(pending, std::move(more));
    return true;
}

void LiveEncoder::encode_and_publish(const FrameUpdate& pending) {
    const bool keyframe = keyframe_requested_.exchange(false);
    std::vector<StreamPacketPtr> packets;
    try {
        packets = codec_->encode(pending, keyframe);
    } catch (const std::exception&) {
        // A codec failure drops this frame; the next keyframe request retries from scratch.
        return;
    }
    {
        std::lock_guard lock(mutex_);
        codec_string_ = codec_->codec_string();
    }
    frames_encoded_.fetch_add(1);
    publish(packets);
}

// ---------------------------------------------------------------- StreamHub

std::shared_ptr<LiveEncoder> StreamHub::encoder(const StreamSettings& asked) {
    const StreamSettings settings = snap_to_preset(asked);
    std::lock_guard lock(mutex_);
    for (auto it = encoders_.begin(); it != encoders_.end();)
        it = it->second.expired() ? encoders_.erase(it) : std::next(it);
    if (auto it = encoders_.find(settings); it != encoders_.end())
        if (auto existing = it->second.lock()) return existing;
    if (encoders_.size() >= max_encoders_) {
        std::string running;
        for (const auto& [s, weak] : encoders_)
            running += (running.empty() ? "" : ", ") + std::string(codec_name(s.codec)) +
                       " width=" + std::to_string(s.max_width) +
                       " height=" + std::to_string(s.max_height) +
                       " fps=" + std::to_string(s.max_fps) +
                       " quality=" + std::to_string(s.quality);
        throw TooManyEncoders("this sandbox runs " + std::to_string(encoders_.size()) +
                              " live encoders already, its maximum; ask for the settings of one "
                              "of them to share it (" +
                              running + ")");
    }
    auto created = std::make_shared<LiveEncoder>(mirror_, settings);
    encoders_[settings] = created;
    return created;
}

void StreamHub::stop_all() {
    std::vector<std::shared_ptr<LiveEncoder>> live;
    {
        std::lock_guard lock(mutex_);
        for (auto& [settings, weak] : encoders_)
            if (auto e = weak.lock()) live.push_back(std::move(e));
    }
    for (auto& e : live) e->stop();
}

std::size_t StreamHub::active_encoders() const {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& [settings, weak] : encoders_)
        if (!weak.expired()) ++n;
    return n;
}

}  // namespace deskbox::streaming
