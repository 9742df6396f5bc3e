#include "streaming/video/recorder.hpp"

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "streaming/video/ffmpeg_util.hpp"

extern "C" {
#include <libavutil/dict.h>
}

namespace deskbox::streaming {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxRecordingFps = 240;
constexpr int kMaxFragmentMs = 3600 * 1000;

struct FileCloser {
    void operator()(std::FILE* file) const { std::fclose(file); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

struct DictionaryFree {
    AVDictionary* dictionary = nullptr;
    DictionaryFree() = default;
    DictionaryFree(const DictionaryFree&) = delete;
    DictionaryFree& operator=(const DictionaryFree&) = delete;
    ~DictionaryFree() { av_dict_free(&dictionary); }
};

// The encoder's ParameterError with the field renamed "video.<field>", as the caller wrote it.
[[noreturn]] void rethrow_as_video(const ParameterError& error) {
    std::string what = error.what();
    std::string reason = what.substr(std::min(what.size(), error.field().size() + 2));
    throw ParameterError("video." + error.field(), reason);
}

bool cursor_drawable(const CursorState& cursor) {
    return cursor.shape != nullptr && cursor.position_known;
}

}  // namespace

struct Recorder::State {
    const FrameMirror* mirror = nullptr;
    Options options;
    Clock::time_point start;

    // Owned by the recording thread once it runs.
    OutputFormatPtr format;
    AVStream* stream = nullptr;
    bool header_written = false;
    std::vector<std::uint8_t> stream_extradata;
    std::optional<H264Encoder> encoder;
    std::optional<EncodedPacket> held;  // written once its duration is known
    PacketPtr packet;
    std::vector<std::uint8_t> composited;  // the frame with the pointer drawn in
    std::int64_t last_pts = -1;
    std::uint64_t frames = 0;

    std::mutex events_mutex;
    FilePtr events;  // null when there is no events track or the recording ended

    mutable std::mutex mutex;
    mutable std::condition_variable changed;
    bool dirty = true;  // the mirror changed since the last look (true: look at once)
    bool stop_requested = false;
    Stats stats;

    std::mutex stop_mutex;  // one stop() joins
    FrameMirror::Listener listener;
    std::thread thread;

    std::int64_t ms_since_start(Clock::time_point when) const {
        return std::chrono::duration_cast<std::chrono::milliseconds>(when - start).count();
    }

    H264Encoder make_encoder(int input_width, int input_height) const {
        H264Encoder::Options video = options.video;
        video.input_width = input_width;
        video.input_height = input_height;
        video.max_fps = options.max_fps;
        video.global_header = true;
        if (header_written) {  // a new screen size: keep the track's size
            video.output_width = stream->codecpar->width;
            video.output_height = stream->codecpar->height;
        }
        try {
            return H264Encoder(video);
        } catch (const ParameterError& error) {
            rethrow_as_video(error);
        }
    }

