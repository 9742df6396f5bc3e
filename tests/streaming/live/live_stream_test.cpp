// Live encoders over a real frame mirror: JPEG and H.264 packets decode to the mirror's pixels,
// newcomers start at a keyframe, patches land where the damage was, the pointer is reported,
// queues stay bounded, and encoders are shared per settings.
#include <gtest/gtest.h>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "streaming/live/live_stream.hpp"
#include "tests/streaming/video/h264_test_decoder.hpp"
#include "tests/streaming/video/test_frames.hpp"

namespace deskbox::streaming {
namespace {

using namespace std::chrono_literals;

struct Header {
    int kind, flags, x, y, w, h, full_w, full_h;
    std::uint64_t capture_us;
};

Header parse_header(const std::string& m) {
    auto u16 = [&](std::size_t at) {
        return static_cast<int>(static_cast<unsigned char>(m[at]) |
                                (static_cast<unsigned char>(m[at + 1]) << 8));
    };
    std::uint64_t t = 0;
    for (int i = 7; i >= 0; --i) t = (t << 8) | static_cast<unsigned char>(m[16 + i]);
    return {static_cast<unsigned char>(m[0]),
            static_cast<unsigned char>(m[1]),
            u16(2),
            u16(4),
            u16(6),
            u16(8),
            u16(10),
            u16(12),
            t};
}

cv::Mat decode_jpeg(const std::string& message) {
    std::vector<uchar> bytes(message.begin() + kPacketHeaderSize, message.end());
    return cv::imdecode(bytes, cv::IMREAD_COLOR);
}

// Collects what a subscriber receives.
class Collector {
  public:
    StreamCallbacks callbacks() {
        StreamCallbacks c;
        c.packet = [this](const StreamPacketPtr& p) {
            std::lock_guard lock(mutex_);
            packets_.push_back(p);
            changed_.notify_all();
        };
        c.cursor = [this](const std::shared_ptr<const std::string>& m) {
            std::lock_guard lock(mutex_);
            texts_.push_back(nlohmann::json::parse(*m));
            changed_.notify_all();
        };
        c.end = [this] {
            std::lock_guard lock(mutex_);
            ended_ = true;
            changed_.notify_all();
        };
        return c;
    }
    // Waits (bounded) until at least `n` packets arrived.
    std::vector<StreamPacketPtr> packets(std::size_t n) {
        std::unique_lock lock(mutex_);
        changed_.wait_for(lock, 20s, [&] { return packets_.size() >= n; });
        return packets_;
    }
    std::vector<nlohmann::json> texts_with(const std::string& type) {
        std::unique_lock lock(mutex_);
        std::vector<nlohmann::json> out;
        changed_.wait_for(lock, 20s, [&] {
            out.clear();
            for (auto& t : texts_)
                if (t["type"] == type) out.push_back(t);
            return !out.empty();
        });
        return out;
    }
    bool ended() {
        std::unique_lock lock(mutex_);
        return changed_.wait_for(lock, 20s, [&] { return ended_; });
    }

  private:
    std::mutex mutex_;
    std::condition_variable changed_;
    std::vector<StreamPacketPtr> packets_;
    std::vector<nlohmann::json> texts_;
    bool ended_ = false;
};

class LiveStreamTest : public ::testing::Test {
  protected:
    static constexpr int kWidth = 320, kHeight = 200;
    void SetUp() override {
        frame_ = test::make_frame(kWidth, kHeight, 0);
        mirror_.reset(kWidth, kHeight, 0);
        mirror_.apply_damage(++seq_, 0, 0, kWidth, kHeight, std::span<const std::uint8_t>(frame_));
    }
    // Paints a solid rect into the mirror (and our copy of the frame).
    void paint(int x, int y, int w, int h, std::uint8_t b, std::uint8_t g, std::uint8_t r) {
        std::vector<std::uint8_t> patch(static_cast<std::size_t>(w) * h * 4);
        for (std::size_t i = 0; i < patch.size(); i += 4) {
            patch[i] = b;
            patch[i + 1] = g;
            patch[i + 2] = r;
            patch[i + 3] = 0;
        }
        for (int row = 0; row < h; ++row)
            std::copy_n(&patch[static_cast<std::size_t>(row) * w * 4], w * 4,
                        &frame_[(static_cast<std::size_t>(y + row) * kWidth + x) * 4]);
        mirror_.apply_damage(++seq_, x, y, w, h, std::span<const std::uint8_t>(patch));
    }
    cv::Mat frame_mat() {
        cv::Mat bgrx(kHeight, kWidth, CV_8UC4, frame_.data()), bgr;
        cv::cvtColor(bgrx, bgr, cv::COLOR_BGRA2BGR);
        return bgr;
    }

