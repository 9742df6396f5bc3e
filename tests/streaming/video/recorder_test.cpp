// Recorder with a real FrameMirror changing over time, checked with the real ffprobe/ffmpeg
// tools: codec, size, frame count and duration; a copy taken mid-recording (and one cut short,
// as a crash would leave it) still plays; the file ends with the screen as it was at the stop,
// pointer drawn; the events sidecar is JSON lines; closing the mirror finalises the file.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "streaming/video/recorder.hpp"
#include "tests/streaming/video/test_frames.hpp"

namespace deskbox::streaming {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::make_frame;
using test::psnr;
using test::view_of;

constexpr int kWidth = 320;
constexpr int kHeight = 240;

// Drives a mirror like an agent does: full-frame damage events with the next synthetic frame.
class ScreenDriver {
  public:
    explicit ScreenDriver(FrameMirror& mirror, int width = kWidth, int height = kHeight)
        : mirror_(mirror), width_(width), height_(height) {
        mirror_.reset(width_, height_, 0);
    }
    void step() {
        last_ = make_frame(width_, height_, step_++);
        mirror_.apply_damage(++seq_, 0, 0, width_, height_, last_);
    }
    // Steps every 20 ms for `duration`.
    void run_for(std::chrono::milliseconds duration) {
        auto end = Clock::now() + duration;
        while (Clock::now() < end) {
            step();
            std::this_thread::sleep_for(20ms);
        }
    }
    const std::vector<std::uint8_t>& last() const { return last_; }

