#include "streaming/video/h264_encoder.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string_view>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

#include <libyuv/convert_from_argb.h>

#include "streaming/video/ffmpeg_util.hpp"

namespace deskbox::streaming {
namespace {

constexpr int kMaxInputDimension = 16384;
constexpr int kMaxEncoderFps = 240;
constexpr int kMaxThreads = 64;
constexpr int kMaxBitrateKbps = 800000;  // level 6.2's limit
constexpr std::array<std::string_view, 10> kPresets = {
    "ultrafast", "superfast", "veryfast", "faster",   "fast",
    "medium",    "slow",      "slower",   "veryslow", "placebo"};

// H.264 Table A-1: level_idc, MaxMBPS (macroblocks/s), MaxFS (macroblocks), MaxBR (kbit/s,
// baseline and main).
struct Level {
    int idc;
    long long max_mbps;
    long long max_fs;
    long long max_br_kbps;
};
constexpr std::array<Level, 19> kLevels = {{
    {10, 1485, 99, 64},
    {11, 3000, 396, 192},
    {12, 6000, 396, 384},
    {13, 11880, 396, 768},
    {20, 11880, 396, 2000},
    {21, 19800, 792, 4000},
    {22, 20250, 1620, 4000},
    {30, 40500, 1620, 10000},
    {31, 108000, 3600, 14000},
    {32, 216000, 5120, 20000},
    {40, 245760, 8192, 20000},
    {41, 245760, 8192, 50000},
    {42, 522240, 8704, 50000},
    {50, 589824, 22080, 135000},
    {51, 983040, 36864, 240000},
    {52, 2073600, 36864, 240000},
    {60, 4177920, 139264, 240000},
    {61, 8355840, 139264, 480000},
    {62, 16711680, 139264, 800000},
}};

std::string range_error(long long low, long long high, long long got) {
    return "must be " + std::to_string(low) + ".." + std::to_string(high) + ", got " +
           std::to_string(got);
}

void check_range(const char* field, long long value, long long low, long long high) {
    if (value < low || value > high) throw ParameterError(field, range_error(low, high, value));
}

int level_for(int width, int height, int fps, long long bitrate_kbps) {
    long long mbs_wide = (width + 15) / 16;
    long long mbs_high = (height + 15) / 16;
    long long frame_mbs = mbs_wide * mbs_high;
    for (const Level& level : kLevels) {
        // A side may not exceed sqrt(8 * MaxFS) macroblocks (A.3.1 f/g).
        if (frame_mbs > level.max_fs || mbs_wide * mbs_wide > 8 * level.max_fs ||
            mbs_high * mbs_high > 8 * level.max_fs)
            continue;
        if (frame_mbs * fps > level.max_mbps || bitrate_kbps > level.max_br_kbps) continue;
        return level.idc;
    }
    throw ParameterError("output_width", std::to_string(width) + "x" + std::to_string(height) +
                                             " at " + std::to_string(fps) +
                                             " fps exceeds H.264 level 6.2");
}

std::string codec_string_of(int profile_idc, int constraints, int level_idc) {
    char text[16];
    std::snprintf(text, sizeof text, "avc1.%02X%02X%02X", profile_idc & 0xff, constraints & 0xff,
                  level_idc & 0xff);
    return text;
}

// The codec string from the first SPS in `stream` (profile_idc, constraint flags and level_idc
// are its first three bytes after the NAL header), or nullopt if it has none.
std::optional<std::string> codec_string_from_sps(std::span<const std::uint8_t> stream) {
    for (auto nal : split_annexb(stream))
        if (nal.size() >= 4 && (nal[0] & 0x1f) == 7) return codec_string_of(nal[1], nal[2], nal[3]);
    return std::nullopt;
}

int even_down(int value) {
    return value & ~1;
}

}  // namespace

std::vector<std::span<const std::uint8_t>> split_annexb(std::span<const std::uint8_t> stream) {
    std::vector<std::span<const std::uint8_t>> units;
    std::size_t n = stream.size();
    // Positions just after each 00 00 01 start code (a 4-byte 00 00 00 01 ends the same way).
    std::vector<std::size_t> starts;
    for (std::size_t i = 0; i + 2 < n; ++i) {
        if (stream[i] == 0 && stream[i + 1] == 0 && stream[i + 2] == 1) {
            starts.push_back(i + 3);
            i += 2;
        }
    }
    for (std::size_t k = 0; k < starts.size(); ++k) {
        std::size_t begin = starts[k];
        std::size_t end = k + 1 < starts.size() ? starts[k + 1] - 3 : n;
        // Trailing zeros belong to the next start code (the 4-byte form) or are padding.
        while (end > begin && stream[end - 1] == 0) --end;
        if (end > begin) units.push_back(stream.subspan(begin, end - begin));
    }
    return units;
}

int h264_level_for(int width, int height, int fps) {
    return level_for(width, height, fps, 0);
}

struct H264Encoder::State {
    Options options;
    int source_width = 0;  // the part of the input fed to swscale (crops an odd last column/row)
    int source_height = 0;
    int output_width = 0;
    int output_height = 0;
    bool scaled = false;  // through swscale; else libyuv converts at the same size
    int level = 0;
    std::string codec;
    CodecContextPtr context;
    FramePtr frame;
    PacketPtr packet;
    SwsContextPtr scaler;
    std::vector<std::uint8_t> extradata;
    std::optional<std::int64_t> last_pts;
    std::optional<std::int64_t> last_keyframe_pts;
    bool codec_confirmed = false;  // codec was read from the stream's SPS
    bool converted_once = false;   // the YUV frame holds a whole converted frame

