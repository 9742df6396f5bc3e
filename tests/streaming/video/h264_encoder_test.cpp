// H264Encoder against FFmpeg's own h264 decoder: what we encode decodes to the source (PSNR),
// keyframes are self-contained IDRs with SPS/PPS (a late joiner decodes from one alone), one
// frame in gives one packet out, scaling and cropping, the codec string, and bad options.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "streaming/video/ffmpeg_util.hpp"
#include "streaming/video/h264_encoder.hpp"
#include "tests/streaming/video/h264_test_decoder.hpp"
#include "tests/streaming/video/test_frames.hpp"

namespace deskbox::streaming {
namespace {

using test::halve;
using test::make_frame;
using test::psnr;
using test::view_of;

using Decoder = H264TestDecoder;

std::vector<int> nal_types(const std::vector<std::uint8_t>& annexb) {
    std::vector<int> types;
    for (auto nal : split_annexb(annexb)) types.push_back(nal[0] & 0x1f);
    return types;
}

bool has(const std::vector<int>& types, int type) {
    return std::find(types.begin(), types.end(), type) != types.end();
}

H264Encoder::Options options_for(int width, int height) {
    H264Encoder::Options options;
    options.input_width = width;
    options.input_height = height;
    return options;
}

TEST(H264Encoder, DecodesToTheSourceFrameByFrame) {
    const int w = 640, h = 400;
    H264Encoder encoder(options_for(w, h));
    Decoder decoder;
    std::size_t keyframe_bytes = 0, later_bytes_max = 0;
    for (int i = 0; i < 12; ++i) {
        auto source = make_frame(w, h, i);
        auto packets = encoder.encode(view_of(source, w, h), i * 33);
        ASSERT_EQ(packets.size(), 1u) << "frame " << i;
        EXPECT_EQ(packets[0].pts_ms, i * 33);
        EXPECT_EQ(packets[0].keyframe, i == 0) << "frame " << i;
        if (i == 0) {  // what the VUI tells the browser about the colours
            AVColorSpace matrix = AVCOL_SPC_UNSPECIFIED;
            AVColorRange range = AVCOL_RANGE_UNSPECIFIED;
            decoder.decode(packets[0].annexb, &matrix, &range);
            EXPECT_EQ(matrix, AVCOL_SPC_SMPTE170M);
            EXPECT_EQ(range, AVCOL_RANGE_MPEG);
            decoder = Decoder();
        }
        if (i == 0)
            keyframe_bytes = packets[0].annexb.size();
        else
            later_bytes_max = std::max(later_bytes_max, packets[0].annexb.size());
        auto pictures = decoder.decode(packets[0].annexb);
        ASSERT_EQ(pictures.size(), 1u) << "frame " << i;
        ASSERT_EQ(pictures[0].width, w);
        ASSERT_EQ(pictures[0].height, h);
        double quality = psnr(pictures[0].view(), view_of(source, w, h), w, h);
        EXPECT_GT(quality, 30.0) << "frame " << i;
        if (i == 0 || i == 11)
            std::printf("frame %d: %zu bytes, PSNR %.1f dB\n", i, packets[0].annexb.size(),
                        quality);
    }
    // Compression at all: a 1 MB frame in well under 100 KB; a moving rectangle costs far less
    // than a whole picture.
    EXPECT_LT(keyframe_bytes, static_cast<std::size_t>(w * h * 4 / 10));
    EXPECT_LT(later_bytes_max, keyframe_bytes / 2);
}

// Given what changed (the mirror's damage), the encoder converts only that to YUV: the stream
// is byte for byte the one whole conversions give, for rects on odd edges too; a change left
// out of `changed` is not seen (so the rects are what it converts).
TEST(H264Encoder, ConvertingOnlyWhatChangedGivesTheSameStream) {
    const int w = 320, h = 200;
    const auto wallpaper = make_frame(w, h, 0);
    auto frame_with_square = [&](int i) {
        auto frame = wallpaper;
        for (int y = 21 + i * 5; y < 21 + i * 5 + 17; ++y)
            for (int x = 11 + i * 7; x < 11 + i * 7 + 33; ++x) {
                std::uint8_t* p = &frame[(static_cast<std::size_t>(y) * w + x) * 4];
                p[0] = 30;
                p[1] = static_cast<std::uint8_t>(60 + i * 20);
                p[2] = 220;
            }
        return frame;
    };
    auto square = [](int i) { return Rect{11 + i * 7, 21 + i * 5, 33, 17}; };
    H264Encoder whole(options_for(w, h)), damaged(options_for(w, h));
    for (int i = 0; i < 8; ++i) {
        const auto frame = frame_with_square(i);
        std::vector<Rect> changed = {square(i)};
        if (i > 0) changed.push_back(square(i - 1));
        auto a = whole.encode(view_of(frame, w, h), i * 33);
        auto b =
            damaged.encode(view_of(frame, w, h), i * 33, false, std::span<const Rect>(changed));
        ASSERT_EQ(a.size(), 1u);
        ASSERT_EQ(b.size(), 1u);
        EXPECT_TRUE(a[0].annexb == b[0].annexb) << "frame " << i;
    }

    // The square moves on, but `changed` says nothing did: the picture stays the last one.
    H264Encoder told_nothing(options_for(w, h));
    Decoder decoder;
    const auto first = frame_with_square(0);
    decoder.decode(told_nothing.encode(view_of(first, w, h), 0)[0].annexb);
    const auto moved = frame_with_square(5);
    auto pictures = decoder.decode(
        told_nothing.encode(view_of(moved, w, h), 33, false, std::span<const Rect>())[0].annexb);
    ASSERT_EQ(pictures.size(), 1u);
    EXPECT_GT(psnr(pictures[0].view(), view_of(first, w, h), w, h), 30.0);
    EXPECT_LT(psnr(pictures[0].view(), view_of(moved, w, h), w, h),
              psnr(pictures[0].view(), view_of(first, w, h), w, h));
}

TEST(H264Encoder, OneFrameInOnePacketOutWithThreadsToo) {
    for (int threads : {1, 0, 3}) {
        auto options = options_for(320, 240);
        options.threads = threads;
        H264Encoder encoder(options);
        for (int i = 0; i < 8; ++i) {
            auto source = make_frame(320, 240, i);
            auto packets = encoder.encode(view_of(source, 320, 240), 1000 + i * 40);
            ASSERT_EQ(packets.size(), 1u) << "threads " << threads << " frame " << i;
            EXPECT_EQ(packets[0].pts_ms, 1000 + i * 40);
        }
    }
}

TEST(H264Encoder, KeyframesAreIdrWithSpsAndPps) {
    H264Encoder encoder(options_for(320, 240));
    for (int i = 0; i < 10; ++i) {
        auto source = make_frame(320, 240, i);
        auto packets = encoder.encode(view_of(source, 320, 240), i * 33, i == 4 || i == 7);
        ASSERT_EQ(packets.size(), 1u);
        auto types = nal_types(packets[0].annexb);
        bool expect_key = i == 0 || i == 4 || i == 7;
        EXPECT_EQ(packets[0].keyframe, expect_key) << "frame " << i;
        EXPECT_EQ(has(types, 7), expect_key) << "SPS, frame " << i;
        EXPECT_EQ(has(types, 8), expect_key) << "PPS, frame " << i;
        EXPECT_EQ(has(types, 5), expect_key) << "IDR slice, frame " << i;
        EXPECT_EQ(has(types, 1), !expect_key) << "non-IDR slice, frame " << i;
    }
}

TEST(H264Encoder, LateJoinerDecodesFromAForcedKeyframeAlone) {
    const int w = 480, h = 320;
    H264Encoder encoder(options_for(w, h));
    std::vector<EncodedPacket> stream;
    std::vector<std::vector<std::uint8_t>> sources;
    for (int i = 0; i < 10; ++i) {
        sources.push_back(make_frame(w, h, i));
        auto packets = encoder.encode(view_of(sources.back(), w, h), i * 33, i == 6);
        ASSERT_EQ(packets.size(), 1u);
        stream.push_back(std::move(packets[0]));
    }
    ASSERT_TRUE(stream[6].keyframe);
    // A viewer that connects at frame 6: a fresh decoder sees nothing before it.
    Decoder late;
    for (int i = 6; i < 10; ++i) {
        auto pictures = late.decode(stream[i].annexb);
        ASSERT_EQ(pictures.size(), 1u) << "frame " << i;
        EXPECT_GT(psnr(pictures[0].view(), view_of(sources[i], w, h), w, h), 30.0) << "frame " << i;
    }
}

TEST(H264Encoder, PeriodicKeyframesFollowTimestampsNotFrameCounts) {
    auto options = options_for(320, 240);
    options.keyframe_interval_ms = 1000;
    H264Encoder encoder(options);
    std::vector<std::int64_t> keyframes;
    auto source = make_frame(320, 240, 0);
    for (int i = 0; i <= 25; ++i) {
        // A nearly idle screen: the same frame, 100 ms apart.
        auto packets = encoder.encode(view_of(source, 320, 240), i * 100);
        ASSERT_EQ(packets.size(), 1u);
        if (packets[0].keyframe) keyframes.push_back(packets[0].pts_ms);
    }
    EXPECT_EQ(keyframes, (std::vector<std::int64_t>{0, 1000, 2000}));
}

TEST(H264Encoder, ScalesToASmallerOutput) {
    const int w = 640, h = 400;
    auto options = options_for(w, h);
    options.output_width = 321;  // odd: rounded down to even
    options.output_height = 201;
    H264Encoder encoder(options);
    EXPECT_EQ(encoder.output_width(), 320);
    EXPECT_EQ(encoder.output_height(), 200);
    Decoder decoder;
    for (int i = 0; i < 3; ++i) {
        auto source = make_frame(w, h, i);
        auto packets = encoder.encode(view_of(source, w, h), i * 33);
        ASSERT_EQ(packets.size(), 1u);
        auto pictures = decoder.decode(packets[0].annexb);
        ASSERT_EQ(pictures.size(), 1u);
        ASSERT_EQ(pictures[0].width, 320);
        ASSERT_EQ(pictures[0].height, 200);
        auto reference = halve(source, w, h);
        double quality = psnr(pictures[0].view(), view_of(reference, 320, 200), 320, 200);
        EXPECT_GT(quality, 25.0) << "frame " << i;
    }
}

TEST(H264Encoder, OddInputIsCroppedToEvenNotScaled) {
    const int w = 321, h = 241;
    H264Encoder encoder(options_for(w, h));
    EXPECT_EQ(encoder.output_width(), 320);
    EXPECT_EQ(encoder.output_height(), 240);
    auto source = make_frame(w, h, 3);
    // A stride wider than the row, as a crop out of a bigger buffer would have.
    std::vector<std::uint8_t> padded(static_cast<std::size_t>(w + 5) * 4 * h, 0xAB);
    for (int y = 0; y < h; ++y)
        std::copy_n(&source[static_cast<std::size_t>(y) * w * 4], w * 4,
                    &padded[static_cast<std::size_t>(y) * (w + 5) * 4]);
    ImageView padded_view{padded.data(), w, h, static_cast<std::size_t>(w + 5) * 4};
    auto packets = encoder.encode(padded_view, 0);
    ASSERT_EQ(packets.size(), 1u);
    Decoder decoder;
    auto pictures = decoder.decode(packets[0].annexb);
    ASSERT_EQ(pictures.size(), 1u);
    ASSERT_EQ(pictures[0].width, 320);
    // The top-left 320x240 of the source, pixel for pixel (a scale would shift everything).
    EXPECT_GT(psnr(pictures[0].view(), view_of(source, w, h), 320, 240), 30.0);
}

TEST(H264Encoder, CodecStringMatchesTheStreamsSps) {
    struct Case {
        H264Profile profile;
        const char* preset;
        int width, height, fps;
        std::string expected;
    };
    for (const Case& c :
         {Case{H264Profile::constrained_baseline, "ultrafast", 1280, 800, 30, "avc1.42C020"},
          Case{H264Profile::constrained_baseline, "superfast", 1280, 720, 30, "avc1.42C01F"},
          Case{H264Profile::main, "superfast", 1920, 1080, 30, "avc1.4D4028"},
          Case{H264Profile::main, "veryfast", 640, 480, 30, "avc1.4D401E"},
          // ultrafast has no CABAC: x264 signals constrained baseline even when asked for main.
          Case{H264Profile::main, "ultrafast", 640, 480, 60, "avc1.42C01F"}}) {
        SCOPED_TRACE(c.expected);
        auto options = options_for(c.width, c.height);
        options.profile = c.profile;
        options.preset = c.preset;
        options.max_fps = c.fps;
        H264Encoder encoder(options);
        EXPECT_EQ(encoder.codec_string(), c.expected);
        std::vector<std::uint8_t> black(static_cast<std::size_t>(c.width) * c.height * 4, 0);
        auto packets = encoder.encode(view_of(black, c.width, c.height), 0);
        ASSERT_EQ(packets.size(), 1u);
        std::optional<std::string> from_sps;
        for (auto nal : split_annexb(packets[0].annexb)) {
            if ((nal[0] & 0x1f) != 7) continue;
            char text[16];
            std::snprintf(text, sizeof text, "avc1.%02X%02X%02X", nal[1], nal[2], nal[3]);
            from_sps = text;
        }
        ASSERT_TRUE(from_sps);
        EXPECT_EQ(*from_sps, c.expected);
        EXPECT_EQ(encoder.codec_string(), c.expected);
    }
}

TEST(H264Encoder, LevelsFollowSizeAndFrameRate) {
    EXPECT_EQ(h264_level_for(640, 480, 30), 30);
    EXPECT_EQ(h264_level_for(1280, 720, 30), 31);
    EXPECT_EQ(h264_level_for(1280, 800, 30), 32);
    EXPECT_EQ(h264_level_for(1920, 1080, 30), 40);
    EXPECT_EQ(h264_level_for(1920, 1080, 60), 42);
    EXPECT_EQ(h264_level_for(3840, 2160, 30), 51);
    EXPECT_EQ(h264_level_for(7680, 4320, 30), 60);
    // A wide strip needs a high level for its width alone, though its area is small (A.3.1 f).
    EXPECT_EQ(h264_level_for(16384, 16, 30), 60);
    EXPECT_THROW(h264_level_for(16384, 16384, 30), ParameterError);
}

TEST(H264Encoder, GlobalHeaderMovesSpsAndPpsToExtradata) {
    auto options = options_for(320, 240);
    options.global_header = true;
    H264Encoder encoder(options);
    auto extradata_types = nal_types(encoder.extradata());
    EXPECT_TRUE(has(extradata_types, 7));
    EXPECT_TRUE(has(extradata_types, 8));
    auto source = make_frame(320, 240, 0);
    auto packets = encoder.encode(view_of(source, 320, 240), 0);
    ASSERT_EQ(packets.size(), 1u);
    EXPECT_TRUE(packets[0].keyframe);
    EXPECT_FALSE(has(nal_types(packets[0].annexb), 7));
    // Extradata + the packet decode.
    Decoder decoder;
    std::vector<std::uint8_t> joined = encoder.extradata();
    joined.insert(joined.end(), packets[0].annexb.begin(), packets[0].annexb.end());
    auto pictures = decoder.decode(joined);
    ASSERT_EQ(pictures.size(), 1u);
    EXPECT_GT(psnr(pictures[0].view(), view_of(source, 320, 240), 320, 240), 30.0);
    // Without global headers there is no extradata.
    EXPECT_TRUE(H264Encoder(options_for(320, 240)).extradata().empty());
}

TEST(H264Encoder, QualityAndBitrateSettingsTakeEffect) {
    auto total_bytes = [](H264Encoder::Options options) {
        H264Encoder encoder(options);
        std::size_t bytes = 0;
        for (int i = 0; i < 10; ++i) {
            auto source = make_frame(320, 240, i);
            for (auto& packet : encoder.encode(view_of(source, 320, 240), i * 33))
                bytes += packet.annexb.size();
        }
        return bytes;
    };
    auto fine = options_for(320, 240);
    fine.crf = 12;
    auto coarse = options_for(320, 240);
    coarse.crf = 40;
    EXPECT_GT(total_bytes(fine), 2 * total_bytes(coarse));
    auto low_rate = options_for(320, 240);
    low_rate.bitrate_kbps = 100;
    auto high_rate = options_for(320, 240);
    high_rate.bitrate_kbps = 5000;
    EXPECT_GT(total_bytes(high_rate), total_bytes(low_rate));
    // The level covers the peak bitrate too (5 Mbit/s needs level 3).
    EXPECT_EQ(H264Encoder(low_rate).codec_string(), "avc1.42C00D");
    EXPECT_EQ(H264Encoder(high_rate).codec_string(), "avc1.42C01E");
}

template <typename Change>
void expect_bad_option(const std::string& field, Change change) {
    auto options = options_for(320, 240);
    change(options);
    try {
        H264Encoder encoder(options);
        ADD_FAILURE() << "no error for " << field;
    } catch (const ParameterError& error) {
        EXPECT_EQ(error.field(), field) << error.what();
        EXPECT_NE(std::string(error.what()).find(field + ": "), std::string::npos);
    }
}

TEST(H264Encoder, RefusesBadOptionsNamingTheField) {
    using O = H264Encoder::Options;
    expect_bad_option("input_width", [](O& o) { o.input_width = 0; });
    expect_bad_option("input_width", [](O& o) { o.input_width = 1; });
    expect_bad_option("input_height", [](O& o) { o.input_height = 20000; });
    expect_bad_option("output_width", [](O& o) { o.output_width = 1; });
    expect_bad_option("output_height", [](O& o) { o.output_height = -2; });
    expect_bad_option("output_width", [](O& o) {  // beyond level 6.2
        o.output_width = 16384;
        o.output_height = 16384;
    });
    expect_bad_option("max_fps", [](O& o) { o.max_fps = 0; });
    expect_bad_option("max_fps", [](O& o) { o.max_fps = 1000; });
    expect_bad_option("crf", [](O& o) { o.crf = 52; });
    expect_bad_option("bitrate_kbps", [](O& o) { o.bitrate_kbps = -1; });
    expect_bad_option("max_bitrate_kbps", [](O& o) {
        o.bitrate_kbps = 1000;
        o.max_bitrate_kbps = 500;
    });
    expect_bad_option("preset", [](O& o) { o.preset = "warp"; });
    expect_bad_option("keyframe_interval_ms", [](O& o) { o.keyframe_interval_ms = -1; });
    expect_bad_option("threads", [](O& o) { o.threads = 65; });
}

TEST(H264Encoder, RefusesAWrongImageOrTimestampAndKeepsWorking) {
    H264Encoder encoder(options_for(320, 240));
    auto source = make_frame(320, 240, 0);
    auto wrong = make_frame(322, 240, 0);
    ASSERT_EQ(encoder.encode(view_of(source, 320, 240), 10).size(), 1u);
    try {
        encoder.encode(view_of(wrong, 322, 240), 20);
        ADD_FAILURE() << "wrong size accepted";
    } catch (const ParameterError& error) {
        EXPECT_EQ(error.field(), "image");
        EXPECT_NE(std::string(error.what()).find("322x240"), std::string::npos) << error.what();
    }
    EXPECT_THROW(encoder.encode(ImageView{}, 20), ParameterError);
    ImageView short_stride{source.data(), 320, 240, 100};
    EXPECT_THROW(encoder.encode(short_stride, 20), ParameterError);
    try {
        encoder.encode(view_of(source, 320, 240), 10);
        ADD_FAILURE() << "repeated timestamp accepted";
    } catch (const ParameterError& error) {
        EXPECT_EQ(error.field(), "pts_ms");
    }
    auto packets = encoder.encode(view_of(source, 320, 240), 20);
    ASSERT_EQ(packets.size(), 1u);
    EXPECT_EQ(packets[0].pts_ms, 20);
}

}  // namespace
}  // namespace deskbox::streaming
