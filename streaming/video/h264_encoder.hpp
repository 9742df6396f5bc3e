// H.264 for live viewers (WebCodecs in the browser) and for the MP4 recorder: libx264 through
// libavcodec. BGRX -> YUV 4:2:0 (BT.601 matrix, limited range, sRGB primaries and transfer, all
// signalled in the VUI) by libyuv at the same size: 0.24 ms at 1280x800 against 4.4 ms for
// swscale's generic path, which is half the per-frame cost otherwise. Scaling goes through
// swscale (area filter when shrinking, so text stays legible).
//
// Tuned for watching a desktop live: x264's zerolatency tune (no lookahead, no B-frames, sliced
// threads), so every encode() call returns that frame's packet at once (one in, one out).
// Timestamps are milliseconds (time base 1/1000): the frame rate is variable and the caller's
// clock decides; max_fps only sizes the level and rate control.
//
// A viewer that joins late must decode from the next keyframe alone, so every keyframe is an IDR
// carrying SPS and PPS in-band (x264 repeat-headers; forced keyframes are IDR via forced-idr).
// Keyframes come on demand (force_keyframe) and every keyframe_interval_ms of stream time; the
// timer runs on timestamps rather than frame counts because an idle screen sends few frames.
//
// Profile: constrained baseline by default (every WebCodecs, MSE and hardware decoder takes it),
// main on request (CABAC: ~10-20% smaller at the same quality, but the ultrafast preset has no
// CABAC, so x264 then signals constrained baseline anyway). The level is the lowest that fits the
// output size at max_fps (and the peak bitrate) and is set explicitly, so codec_string()
// ("avc1.42C020" at 1280x800) is known before the first frame; the first SPS confirms it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "streaming/types.hpp"

namespace deskbox::streaming {

struct EncodedPacket {
    std::vector<std::uint8_t> annexb;  // NAL units with 00 00 00 01 start codes
    bool keyframe = false;             // an IDR (with SPS and PPS unless global_header)
    std::int64_t pts_ms = 0;
};

enum class H264Profile { constrained_baseline, main };

class H264Encoder {
  public:
    struct Options {
        int input_width = 0;  // of the BGRX frames given to encode(), 1..16384
        int input_height = 0;
        // 0: the input's. Odd sizes are rounded down to even (4:2:0 needs it); when only that
        // rounding differs from the input, the last column/row is cropped instead of scaled.
        int output_width = 0;
        int output_height = 0;
        int max_fps = 30;          // 1..240: the level and rate control assume at most this
        int crf = 26;              // 0..51 (lower: better and bigger), used when bitrate_kbps is 0
        int bitrate_kbps = 0;      // > 0: average bitrate instead of crf (VBV of one second)
        int max_bitrate_kbps = 0;  // > 0: VBV cap (with crf: capped crf)
        std::string preset = "ultrafast";  // x264 preset: ultrafast .. placebo
        H264Profile profile = H264Profile::constrained_baseline;
        int keyframe_interval_ms = 3000;  // 0: only the first frame and forced ones
        int threads = 1;                  // 0: x264's choice (sliced threads, one frame each)
        // For containers (MP4): SPS/PPS go to extradata() instead of into every keyframe.
        bool global_header = false;
    };

    // Throws ParameterError naming the bad option; std::runtime_error if libx264 is missing or
    // refuses to open.
    explicit H264Encoder(Options options);
    ~H264Encoder();
    H264Encoder(const H264Encoder&) = delete;
    H264Encoder& operator=(const H264Encoder&) = delete;
    H264Encoder(H264Encoder&&) noexcept;
    H264Encoder& operator=(H264Encoder&&) noexcept;

    // Encodes one frame (input_width x input_height BGRX, any stride). pts_ms must increase
    // from call to call. Returns the packets that came out: with zerolatency exactly one.
    // Throws ParameterError ("image", "pts_ms") for a wrong-size image or a non-increasing
    // timestamp (the encoder is unchanged), std::runtime_error if the codec fails.
    // `changed`, when given, covers every pixel where `bgrx` differs from the previous frame
    // encoded (the frame mirror's damage; empty: nothing changed): at the same size only those
    // rects are converted to YUV, into the frame the encoder keeps (a whole 1080p conversion
    // is ~1 ms of a ~5.5 ms encode). The first frame, and any frame through the scaler, is
    // converted whole, as is every frame without `changed`.
    std::vector<EncodedPacket> encode(const ImageView& bgrx, std::int64_t pts_ms,
                                      bool force_keyframe = false,
                                      std::optional<std::span<const Rect>> changed = std::nullopt);

    // The RFC 6381 / WebCodecs codec string of the stream, e.g. "avc1.42C01F".
    std::string codec_string() const;
    int level_idc() const;  // e.g. 31 for level 3.1
    int output_width() const;
    int output_height() const;
    const Options& options() const;
    // SPS and PPS in Annex-B form; only with global_header (empty otherwise).
    const std::vector<std::uint8_t>& extradata() const;

  private:
    struct State;
    std::unique_ptr<State> state_;
};

// The NAL units of an Annex-B byte stream, without their start codes.
std::vector<std::span<const std::uint8_t>> split_annexb(std::span<const std::uint8_t> stream);

// The lowest H.264 level (level_idc, e.g. 31) whose limits hold width x height at fps.
// Throws ParameterError on "output_width" if even level 6.2 cannot.
int h264_level_for(int width, int height, int fps);

}  // namespace deskbox::streaming