    // BGRX to the YUV frame within `rect`, widened to even edges (4:2:0 shares a chroma
    // sample between 2x2 pixels) and kept inside the output.
    void convert(const ImageView& bgrx, const Rect& rect);

    // The constructor's steps, in order.
    void choose_sizes(const Options& o);
    void choose_level_and_codec(const Options& o);
    void open_codec(const Options& o);
    void configure_context(const Options& o);
    void configure_x264(const Options& o);
    void take_global_headers();
    void allocate_frame();
    void create_scaler();
};

namespace {

// Throws ParameterError naming the first bad option.
void check_options(const H264Encoder::Options& options) {
    check_range("input_width", options.input_width, 2, kMaxInputDimension);
    check_range("input_height", options.input_height, 2, kMaxInputDimension);
    check_range("output_width", options.output_width, 0, kMaxInputDimension);
    check_range("output_height", options.output_height, 0, kMaxInputDimension);
    if (options.output_width == 1) throw ParameterError("output_width", "must be 0 or at least 2");
    if (options.output_height == 1)
        throw ParameterError("output_height", "must be 0 or at least 2");
    check_range("max_fps", options.max_fps, 1, kMaxEncoderFps);
    check_range("crf", options.crf, 0, 51);
    check_range("bitrate_kbps", options.bitrate_kbps, 0, kMaxBitrateKbps);
    check_range("max_bitrate_kbps", options.max_bitrate_kbps, 0, kMaxBitrateKbps);
    if (options.max_bitrate_kbps > 0 && options.max_bitrate_kbps < options.bitrate_kbps)
        throw ParameterError("max_bitrate_kbps", "must be at least bitrate_kbps (" +
                                                     std::to_string(options.bitrate_kbps) +
                                                     "), got " +
                                                     std::to_string(options.max_bitrate_kbps));
    bool known_preset = false;
    for (auto name : kPresets) known_preset |= options.preset == name;
    if (!known_preset)
        throw ParameterError("preset", "unknown x264 preset \"" + options.preset +
                                           "\" (ultrafast, superfast, veryfast, faster, fast, "
                                           "medium, slow, slower, veryslow, placebo)");
    check_range("keyframe_interval_ms", options.keyframe_interval_ms, 0, INT_MAX);
    check_range("threads", options.threads, 0, kMaxThreads);
}

}  // namespace

H264Encoder::H264Encoder(Options options) : state_(std::make_unique<State>()) {
    check_options(options);
    State& s = *state_;
    s.choose_sizes(options);
    s.choose_level_and_codec(options);
    s.open_codec(options);
    s.allocate_frame();
    if (s.scaled) s.create_scaler();
    s.options = std::move(options);
}

void H264Encoder::State::choose_sizes(const Options& o) {
    output_width = even_down(o.output_width ? o.output_width : o.input_width);
    output_height = even_down(o.output_height ? o.output_height : o.input_height);
    bool same_size =
        output_width == even_down(o.input_width) && output_height == even_down(o.input_height);
    source_width = same_size ? output_width : o.input_width;
    source_height = same_size ? output_height : o.input_height;
    scaled = !same_size;
}

void H264Encoder::State::choose_level_and_codec(const Options& o) {
    long long peak_kbps = std::max(o.bitrate_kbps, o.max_bitrate_kbps);
    level = level_for(output_width, output_height, o.max_fps, peak_kbps);
    bool baseline = o.profile == H264Profile::constrained_baseline;
    // x264 signals the profile the stream needs, not the one asked for: main only with CABAC
    // (every preset but ultrafast), else constrained baseline (constraint_set0+1; main sets
    // constraint_set1). encode() confirms this from the first SPS.
    bool signals_main = !baseline && o.preset != "ultrafast";
    codec = signals_main ? codec_string_of(0x4D, 0x40, level) : codec_string_of(0x42, 0xC0, level);
}

void H264Encoder::State::open_codec(const Options& o) {
    const AVCodec* encoder = avcodec_find_encoder_by_name("libx264");
    if (!encoder) throw std::runtime_error("H.264: FFmpeg was built without libx264");
    context.reset(avcodec_alloc_context3(encoder));
    frame.reset(av_frame_alloc());
    packet.reset(av_packet_alloc());
    if (!context || !frame || !packet) throw std::bad_alloc();
    configure_context(o);
    configure_x264(o);
    check_av(avcodec_open2(context.get(), encoder, nullptr), "H.264: opening libx264");
    if (o.global_header) take_global_headers();
}

// Size, timing, level, colour signalling and rate control.
void H264Encoder::State::configure_context(const Options& o) {
    AVCodecContext* c = context.get();
    c->width = output_width;
    c->height = output_height;
    c->pix_fmt = AV_PIX_FMT_YUV420P;
    c->time_base = AVRational{1, 1000};
    c->framerate = AVRational{o.max_fps, 1};
    c->max_b_frames = 0;
    // Our own timer places the periodic IDRs (on timestamps); x264's keyint counts frames.
    c->gop_size = 1 << 30;  // x264's "infinite"
    c->level = level;
    c->thread_count = o.threads;
    c->color_range = AVCOL_RANGE_MPEG;
    // Screen pixels are sRGB; the matrix is BT.601's, as libyuv converts.
    c->colorspace = AVCOL_SPC_SMPTE170M;
    c->color_primaries = AVCOL_PRI_BT709;
    c->color_trc = AVCOL_TRC_IEC61966_2_1;
    if (o.global_header) c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if (o.bitrate_kbps > 0) {
        c->bit_rate = o.bitrate_kbps * 1000LL;
        int peak = std::max(o.bitrate_kbps, o.max_bitrate_kbps);
        c->rc_max_rate = peak * 1000LL;
        c->rc_buffer_size = peak * 1000;  // one second of VBV
    } else {
        check_av(av_opt_set_double(c->priv_data, "crf", o.crf, 0), "H.264: crf");
        if (o.max_bitrate_kbps > 0) {
            c->rc_max_rate = o.max_bitrate_kbps * 1000LL;
            c->rc_buffer_size = o.max_bitrate_kbps * 1000;
        }
    }
}

// libx264's private options: preset, zerolatency, profile, IDR keyframes, in-band headers.
void H264Encoder::State::configure_x264(const Options& o) {
    void* x264 = context->priv_data;
    bool baseline = o.profile == H264Profile::constrained_baseline;
    check_av(av_opt_set(x264, "preset", o.preset.c_str(), 0), "H.264: preset");
    check_av(av_opt_set(x264, "tune", "zerolatency", 0), "H.264: tune");
    check_av(av_opt_set(x264, "profile", baseline ? "baseline" : "main", 0), "H.264: profile");
    check_av(av_opt_set_int(x264, "forced-idr", 1, 0), "H.264: forced-idr");
    // Headers in every IDR for late joiners (libavcodec turns them off with global headers);
    // x264's info lines would otherwise go to stderr for every viewer that connects.
    std::string params = o.global_header ? "log=1" : "log=1:repeat-headers=1";
    check_av(av_opt_set(x264, "x264-params", params.c_str(), 0), "H.264: x264-params");
}

// With global_header, SPS/PPS come once, from the opened codec; they also confirm the codec.
void H264Encoder::State::take_global_headers() {
    const AVCodecContext* c = context.get();
    if (!c->extradata || c->extradata_size <= 0)
        throw std::runtime_error("H.264: libx264 gave no global headers");
    extradata.assign(c->extradata, c->extradata + c->extradata_size);
    if (auto from_sps = codec_string_from_sps(extradata)) {
        codec = *from_sps;
        codec_confirmed = true;
    }
}

void H264Encoder::State::allocate_frame() {
    frame->format = AV_PIX_FMT_YUV420P;
    frame->width = output_width;
    frame->height = output_height;
    check_av(av_frame_get_buffer(frame.get(), 0), "H.264: frame buffer");
}

void H264Encoder::State::create_scaler() {
    // Downscaling averages (area) so text stays legible; upscaling is bicubic.
    bool shrinking = output_width < source_width || output_height < source_height;
    scaler.reset(sws_getContext(source_width, source_height, AV_PIX_FMT_BGR0, output_width,
                                output_height, AV_PIX_FMT_YUV420P,
                                shrinking ? SWS_AREA : SWS_BICUBIC, nullptr, nullptr, nullptr));
    if (!scaler) throw std::runtime_error("H.264: swscale refused the conversion");
    // RGB in (full range), BT.601 limited-range YUV out: what libyuv gives on the direct
    // path and what the VUI says.
    const int* bt601 = sws_getCoefficients(SWS_CS_ITU601);
    sws_setColorspaceDetails(scaler.get(), bt601, 1, bt601, 0, 0, 1 << 16, 1 << 16);
}

void H264Encoder::State::convert(const ImageView& bgrx, const Rect& rect) {
    const int x0 = std::max(0, rect.x) & ~1;
    const int y0 = std::max(0, rect.y) & ~1;
    const int x1 = std::min(output_width, (rect.right() + 1) & ~1);
    const int y1 = std::min(output_height, (rect.bottom() + 1) & ~1);
    if (x1 <= x0 || y1 <= y0) return;
    AVFrame* f = frame.get();
    // libyuv's "ARGB" is B, G, R, A in memory: our BGRX; X is ignored.
    libyuv::ARGBToI420(bgrx.data + static_cast<std::size_t>(y0) * bgrx.stride +
                           static_cast<std::size_t>(x0) * kBytesPerPixel,
                       static_cast<int>(bgrx.stride), f->data[0] + y0 * f->linesize[0] + x0,
                       f->linesize[0], f->data[1] + y0 / 2 * f->linesize[1] + x0 / 2,
                       f->linesize[1], f->data[2] + y0 / 2 * f->linesize[2] + x0 / 2,
                       f->linesize[2], x1 - x0, y1 - y0);
}

H264Encoder::~H264Encoder() = default;
H264Encoder::H264Encoder(H264Encoder&&) noexcept = default;
H264Encoder& H264Encoder::operator=(H264Encoder&&) noexcept = default;

std::vector<EncodedPacket> H264Encoder::encode(const ImageView& bgrx, std::int64_t pts_ms,
                                               bool force_keyframe,
                                               std::optional<std::span<const Rect>> changed) {
    State& s = *state_;
    const Options& o = s.options;
    if (bgrx.empty())
        throw ParameterError("image", "is empty (expected " + std::to_string(o.input_width) + "x" +
                                          std::to_string(o.input_height) + ")");
    if (bgrx.width != o.input_width || bgrx.height != o.input_height)
        throw ParameterError("image", "is " + std::to_string(bgrx.width) + "x" +
                                          std::to_string(bgrx.height) + ", the encoder takes " +
                                          std::to_string(o.input_width) + "x" +
                                          std::to_string(o.input_height));
    if (bgrx.stride < static_cast<std::size_t>(bgrx.width) * kBytesPerPixel ||
        bgrx.stride > static_cast<std::size_t>(INT_MAX))
        throw ParameterError("image", "stride " + std::to_string(bgrx.stride) +
                                          " does not fit the width " + std::to_string(bgrx.width));
    if (s.last_pts && pts_ms <= *s.last_pts)
        throw ParameterError("pts_ms", "must increase: got " + std::to_string(pts_ms) + " after " +
                                           std::to_string(*s.last_pts));

    bool keyframe =
        force_keyframe || !s.last_keyframe_pts ||
        (o.keyframe_interval_ms > 0 && pts_ms - *s.last_keyframe_pts >= o.keyframe_interval_ms);

    AVFrame* frame = s.frame.get();
    check_av(av_frame_make_writable(frame), "H.264: frame buffer");
    const std::uint8_t* source[4] = {bgrx.data, nullptr, nullptr, nullptr};
    int source_stride[4] = {static_cast<int>(bgrx.stride), 0, 0, 0};
    if (s.scaler) {
        sws_scale(s.scaler.get(), source, source_stride, 0, s.source_height, frame->data,
                  frame->linesize);
    } else if (changed && s.converted_once) {
        for (const Rect& rect : *changed) s.convert(bgrx, rect);
    } else {
        s.convert(bgrx, Rect{0, 0, s.output_width, s.output_height});
        s.converted_once = true;
    }
    frame->pts = pts_ms;
    frame->pict_type = keyframe ? AV_PICTURE_TYPE_I : AV_PICTURE_TYPE_NONE;
    check_av(avcodec_send_frame(s.context.get(), frame), "H.264: encoding");
    s.last_pts = pts_ms;

    std::vector<EncodedPacket> out;
    AVPacket* packet = s.packet.get();
    while (true) {
        int status = avcodec_receive_packet(s.context.get(), packet);
        if (status == AVERROR(EAGAIN) || status == AVERROR_EOF) break;
        check_av(status, "H.264: encoding");
        PacketUnref unref(packet);
        EncodedPacket& encoded = out.emplace_back();
        encoded.annexb.assign(packet->data, packet->data + packet->size);
        encoded.keyframe = (packet->flags & AV_PKT_FLAG_KEY) != 0;
        encoded.pts_ms = packet->pts;
        if (encoded.keyframe) {
            s.last_keyframe_pts = packet->pts;
            if (!s.codec_confirmed) {
                if (auto from_sps = codec_string_from_sps(encoded.annexb)) {
                    s.codec = *from_sps;
                    s.codec_confirmed = true;
                }
            }
        }
    }
    return out;
}

std::string H264Encoder::codec_string() const {
    return state_->codec;
}
int H264Encoder::level_idc() const {
    return state_->level;
}
int H264Encoder::output_width() const {
    return state_->output_width;
}
int H264Encoder::output_height() const {
    return state_->output_height;
}
const H264Encoder::Options& H264Encoder::options() const {
    return state_->options;
}
const std::vector<std::uint8_t>& H264Encoder::extradata() const {
    return state_->extradata;
}

}  // namespace deskbox::streaming