  private:
    FrameMirror& mirror_;
    int width_, height_;
    std::uint64_t seq_ = 0;
    int step_ = 0;
    std::vector<std::uint8_t> last_;
};

struct Probe {
    std::string codec;
    int width = 0;
    int height = 0;
    long frames = -1;
    double duration_s = -1;
};

Probe ffprobe(const std::filesystem::path& file) {
    RunResult result = run_process(
        {"ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
         "stream=codec_name,width,height,nb_read_frames:format=duration", "-of", "json",
         file.string()},
        60s);
    if (result.status.exit_code != 0)
        throw std::runtime_error("ffprobe failed on " + file.string() + ": " + result.err);
    auto json = nlohmann::json::parse(result.out);
    Probe probe;
    if (json.contains("streams") && !json["streams"].empty()) {
        const auto& stream = json["streams"][0];
        probe.codec = stream.value("codec_name", "");
        probe.width = stream.value("width", 0);
        probe.height = stream.value("height", 0);
        probe.frames = std::stol(stream.value("nb_read_frames", "-1"));
    }
    if (json.contains("format") && json["format"].contains("duration"))
        probe.duration_s = std::stod(json["format"]["duration"].get<std::string>());
    return probe;
}

// Every frame of the file as BGRX, one per coded frame (no frame-rate conversion), decoded by
// the ffmpeg CLI. `errors` gets ffmpeg's error output (empty for a clean file).
std::vector<std::vector<std::uint8_t>> decode_all(const std::filesystem::path& file, int width,
                                                  int height, std::string* errors = nullptr) {
    RunResult result = run_process(
        {"ffmpeg", "-nostdin", "-v", "error", "-i", file.string(), "-fps_mode", "passthrough",
         "-enc_time_base", "1:1000", "-f", "rawvideo", "-pix_fmt", "bgr0", "-"},
        60s);
    if (errors) *errors = result.err;
    if (result.status.exit_code != 0)
        throw std::runtime_error("ffmpeg failed on " + file.string() + ": " + result.err);
    std::size_t frame_bytes = static_cast<std::size_t>(width) * height * 4;
    std::vector<std::vector<std::uint8_t>> frames;
    for (std::size_t at = 0; at + frame_bytes <= result.out.size(); at += frame_bytes)
        frames.emplace_back(result.out.begin() + static_cast<std::ptrdiff_t>(at),
                            result.out.begin() + static_cast<std::ptrdiff_t>(at + frame_bytes));
    return frames;
}

Recorder::Options options_in(const TempDir& dir) {
    Recorder::Options options;
    options.path = (dir.path() / "session.mp4").string();
    return options;
}

TEST(Recorder, RecordsAPlayableMp4OfTheMirror) {
    TempDir dir("recorder");
    FrameMirror mirror;
    ScreenDriver screen(mirror);
    screen.step();
    auto started = Clock::now();
    Recorder recorder(mirror, options_in(dir));
    screen.run_for(2000ms);
    Recorder::Stats stats = recorder.stop();
    auto elapsed_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();

    EXPECT_TRUE(stats.finished);
    EXPECT_EQ(stats.error, "");
    // Rate-capped at 30 fps, though the screen changed 50 times a second.
    EXPECT_GE(stats.frames, 5u);
    EXPECT_LE(stats.frames, static_cast<std::uint64_t>(elapsed_ms * 30 / 1000 + 2));
    EXPECT_GE(stats.duration_ms, 2000);
    EXPECT_LE(stats.duration_ms, elapsed_ms);
    auto file = dir.path() / "session.mp4";
    EXPECT_EQ(stats.bytes, std::filesystem::file_size(file));

    Probe probe = ffprobe(file);
    EXPECT_EQ(probe.codec, "h264");
    EXPECT_EQ(probe.width, kWidth);
    EXPECT_EQ(probe.height, kHeight);
    EXPECT_EQ(probe.frames, static_cast<long>(stats.frames));
    // The last frame lasts until the stop: the file is as long as the recording.
    EXPECT_NEAR(probe.duration_s, static_cast<double>(stats.duration_ms) / 1000.0, 0.05);

    std::string errors;
    auto frames = decode_all(file, kWidth, kHeight, &errors);
    EXPECT_EQ(errors, "");
    ASSERT_EQ(frames.size(), stats.frames);
    // It ends with the screen as it was at the stop.
    EXPECT_GT(psnr(view_of(frames.back(), kWidth, kHeight), view_of(screen.last(), kWidth, kHeight),
                   kWidth, kHeight),
              30.0);
}

TEST(Recorder, ACopyTakenMidRecordingAndACutOffFileStillPlay) {
    TempDir dir("recorder");
    FrameMirror mirror;
    ScreenDriver screen(mirror);
    screen.step();
    auto options = options_in(dir);
    options.fragment_ms = 300;
    Recorder recorder(mirror, options);
    // Record until at least 1.5 s of video went through the encoder (however loaded the machine).
    auto deadline = Clock::now() + 60s;
    while (recorder.stats().duration_ms < 1500 && Clock::now() < deadline) screen.run_for(100ms);
    ASSERT_GE(recorder.stats().duration_ms, 1500);

    auto copy = dir.path() / "copy.mp4";
    std::filesystem::copy_file(dir.path() / "session.mp4", copy);
    Recorder::Stats stats_at_copy = recorder.stats();
    EXPECT_FALSE(stats_at_copy.finished);
    Probe probe = ffprobe(copy);
    EXPECT_EQ(probe.codec, "h264");
    EXPECT_GT(probe.frames, 0);
    EXPECT_LE(probe.frames, static_cast<long>(stats_at_copy.frames));
    EXPECT_FALSE(decode_all(copy, kWidth, kHeight).empty());

    // A crash in the middle of writing: the file cut at an arbitrary byte.
    auto cut = dir.path() / "cut.mp4";
    std::filesystem::copy_file(copy, cut);
    auto cut_size = std::filesystem::file_size(cut) * 3 / 4;
    std::filesystem::resize_file(cut, cut_size);
    Probe cut_probe = ffprobe(cut);
    EXPECT_EQ(cut_probe.codec, "h264");
    EXPECT_GT(cut_probe.frames, 0);

    screen.run_for(200ms);
    Recorder::Stats stats = recorder.stop();
    EXPECT_EQ(ffprobe(dir.path() / "session.mp4").frames, static_cast<long>(stats.frames));
    EXPECT_GT(stats.frames, stats_at_copy.frames);
}

TEST(Recorder, EventsSidecarIsJsonLinesOnTheRecordingsClock) {
    TempDir dir("recorder");
    FrameMirror mirror;
    ScreenDriver screen(mirror);
    screen.step();
    auto options = options_in(dir);
    options.events_path = (dir.path() / "events.jsonl").string();
    Recorder recorder(mirror, options);
    EXPECT_TRUE(recorder.add_event({{"type", "click"}, {"x", 10}, {"y", 20}}));
    screen.run_for(150ms);
    EXPECT_TRUE(recorder.add_event({{"type", "type"}, {"text", "h\xC3\xA9llo \"quoted\"\n"}}));
    EXPECT_TRUE(recorder.add_event(nlohmann::json::object()));
    // Invalid UTF-8 from a client does not break the file.
    EXPECT_TRUE(recorder.add_event({{"type", "type"}, {"text", "bad \xFF byte"}}));
    try {
        recorder.add_event({1, 2, 3});
        ADD_FAILURE() << "an array was accepted";
    } catch (const ParameterError& error) {
        EXPECT_EQ(error.field(), "event");
    }
    EXPECT_THROW(recorder.add_event({{"t_ms", 5}}), ParameterError);
    auto stats = recorder.stop();
    EXPECT_FALSE(recorder.add_event({{"type", "late"}}));

    std::ifstream in(options.events_path);
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);) {
        ASSERT_NO_THROW(lines.push_back(nlohmann::json::parse(line))) << line;
        EXPECT_EQ(line.rfind("{\"t_ms\":", 0), 0u) << line;
    }
    ASSERT_EQ(lines.size(), 4u);
    std::int64_t previous = 0;
    for (const auto& line : lines) {
        ASSERT_TRUE(line["t_ms"].is_number_integer());
        std::int64_t t = line["t_ms"];
        EXPECT_GE(t, previous);
        EXPECT_LE(t, stats.duration_ms);
        previous = t;
    }
    EXPECT_EQ(lines[0]["type"], "click");
    EXPECT_EQ(lines[0]["x"], 10);
    EXPECT_GE(lines[1]["t_ms"].get<std::int64_t>(), 150);
    EXPECT_EQ(lines[1]["text"], "h\xC3\xA9llo \"quoted\"\n");
    EXPECT_EQ(lines[2].size(), 1u);
    EXPECT_EQ(lines[3]["type"], "type");
}