    void run();
    void encode(const FrameSnapshot& snapshot);
    void write_header();
    void write(const EncodedPacket& encoded, std::int64_t duration_ms);
    void finish(Clock::time_point end);
    void update_stats(std::uint64_t frames, std::int64_t duration_ms);
};

Recorder::Recorder(const FrameMirror& mirror, Options options) : state_(std::make_unique<State>()) {
    State& s = *state_;
    if (options.path.empty()) throw ParameterError("path", "must not be empty");
    if (options.max_fps < 1 || options.max_fps > kMaxRecordingFps)
        throw ParameterError("max_fps", "must be 1.." + std::to_string(kMaxRecordingFps) +
                                            ", got " + std::to_string(options.max_fps));
    if (options.fragment_ms < 0 || options.fragment_ms > kMaxFragmentMs)
        throw ParameterError("fragment_ms", "must be 0.." + std::to_string(kMaxFragmentMs) +
                                                ", got " + std::to_string(options.fragment_ms));
    s.mirror = &mirror;
    s.options = std::move(options);

    // Check the video options now rather than on the recording thread: with the screen's size
    // when there is one (that encoder is kept), else with a stand-in size.
    FrameSnapshot first = mirror.snapshot();
    if (first.frame) {
        s.encoder.emplace(s.make_encoder(first.width(), first.height()));
    } else {
        s.make_encoder(64, 64);
    }

    AVFormatContext* raw = nullptr;
    check_av(avformat_alloc_output_context2(&raw, nullptr, "mp4", s.options.path.c_str()),
             "recorder: MP4 muxer");
    s.format.reset(raw);
    int status = avio_open(&s.format->pb, s.options.path.c_str(), AVIO_FLAG_WRITE);
    if (status < 0)
        throw ParameterError("path",
                             "cannot create \"" + s.options.path + "\": " + av_error_text(status));
    if (!s.options.events_path.empty()) {
        s.events.reset(std::fopen(s.options.events_path.c_str(), "w"));
        if (!s.events)
            throw ParameterError("events_path", "cannot create \"" + s.options.events_path +
                                                    "\": " + std::strerror(errno));
    }
    s.packet.reset(av_packet_alloc());
    if (!s.packet) throw std::bad_alloc();

    s.start = Clock::now();
    State* state = &s;
    s.listener = mirror.listen([state] {
        {
            std::lock_guard lock(state->mutex);
            state->dirty = true;
        }
        state->changed.notify_all();
    });
    s.thread = std::thread([state] { state->run(); });
}

Recorder::~Recorder() {
    stop();
}

Recorder::Stats Recorder::stop() {
    State& s = *state_;
    {
        std::lock_guard lock(s.mutex);
        s.stop_requested = true;
    }
    s.changed.notify_all();
    {
        std::lock_guard lock(s.stop_mutex);
        if (s.thread.joinable()) s.thread.join();
        s.listener.reset();
    }
    return stats();
}

bool Recorder::wait(std::chrono::milliseconds timeout) const {
    std::unique_lock lock(state_->mutex);
    return state_->changed.wait_for(lock, timeout, [&] { return state_->stats.finished; });
}

Recorder::Stats Recorder::stats() const {
    std::lock_guard lock(state_->mutex);
    return state_->stats;
}

bool Recorder::add_event(const nlohmann::json& event) {
    if (!event.is_object())
        throw ParameterError("event",
                             std::string("must be a JSON object, got ") + event.type_name());
    if (event.contains("t_ms")) throw ParameterError("event", "\"t_ms\" is set by the recorder");
    State& s = *state_;
    std::int64_t t_ms = s.ms_since_start(Clock::now());
    // t_ms first, then the event's members: `{"t_ms":N` + `,"a":1}`. Invalid UTF-8 in the
    // event's strings is replaced rather than failing the line.
    std::string body = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::string line =
        "{\"t_ms\":" + std::to_string(t_ms) + (body.size() > 2 ? "," + body.substr(1) : "}") + "\n";
    std::lock_guard lock(s.events_mutex);
    if (!s.events) return false;
    // One line per write and flushed, so a crash leaves whole lines behind.
    return std::fputs(line.c_str(), s.events.get()) >= 0 && std::fflush(s.events.get()) == 0;
}

void Recorder::State::update_stats(std::uint64_t frames, std::int64_t duration_ms) {
    std::uint64_t bytes = 0;
    if (format && format->pb)
        bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(0, avio_tell(format->pb)));
    std::lock_guard lock(mutex);
    stats.frames = frames;
    stats.bytes = bytes;
    stats.duration_ms = duration_ms;
}

void Recorder::State::run() {
    FrameSubscriber subscriber(*mirror);
    const auto min_interval = std::chrono::microseconds(1'000'000 / options.max_fps);
    Clock::time_point next_allowed = start;
    try {
        while (true) {
            bool stopping = false;
            {
                std::unique_lock lock(mutex);
                changed.wait(lock, [&] { return dirty || stop_requested; });
                // At most max_fps: changes that come sooner wait, and the latest one wins.
                changed.wait_until(lock, next_allowed, [&] { return stop_requested; });
                stopping = stop_requested;
                dirty = false;
            }
            // On stop, one last look so the file ends with the screen as it was at the stop;
            // not sooner than max_fps allows either (the level assumes it): at most one frame
            // interval of waiting.
            if (stopping) std::this_thread::sleep_until(next_allowed);
            FrameUpdate update = subscriber.poll();
            bool cursor_matters = options.draw_cursor && update.cursor_changed &&
                                  cursor_drawable(update.snapshot.cursor);
            if (update.snapshot.frame && (update.frame_changed || cursor_matters || frames == 0)) {
                Clock::time_point sampled = Clock::now();
                encode(update.snapshot);
                next_allowed = sampled + min_interval;
            }
            if (stopping || update.closed) break;
        }
        finish(Clock::now());
    } catch (const std::exception& error) {
        {
            std::lock_guard lock(mutex);
            stats.error = error.what();
        }
        try {
            finish(Clock::now());
        } catch (const std::exception&) {
            format.reset();  // closes the file; what was flushed stays playable
        }
    }
    {
        std::lock_guard lock(mutex);
        stats.finished = true;
    }
    changed.notify_all();
}

void Recorder::State::encode(const FrameSnapshot& snapshot) {
    const Frame& frame = *snapshot.frame;
    std::int64_t pts = last_pts < 0 ? 0 : std::max(last_pts + 1, ms_since_start(Clock::now()));
    if (!encoder || encoder->options().input_width != frame.width ||
        encoder->options().input_height != frame.height) {
        encoder.reset();
        encoder.emplace(make_encoder(frame.width, frame.height));
        if (header_written && encoder->extradata() != stream_extradata)
            throw std::runtime_error(
                "recorder: the screen's new size " + std::to_string(frame.width) + "x" +
                std::to_string(frame.height) + " changed the H.264 headers of the track");
    }
    ImageView view = frame.view();
    if (options.draw_cursor && cursor_drawable(snapshot.cursor)) {
        composited.assign(frame.pixels.begin(), frame.pixels.end());
        composite_cursor(composited.data(), frame.width, frame.height, frame.stride(), 0, 0,
                         snapshot.cursor);
        view.data = composited.data();
    }
    std::vector<EncodedPacket> packets = encoder->encode(view, pts);
    if (!header_written) write_header();
    for (EncodedPacket& packet : packets) {
        if (held) write(*held, packet.pts_ms - held->pts_ms);
        held = std::move(packet);
    }
    last_pts = pts;
    update_stats(++frames, pts);
}

void Recorder::State::write_header() {
    stream = avformat_new_stream(format.get(), nullptr);
    if (!stream) throw std::bad_alloc();
    stream->time_base = AVRational{1, 1000};
    AVCodecParameters* parameters = stream->codecpar;
    parameters->codec_type = AVMEDIA_TYPE_VIDEO;
    parameters->codec_id = AV_CODEC_ID_H264;
    parameters->format = AV_PIX_FMT_YUV420P;
    parameters->width = encoder->output_width();
    parameters->height = encoder->output_height();
    parameters->level = encoder->level_idc();
    parameters->profile = encoder->options().profile == H264Profile::main
                              ? FF_PROFILE_H264_MAIN
                              : FF_PROFILE_H264_CONSTRAINED_BASELINE;
    parameters->color_range = AVCOL_RANGE_MPEG;
    parameters->color_space = AVCOL_SPC_BT709;
    parameters->color_primaries = AVCOL_PRI_BT709;
    parameters->color_trc = AVCOL_TRC_BT709;
    stream_extradata = encoder->extradata();
    parameters->extradata = static_cast<std::uint8_t*>(
        av_mallocz(stream_extradata.size() + AV_INPUT_BUFFER_PADDING_SIZE));
    if (!parameters->extradata) throw std::bad_alloc();
    std::memcpy(parameters->extradata, stream_extradata.data(), stream_extradata.size());
    parameters->extradata_size = static_cast<int>(stream_extradata.size());

    DictionaryFree muxer_options;
    av_dict_set(&muxer_options.dictionary, "movflags", "frag_keyframe+empty_moov+default_base_moof",
                0);
    if (options.fragment_ms > 0)
        av_dict_set_int(&muxer_options.dictionary, "frag_duration",
                        static_cast<std::int64_t>(options.fragment_ms) * 1000, 0);
    check_av(avformat_write_header(format.get(), &muxer_options.dictionary),
             "recorder: writing the MP4 header");
    header_written = true;
    avio_flush(format->pb);
}

void Recorder::State::write(const EncodedPacket& encoded, std::int64_t duration_ms) {
    AVPacket* out = packet.get();
    check_av(av_new_packet(out, static_cast<int>(encoded.annexb.size())), "recorder: packet");
    PacketUnref unref(out);
    std::memcpy(out->data, encoded.annexb.data(), encoded.annexb.size());
    out->pts = out->dts = encoded.pts_ms;
    out->duration = std::max<std::int64_t>(1, duration_ms);
    if (encoded.keyframe) out->flags |= AV_PKT_FLAG_KEY;
    out->stream_index = stream->index;
    av_packet_rescale_ts(out, AVRational{1, 1000}, stream->time_base);
    check_av(av_write_frame(format.get(), out), "recorder: writing a frame");
    // Finished fragments go to the file now, so a copy or a crash keeps them.
    avio_flush(format->pb);
}

void Recorder::State::finish(Clock::time_point end) {
    std::int64_t end_ms = std::max(last_pts + 1, ms_since_start(end));
    if (header_written) {
        if (held) {
            EncodedPacket last = std::move(*held);
            held.reset();
            write(last, end_ms - last.pts_ms);
        }
        check_av(av_write_trailer(format.get()), "recorder: writing the MP4 trailer");
    }
    format.reset();  // closes the file
    encoder.reset();
    {
        std::lock_guard lock(events_mutex);
        events.reset();
    }
    std::error_code error;
    auto size = std::filesystem::file_size(options.path, error);
    std::lock_guard lock(mutex);
    if (!error) stats.bytes = size;
    stats.duration_ms = last_pts < 0 ? 0 : end_ms;
}

}  // namespace deskbox::streaming