    FrameMirror mirror_;
    std::vector<std::uint8_t> frame_;
    std::uint64_t seq_ = 0;
};

TEST(StreamSettings, RejectsBadValuesNamingTheField) {
    auto field_of = [](StreamSettings s) {
        try {
            validate(s);
        } catch (const ParameterError& e) {
            return e.field();
        }
        return std::string("none");
    };
    EXPECT_EQ(field_of({}), "none");
    EXPECT_EQ(field_of({StreamCodec::jpeg, -1, 0, 30, 70}), "width");
    EXPECT_EQ(field_of({StreamCodec::jpeg, 0, 9000, 30, 70}), "height");
    EXPECT_EQ(field_of({StreamCodec::jpeg, 8, 0, 30, 70}), "width");
    EXPECT_EQ(field_of({StreamCodec::jpeg, 0, 0, 0, 70}), "fps");
    EXPECT_EQ(field_of({StreamCodec::jpeg, 0, 0, 61, 70}), "fps");
    EXPECT_EQ(field_of({StreamCodec::h264, 0, 0, 30, 101}), "quality");
    EXPECT_THROW(parse_stream_codec("vp9"), ParameterError);
    EXPECT_EQ(parse_stream_codec("h264"), StreamCodec::h264);
}

TEST(PacketQueue, StartsAtAKeyframeAndSkipsAheadWhenFull) {
    auto packet = [](bool key, std::size_t size = 10) {
        return std::make_shared<const StreamPacket>(StreamPacket{std::string(size, 'x'), key});
    };
    PacketQueue q(3, 1000);
    EXPECT_FALSE(q.push(packet(false)));  // nothing before the first keyframe
    EXPECT_TRUE(q.push(packet(true)));
    EXPECT_TRUE(q.push(packet(false)));
    EXPECT_TRUE(q.push(packet(false)));
    EXPECT_EQ(q.size(), 3u);
    // Full: everything goes, and only a keyframe restarts it.
    EXPECT_FALSE(q.push(packet(false)));
    EXPECT_EQ(q.size(), 0u);
    EXPECT_TRUE(q.waiting_for_keyframe());
    EXPECT_FALSE(q.push(packet(false)));
    EXPECT_TRUE(q.push(packet(true)));
    ASSERT_TRUE(q.pop());
    EXPECT_FALSE(q.pop());
    EXPECT_EQ(q.dropped(), 6u);
    // Over the byte limit: a keyframe replaces the backlog at once.
    PacketQueue bytes(100, 50);
    EXPECT_TRUE(bytes.push(packet(true, 30)));
    EXPECT_TRUE(bytes.push(packet(true, 30)));
    EXPECT_EQ(bytes.size(), 1u);
}

TEST_F(LiveStreamTest, JpegKeyframeShowsTheMirrorThenPatchesLandOnTheDamage) {
    LiveEncoder encoder(mirror_, {StreamCodec::jpeg, 0, 0, 60, 95});
    Collector viewer;
    auto subscription = encoder.subscribe(viewer.callbacks());
    auto first = viewer.packets(1);
    ASSERT_GE(first.size(), 1u);
    ASSERT_TRUE(first[0]->keyframe);
    Header h = parse_header(first[0]->message);
    EXPECT_EQ(h.kind, 2);
    EXPECT_EQ(h.full_w, kWidth);
    EXPECT_EQ(h.full_h, kHeight);
    cv::Mat picture = decode_jpeg(first[0]->message);
    ASSERT_FALSE(picture.empty());
    EXPECT_GT(cv::PSNR(picture, frame_mat()), 30.0);

    paint(40, 50, 30, 20, 0, 0, 255);
    auto after = viewer.packets(first.size() + 1);
    ASSERT_GT(after.size(), first.size());
    const auto& patch = after.back();
    EXPECT_FALSE(patch->keyframe);
    Header p = parse_header(patch->message);
    EXPECT_EQ(p.x, 40);
    EXPECT_EQ(p.y, 50);
    EXPECT_EQ(p.w, 30);
    EXPECT_EQ(p.h, 20);
    cv::Mat red = decode_jpeg(patch->message);
    ASSERT_EQ(red.cols, 30);
    cv::Vec3b centre = red.at<cv::Vec3b>(10, 15);
    EXPECT_GT(centre[2], 230);
    EXPECT_LT(centre[0], 30);
    EXPECT_GT(p.capture_us, 0u);
}

TEST_F(LiveStreamTest, ALateJoinerStartsWithAKeyframeOfTheCurrentScreen) {
    LiveEncoder encoder(mirror_, {StreamCodec::jpeg, 0, 0, 60, 90});
    Collector early;
    auto first = encoder.subscribe(early.callbacks());
    early.packets(1);
    paint(0, 0, 50, 50, 255, 0, 0);
    early.packets(2);
    Collector late;
    auto second = encoder.subscribe(late.callbacks());
    auto got = late.packets(1);
    ASSERT_FALSE(got.empty());
    EXPECT_TRUE(got[0]->keyframe);
    cv::Mat picture = decode_jpeg(got[0]->message);
    EXPECT_GT(cv::PSNR(picture, frame_mat()), 30.0) << "shows the blue square painted before";
}

TEST_F(LiveStreamTest, ScaledStreamsKeepTheAspectRatio) {
    LiveEncoder encoder(mirror_, {StreamCodec::jpeg, 160, 160, 30, 80});
    Collector viewer;
    auto subscription = encoder.subscribe(viewer.callbacks());
    auto got = viewer.packets(1);
    ASSERT_FALSE(got.empty());
    Header h = parse_header(got[0]->message);
    EXPECT_EQ(h.full_w, 160);
    EXPECT_EQ(h.full_h, 100);
    EXPECT_EQ(decode_jpeg(got[0]->message).cols, 160);
}

TEST_F(LiveStreamTest, H264StartsWithAnIdrCarryingItsParameterSets) {
    LiveEncoder encoder(mirror_, {StreamCodec::h264, 0, 0, 30, 70});
    Collector viewer;
    auto subscription = encoder.subscribe(viewer.callbacks());
    auto got = viewer.packets(1);
    ASSERT_FALSE(got.empty());
    ASSERT_TRUE(got[0]->keyframe);
    Header h = parse_header(got[0]->message);
    EXPECT_EQ(h.kind, 1);
    EXPECT_EQ(h.full_w, kWidth);
    std::string payload = got[0]->message.substr(kPacketHeaderSize);
    bool sps = false, idr = false;
    for (std::size_t i = 0; i + 4 < payload.size(); ++i)
        if (payload[i] == 0 && payload[i + 1] == 0 && payload[i + 2] == 1) {
            int type = payload[i + 3] & 0x1f;
            sps |= type == 7;
            idr |= type == 5;
        }
    EXPECT_TRUE(sps);
    EXPECT_TRUE(idr);
    EXPECT_EQ(encoder.codec_string().rfind("avc1.", 0), 0u) << encoder.codec_string();
    paint(10, 10, 20, 20, 255, 255, 255);
    auto more = viewer.packets(2);
    ASSERT_GE(more.size(), 2u);
    EXPECT_FALSE(more[1]->keyframe);
}

// The H.264 encoder converts only the mirror's damage (H264Encoder's `changed`): after many
// patches, some merged while the encoder waited for its frame slot, the decoded picture is
// still the mirror's whole frame.
TEST_F(LiveStreamTest, H264PicturesFollowEveryPatchOfTheMirror) {
    LiveEncoder encoder(mirror_, {StreamCodec::h264, 0, 0, 60, 90});
    Collector viewer;
    auto subscription = encoder.subscribe(viewer.callbacks());
    viewer.packets(1);
    for (int i = 0; i < 24; ++i) {
        paint(3 + i * 11, 7 + i * 5, 17 + i % 5, 9 + i % 3, static_cast<std::uint8_t>(i * 10), 40,
              static_cast<std::uint8_t>(250 - i * 9));
        if (i % 3 == 0) std::this_thread::sleep_for(20ms);
    }
    // Every packet until the encoder has been quiet a while (it encodes what it merged within a
    // frame interval of the last patch).
    std::size_t count = 0;
    for (auto end = std::chrono::steady_clock::now() + 10s;
         std::chrono::steady_clock::now() < end;) {
        std::this_thread::sleep_for(300ms);
        const std::size_t now = viewer.packets(0).size();
        if (now == count) break;
        count = now;
    }
    H264TestDecoder decoder;
    std::vector<H264TestDecoder::Picture> pictures;
    for (const auto& packet : viewer.packets(0)) {
        const std::string& m = packet->message;
        std::vector<std::uint8_t> annexb(m.begin() + kPacketHeaderSize, m.end());
        for (auto& picture : decoder.decode(annexb)) pictures.push_back(std::move(picture));
    }
    ASSERT_FALSE(pictures.empty());
    const ImageView shown = pictures.back().view();
    EXPECT_GT(test::psnr(shown, test::view_of(frame_, kWidth, kHeight), kWidth, kHeight), 30.0);
    // Every patch's centre has its colour (a patch not converted would keep the old one).
    for (int i = 0; i < 24; ++i) {
        const int x = 3 + i * 11 + (17 + i % 5) / 2, y = 7 + i * 5 + (9 + i % 3) / 2;
        const std::uint8_t* want = &frame_[(static_cast<std::size_t>(y) * kWidth + x) * 4];
        const std::uint8_t* got = shown.row(y) + static_cast<std::size_t>(x) * 4;
        for (int c = 0; c < 3; ++c)
            EXPECT_NEAR(got[c], want[c], 40) << "patch " << i << " channel " << c;
    }
}

TEST_F(LiveStreamTest, ThePointerIsReportedAndTheEndOfTheMirrorToo) {
    LiveEncoder encoder(mirror_, {StreamCodec::jpeg, 0, 0, 30, 70});
    Collector viewer;
    auto subscription = encoder.subscribe(viewer.callbacks());
    std::vector<std::uint8_t> arrow(8 * 8 * 4, 0xff);
    mirror_.set_cursor_shape(8, 8, 1, 2, 7, arrow);
    mirror_.set_cursor_position(100, 120);
    auto shapes = viewer.texts_with("cursor_shape");
    ASSERT_FALSE(shapes.empty());
    EXPECT_EQ(shapes.back()["width"], 8);
    EXPECT_EQ(shapes.back()["yhot"], 2);
    EXPECT_FALSE(shapes.back()["png"].get<std::string>().empty());
    auto positions = viewer.texts_with("cursor");
    ASSERT_FALSE(positions.empty());
    EXPECT_EQ(positions.back()["x"], 100);
    EXPECT_EQ(positions.back()["y"], 120);
    mirror_.close();
    EXPECT_TRUE(viewer.ended());
}

TEST_F(LiveStreamTest, TheHubSharesOneEncoderPerSettingsAndDropsUnusedOnes) {
    StreamHub hub(mirror_);
    StreamSettings a{StreamCodec::jpeg, 0, 0, 30, 70}, b{StreamCodec::jpeg, 0, 0, 30, 50};
    auto first = hub.encoder(a);
    auto again = hub.encoder(a);
    auto other = hub.encoder(b);
    EXPECT_EQ(first.get(), again.get());
    EXPECT_NE(first.get(), other.get());
    EXPECT_EQ(hub.active_encoders(), 2u);
    first.reset();
    again.reset();
    EXPECT_EQ(hub.active_encoders(), 1u);
}

// Issue 26: a view token asking for 40 different qualities started 40 encoders. Settings snap
// to presets, viewers of one preset share its encoder, and a sandbox runs a few at most.
class HostileLiveStream : public LiveStreamTest {};

TEST_F(HostileLiveStream, EncodersSnapToPresetsAndAreCappedPerSandbox) {
    StreamHub hub(mirror_);
    std::vector<std::shared_ptr<LiveEncoder>> held;
    for (int quality = 1; quality <= 100; quality += 2)
        held.push_back(hub.encoder({StreamCodec::jpeg, 0, 0, 30, quality}));
    EXPECT_EQ(hub.active_encoders(), 4u) << "quality snaps to 30/50/70/90";
    EXPECT_EQ(held.front()->settings().quality, 30);
    EXPECT_EQ(held.back()->settings().quality, 90);
    EXPECT_EQ(hub.encoder({StreamCodec::jpeg, 0, 0, 29, 71}).get(),
              hub.encoder({StreamCodec::jpeg, 0, 0, 31, 69}).get())
        << "near settings share one encoder";
    EXPECT_EQ(snap_to_preset({StreamCodec::jpeg, 1000, 17, 7, 1}),
              (StreamSettings{StreamCodec::jpeg, 960, 320, 5, 30}));
    // A common screen's own size stays itself: a 1920x1080 viewer of a 1920x1080 screen gets
    // its frames unscaled.
    for (auto [w, h] : {std::pair{1920, 1080},
                        {1280, 720},
                        {1366, 768},
                        {1920, 1200},
                        {2560, 1440},
                        {3840, 2160}}) {
        const StreamSettings snapped = snap_to_preset({StreamCodec::h264, w, h, 60, 70});
        EXPECT_GE(snapped.max_height, h) << w << "x" << h;
    }
    try {
        auto fifth = hub.encoder({StreamCodec::jpeg, 640, 480, 10, 70});
        ADD_FAILURE() << "a fifth encoder started";
    } catch (const TooManyEncoders& e) {
        EXPECT_NE(std::string(e.what()).find("quality=70"), std::string::npos) << e.what();
    }
    // Their viewers gone, the encoders go, and others may start.
    held.clear();
    EXPECT_EQ(hub.active_encoders(), 0u);
    EXPECT_NO_THROW(hub.encoder({StreamCodec::jpeg, 640, 480, 10, 70}));
}

TEST_F(LiveStreamTest, AnUnsubscribedViewerGetsNothingMore) {
    LiveEncoder encoder(mirror_, {StreamCodec::jpeg, 0, 0, 60, 70});
    Collector viewer, other;
    auto subscription = encoder.subscribe(viewer.callbacks());
    auto keep = encoder.subscribe(other.callbacks());
    viewer.packets(1);
    subscription.reset();
    std::size_t before = viewer.packets(0).size();
    EXPECT_EQ(encoder.subscribers(), 1u);
    paint(0, 0, 10, 10, 1, 2, 3);
    auto others = other.packets(2);
    EXPECT_GE(others.size(), 2u);
    EXPECT_EQ(viewer.packets(0).size(), before);
}

TEST_F(LiveStreamTest, AStoppedEncoderCallsNobodyAnyMore) {
    StreamHub hub(mirror_);
    auto encoder = hub.encoder({StreamCodec::jpeg, 0, 0, 60, 70});
    Collector viewer;
    auto subscription = encoder->subscribe(viewer.callbacks());
    viewer.packets(1);
    hub.stop_all();
    std::size_t before = viewer.packets(0).size();
    paint(0, 0, 20, 20, 9, 9, 9);
    mirror_.set_cursor_position(3, 4);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(viewer.packets(0).size(), before);
    encoder->stop();  // idempotent; the destructor after it too
}

}  // namespace
}  // namespace deskbox::streaming