TEST(Recorder, MirrorCloseFinalisesAPlayableFile) {
    TempDir dir("recorder");
    FrameMirror mirror;
    ScreenDriver screen(mirror);
    screen.step();
    Recorder recorder(mirror, options_in(dir));
    screen.run_for(500ms);
    mirror.close();  // the sandbox was killed
    ASSERT_TRUE(recorder.wait(30s));
    Recorder::Stats stats = recorder.stats();
    EXPECT_TRUE(stats.finished);
    EXPECT_EQ(stats.error, "");
    EXPECT_GT(stats.frames, 0u);
    Probe probe = ffprobe(dir.path() / "session.mp4");
    EXPECT_EQ(probe.codec, "h264");
    EXPECT_EQ(probe.frames, static_cast<long>(stats.frames));
    EXPECT_NEAR(probe.duration_s, static_cast<double>(stats.duration_ms) / 1000.0, 0.05);
    // stop() afterwards changes nothing.
    EXPECT_EQ(recorder.stop().frames, stats.frames);
}

TEST(Recorder, StartsBeforeTheFirstFrameAndKeepsItsSizeAcrossAResize) {
    TempDir dir("recorder");
    FrameMirror mirror;
    Recorder recorder(mirror, options_in(dir));  // no screen yet
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(recorder.stats().frames, 0u);
    ScreenDriver screen(mirror);
    screen.run_for(400ms);
    // The track stays 320x240; the new screen is scaled into it. It shows one flat colour, so
    // the last frame cannot be mistaken for the old screen.
    mirror.reset(480, 360);
    std::vector<std::uint8_t> flat(480 * 360 * 4);
    for (std::size_t i = 0; i < flat.size(); i += 4) {
        flat[i] = 200;
        flat[i + 1] = 100;
        flat[i + 2] = 50;
    }
    mirror.apply_damage(mirror.seq() + 1, 0, 0, 480, 360, flat);
    std::this_thread::sleep_for(300ms);
    Recorder::Stats stats = recorder.stop();
    EXPECT_EQ(stats.error, "");
    Probe probe = ffprobe(dir.path() / "session.mp4");
    EXPECT_EQ(probe.codec, "h264");
    EXPECT_EQ(probe.width, kWidth);
    EXPECT_EQ(probe.height, kHeight);
    EXPECT_EQ(probe.frames, static_cast<long>(stats.frames));
    std::string errors;
    auto frames = decode_all(dir.path() / "session.mp4", kWidth, kHeight, &errors);
    EXPECT_EQ(errors, "");
    ASSERT_GE(frames.size(), 2u);
    std::vector<std::uint8_t> expected(flat.begin(), flat.begin() + kWidth * kHeight * 4);
    EXPECT_GT(psnr(view_of(frames.back(), kWidth, kHeight), view_of(expected, kWidth, kHeight),
                   kWidth, kHeight),
              35.0);
    EXPECT_LT(psnr(view_of(frames.front(), kWidth, kHeight), view_of(expected, kWidth, kHeight),
                   kWidth, kHeight),
              20.0);
}

TEST(Recorder, DrawsThePointerIntoTheVideo) {
    TempDir dir("recorder");
    FrameMirror mirror;
    mirror.reset(kWidth, kHeight, 0);
    std::vector<std::uint8_t> black(static_cast<std::size_t>(kWidth) * kHeight * 4, 0);
    mirror.apply_damage(1, 0, 0, kWidth, kHeight, black);
    Recorder recorder(mirror, options_in(dir));
    // A 16x16 opaque white pointer, then moved: only cursor events after the first frame.
    std::vector<std::uint8_t> white(16 * 16 * 4, 0xFF);
    mirror.set_cursor_shape(16, 16, 0, 0, 1, white);
    mirror.set_cursor_position(100, 80);
    std::this_thread::sleep_for(200ms);
    mirror.set_cursor_position(200, 150);
    std::this_thread::sleep_for(200ms);
    Recorder::Stats stats = recorder.stop();
    EXPECT_GE(stats.frames, 2u);
    auto frames = decode_all(dir.path() / "session.mp4", kWidth, kHeight);
    ASSERT_FALSE(frames.empty());
    auto mean = [&](const std::vector<std::uint8_t>& frame, int x0, int y0) {
        double sum = 0;
        for (int y = y0 + 4; y < y0 + 12; ++y)
            for (int x = x0 + 4; x < x0 + 12; ++x)
                sum += frame[(static_cast<std::size_t>(y) * kWidth + x) * 4 + 1];
        return sum / 64;
    };
    EXPECT_GT(mean(frames.back(), 200, 150), 200.0);  // the pointer where it ended
    EXPECT_LT(mean(frames.back(), 100, 80), 40.0);    // and no longer where it was
}

template <typename Change>
void expect_bad_option(const FrameMirror& mirror, const TempDir& dir, const std::string& field,
                       Change change) {
    auto options = options_in(dir);
    change(options);
    try {
        Recorder recorder(mirror, options);
        ADD_FAILURE() << "no error for " << field;
    } catch (const ParameterError& error) {
        EXPECT_EQ(error.field(), field) << error.what();
    }
}

TEST(Recorder, RefusesBadOptionsNamingTheField) {
    TempDir dir("recorder");
    FrameMirror mirror;
    ScreenDriver screen(mirror);
    screen.step();
    using O = Recorder::Options;
    expect_bad_option(mirror, dir, "path", [](O& o) { o.path.clear(); });
    expect_bad_option(mirror, dir, "path", [](O& o) { o.path = "/nonexistent-dir/x.mp4"; });
    expect_bad_option(mirror, dir, "events_path",
                      [](O& o) { o.events_path = "/nonexistent-dir/e.jsonl"; });
    expect_bad_option(mirror, dir, "max_fps", [](O& o) { o.max_fps = 0; });
    expect_bad_option(mirror, dir, "fragment_ms", [](O& o) { o.fragment_ms = -1; });
    expect_bad_option(mirror, dir, "video.crf", [](O& o) { o.video.crf = 99; });
    expect_bad_option(mirror, dir, "video.preset", [](O& o) { o.video.preset = "x"; });
    // Also checked before the screen has a size.
    FrameMirror empty;
    expect_bad_option(empty, dir, "video.output_width", [](O& o) { o.video.output_width = 1; });
}

}  // namespace
}  // namespace deskbox::streaming
