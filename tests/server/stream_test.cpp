// Live streams of a real sandbox over WebSockets, driven like a viewer: frames decode to what
// the screenshot API shows, late joiners get a picture at once, only control tokens inject
// input, a stalled viewer costs nobody else, bad requests and messages get clear answers, and
// killing the sandbox closes the stream with 1001.
#include <gtest/gtest.h>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <rfb/rfb.h>  // rfbEncryptAndStorePasswd, with C linkage
#include <sys/socket.h>

#include <atomic>

#include "streaming/live/live_stream.hpp"
#include "tests/server/deskboxd_fixture.hpp"
#include "tests/server/ws_client.hpp"
#include "tests/streaming/video/h264_test_decoder.hpp"

namespace deskbox {
namespace {

using namespace test;

struct Sandbox {
    std::string id, view_token, control_token;
};

Sandbox create(Server& s) {
    auto a = s.post("/v1/sandboxes", {{"template", "minimal"}, {"resolution", {800, 600}}});
    EXPECT_EQ(a.status, 201u) << a.body << s.log();
    json j = a.js();
    return {j.value("id", ""), j.value("view_token", ""), j.value("control_token", "")};
}

std::string stream_target(const Sandbox& sb, const std::string& token,
                          const std::string& extra = "") {
    return "/v1/sandboxes/" + sb.id + "/stream?token=" + token + extra;
}

bool is_keyframe(const WsClient::Message& m) {
    return !m.text && m.data.size() > 24 && (m.data[1] & 1);
}

cv::Mat screenshot(Server& s, const Sandbox& sb) {
    auto shot = s.get("/v1/sandboxes/" + sb.id + "/screenshot?format=png");
    return cv::imdecode(std::vector<uchar>(shot.body.begin(), shot.body.end()), cv::IMREAD_COLOR);
}

cv::Mat jpeg_of(const WsClient::Message& m) {
    return cv::imdecode(std::vector<uchar>(m.data.begin() + 24, m.data.end()), cv::IMREAD_COLOR);
}

// Types `text` into the sandbox's focused terminal through key messages (keysyms for ASCII are
// the characters), then Return.
void type_keys(WsClient& ws, const std::string& text) {
    for (char c : text) {
        int keysym = c == '\n' ? 0xff0d : static_cast<unsigned char>(c);
        ws.send_text(json{{"type", "key"}, {"keysym", keysym}, {"down", true}}.dump());
        ws.send_text(json{{"type", "key"}, {"keysym", keysym}, {"down", false}}.dump());
    }
}

class StreamTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!template_built())
            GTEST_SKIP() << "template 'minimal' not built: run images/build.py minimal";
        server_ = std::make_unique<Server>();
        sandbox_ = create(*server_);
        ASSERT_FALSE(sandbox_.id.empty());
        // The terminal the template starts has focus once it is mapped.
        ASSERT_TRUE(eventually([&] {
            return server_->get(base() + "/windows").body.find("term") != std::string::npos;
        }));
    }
    std::string base() const { return "/v1/sandboxes/" + sandbox_.id; }
    Server& s() { return *server_; }

    std::unique_ptr<Server> server_;
    Sandbox sandbox_;
};

TEST_F(StreamTest, JpegFramesShowWhatTheScreenshotShows) {
    // The terminal may still be drawing its prompt: compare frames of a still screen.
    auto settled = s().post("/v1/sandboxes/" + sandbox_.id + "/wait",
                            {{"until", "stable"}, {"stable_ms", 300}, {"timeout_ms", 20000}});
    ASSERT_TRUE(settled.js()["matched"]) << settled.body;
    WsClient ws(s().port(), stream_target(sandbox_, sandbox_.view_token, "&codec=jpeg&quality=90"));
    ASSERT_TRUE(ws.connected()) << ws.status() << ws.refusal_body();
    auto hello = ws.read();
    ASSERT_TRUE(hello && hello->text);
    EXPECT_EQ(hello->json()["type"], "hello");
    EXPECT_EQ(hello->json()["control"], false);
    EXPECT_EQ(hello->json()["screen"]["width"], 800);
    auto key = ws.read_until(is_keyframe);
    ASSERT_TRUE(key);
    cv::Mat streamed = jpeg_of(*key);
    cv::Mat shot = screenshot(s(), sandbox_);
    ASSERT_EQ(streamed.cols, 800);
    ASSERT_EQ(streamed.rows, 600);
    EXPECT_GT(cv::PSNR(streamed, shot), 28.0);
}

TEST_F(StreamTest, H264DecodesToTheScreenAndALateJoinerGetsAPictureAtOnce) {
    WsClient first(s().port(), stream_target(sandbox_, sandbox_.view_token, "&codec=h264"));
    ASSERT_TRUE(first.connected()) << first.status() << first.refusal_body();
    ASSERT_TRUE(first.read_until(is_keyframe));
    // Change the screen so the first viewer is past its keyframe when the second joins.
    start(s(), sandbox_.id, "xterm -geometry 40x10+300+300 -e sleep 60");
    ASSERT_TRUE(first.read_until([](const auto& m) { return !m.text && !(m.data[1] & 1); }));
    // The new window has finished drawing (the product's own wait), so the late keyframe and
    // the screenshot show the same.
    auto settled = s().post("/v1/sandboxes/" + sandbox_.id + "/wait",
                            {{"until", "stable"}, {"stable_ms", 500}, {"timeout_ms", 20000}});
    ASSERT_TRUE(settled.js()["matched"]) << settled.body;

    WsClient late(s().port(),
                  stream_target(sandbox_, sandbox_.view_token, "&codec=h264&quality=90"));
    ASSERT_TRUE(late.connected());
    auto key = late.read_until([](const auto& m) { return !m.text; });
    ASSERT_TRUE(key);
    EXPECT_TRUE(is_keyframe(*key)) << "the first video packet a late joiner gets is a keyframe";
    streaming::H264TestDecoder decoder;
    auto pictures =
        decoder.decode(std::vector<std::uint8_t>(key->data.begin() + 24, key->data.end()));
    ASSERT_EQ(pictures.size(), 1u) << "decodable on its own";
    EXPECT_EQ(pictures[0].width, 800);
    cv::Mat bgrx(pictures[0].height, pictures[0].width, CV_8UC4, pictures[0].bgrx.data()), bgr;
    cv::cvtColor(bgrx, bgr, cv::COLOR_BGRA2BGR);
    cv::Mat shot = screenshot(s(), sandbox_);
    EXPECT_GT(cv::PSNR(bgr, shot), 25.0);
    if (HasFailure()) {
        cv::imwrite(::testing::TempDir() + "h264_late.png", bgr);
        cv::imwrite(::testing::TempDir() + "h264_truth.png", shot);
    }
}

TEST_F(StreamTest, OnlyAControlTokenInjectsInput) {
    WsClient watcher(s().port(), stream_target(sandbox_, sandbox_.view_token));
    ASSERT_TRUE(watcher.connected());
    type_keys(watcher, "touch /tmp/from-view-token\n");
    auto refused =
        watcher.read_until([](const auto& m) { return m.text && m.json()["type"] == "error"; });
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->json()["code"], "view_only");

    WsClient controller(s().port(), stream_target(sandbox_, sandbox_.control_token));
    ASSERT_TRUE(controller.connected());
    auto hello = controller.read();
    ASSERT_TRUE(hello);
    EXPECT_EQ(hello->json()["control"], true);
    type_keys(controller, "touch /tmp/from-control-token\n");
    EXPECT_TRUE(eventually([&] {
        return run(s(), sandbox_.id, "ls /tmp").find("from-control-token") != std::string::npos;
    }));
    EXPECT_EQ(run(s(), sandbox_.id, "ls /tmp").find("from-view-token"), std::string::npos);
    auto metrics = s().get("/metrics").body;
    EXPECT_NE(metrics.find("deskbox_viewer_input_ignored_total"), std::string::npos) << metrics;
}

TEST_F(StreamTest, BadRequestsAreRefusedBeforeTheUpgrade) {
    WsClient no_token(s().port(), "/v1/sandboxes/" + sandbox_.id + "/stream");
    EXPECT_FALSE(no_token.connected());
    EXPECT_EQ(no_token.status(), 401u);
    WsClient wrong(s().port(), stream_target(sandbox_, "not-the-token"));
    EXPECT_EQ(wrong.status(), 401u);
    WsClient codec(s().port(), stream_target(sandbox_, sandbox_.view_token, "&codec=vp9"));
    EXPECT_EQ(codec.status(), 400u);
    EXPECT_NE(codec.refusal_body().find("codec"), std::string::npos) << codec.refusal_body();
    WsClient fps(s().port(), stream_target(sandbox_, sandbox_.view_token, "&fps=1000"));
    EXPECT_EQ(fps.status(), 400u);
    // An unknown id answers like a wrong token: ids are not learnt by asking (issue 26).
    WsClient unknown(s().port(), "/v1/sandboxes/sb-nope/stream?token=x");
    EXPECT_EQ(unknown.status(), 401u);
    // A plain GET (no upgrade) is told what the endpoint is.
    EXPECT_EQ(s().get(stream_target(sandbox_, sandbox_.view_token)).status, 426u);
}

TEST_F(StreamTest, MalformedMessagesGetErrorsAndTheStreamGoesOn) {
    WsClient ws(s().port(), stream_target(sandbox_, sandbox_.control_token));
    ASSERT_TRUE(ws.connected());
    ws.send_text("{not json");
    ws.send_text(json{{"type", "pointer"}, {"x", "ten"}, {"y", 1}}.dump());
    ws.send_text(json{{"type", "teleport"}}.dump());
    ws.send_text(json{{"type", "key"}, {"key", "nosuchkey"}, {"down", true}}.dump());
    ws.send_binary(std::string("\x00\x01\x02", 3));
    int errors = 0;
    for (int i = 0; i < 5; ++i)
        if (ws.read_until([](const auto& m) { return m.text && m.json()["type"] == "error"; }))
            ++errors;
    EXPECT_EQ(errors, 5);
    ws.send_text(json{{"type", "ping"}, {"t", 42}}.dump());
    auto pong = ws.read_until([](const auto& m) { return m.text && m.json()["type"] == "pong"; });
    ASSERT_TRUE(pong);
    EXPECT_EQ(pong->json()["t"], 42);
}

TEST_F(StreamTest, AMessageOverTheSizeLimitIsClosedWith1009) {
    WsClient ws(s().port(), stream_target(sandbox_, sandbox_.control_token));
    ASSERT_TRUE(ws.connected());
    try {
        ws.send_text(json{{"type", "text"}, {"text", std::string(300 << 10, 'a')}}.dump());
    } catch (const boost::system::system_error&) {
        // The server may hang up before all of it is written.
    }
    while (ws.read(20s)) {
    }
    EXPECT_EQ(ws.close_code(), 1009);
}

TEST_F(StreamTest, AViewerFloodingMessagesIsClosedWith1008) {
    WsClient ws(s().port(), stream_target(sandbox_, sandbox_.view_token));
    ASSERT_TRUE(ws.connected());
    // Far over the burst and a second's rate however slowly the server reads them; the server
    // discards what comes after its close frame.
    const std::string ping = json{{"type", "ping"}, {"t", 1}}.dump();
    try {
        for (int i = 0; i < 30000; ++i) ws.send_text(ping);
    } catch (const boost::system::system_error&) {
        // The server may hang up while the last ones are on their way.
    }
    while (ws.read(20s)) {
    }
    EXPECT_EQ(ws.close_code(), 1008);
    EXPECT_EQ(s().get("/healthz").status, 200u);
    WsClient again(s().port(), stream_target(sandbox_, sandbox_.view_token));
    EXPECT_TRUE(again.connected());  // the limit is per connection
}

TEST_F(StreamTest, AStalledViewerCostsOtherViewersNothing) {
    // A viewer that upgrades and then never reads, with a tiny receive buffer.
    WsClient stalled(s().port(),
                     stream_target(sandbox_, sandbox_.view_token, "&codec=jpeg&quality=100"), {},
                     4096);
    ASSERT_TRUE(stalled.connected());
    WsClient healthy(s().port(),
                     stream_target(sandbox_, sandbox_.view_token, "&codec=jpeg&quality=100"));
    ASSERT_TRUE(healthy.connected());
    // Keep the screen busy: terminals printing without pause until the sandbox goes.
    for (int i = 0; i < 3; ++i)
        start(s(), sandbox_.id,
              "xterm -geometry 90x30+" + std::to_string(i * 120) + "+" + std::to_string(i * 90) +
                  " -e sh -c 'while :; do ls -la /usr/lib /usr/bin; done'");
    auto dropped = [&] {
        auto metrics = s().get("/metrics").body;
        const std::string sample = "\ndeskbox_viewer_packets_dropped_total ";
        auto at = metrics.find(sample);
        return at == std::string::npos ? -1LL : std::stoll(metrics.substr(at + sample.size()));
    };
    // Until the stalled viewer has had to skip frames (bounded), the healthy one keeps reading.
    int frames = 0;
    auto end = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < end && (frames < 30 || dropped() <= 0)) {
        for (int i = 0; i < 10; ++i)
            if (auto m = healthy.read(2s); m && !m->text) ++frames;
    }
    EXPECT_GT(dropped(), 0) << "the stalled viewer skipped frames instead of queueing them";
    EXPECT_GE(frames, 30) << "the healthy viewer kept getting frames";
    // The agent's own path is unaffected: screenshots and actions still answer.
    EXPECT_EQ(s().get(base() + "/screenshot?format=jpeg").status, 200u);
    EXPECT_EQ(s().post(base() + "/actions", {{"type", "move"}, {"x", 5}, {"y", 5}}).status, 200u);
}

TEST_F(StreamTest, AStreamLivesThroughPauseAndResume) {
    WsClient ws(s().port(), stream_target(sandbox_, sandbox_.view_token));
    ASSERT_TRUE(ws.connected());
    ASSERT_TRUE(ws.read_until(is_keyframe));
    ASSERT_EQ(s().post(base() + "/pause", json::object()).status, 200u);
    ws.send_text(json{{"type", "ping"}, {"t", 1}}.dump());
    EXPECT_TRUE(ws.read_until([](const auto& m) { return m.text && m.json()["type"] == "pong"; }))
        << "a paused sandbox's stream still answers";
    ASSERT_EQ(s().post(base() + "/resume", json::object()).status, 200u);
    start(s(), sandbox_.id, "xterm -geometry 30x5+200+200 -e sleep 60");
    EXPECT_TRUE(ws.read_until([](const auto& m) { return !m.text; }))
        << "frames flow again after resume";
}

TEST_F(StreamTest, HundredsOfViewersAtOnceAllGetAPicture) {
    std::vector<std::unique_ptr<WsClient>> viewers;
    for (int i = 0; i < 200; ++i) {
        viewers.push_back(
            std::make_unique<WsClient>(s().port(), stream_target(sandbox_, sandbox_.view_token)));
        ASSERT_TRUE(viewers.back()->connected()) << i;
    }
    int pictures = 0;
    for (auto& v : viewers)
        if (v->read_until(is_keyframe)) ++pictures;
    EXPECT_EQ(pictures, 200);
    EXPECT_NE(s().get("/metrics").body.find("\ndeskbox_viewers 200"), std::string::npos);
    viewers.clear();
    EXPECT_TRUE(eventually(
        [&] { return s().get("/metrics").body.find("\ndeskbox_viewers 0") != std::string::npos; }));
    EXPECT_EQ(s().get(base() + "/screenshot").status, 200u);
}

TEST_F(StreamTest, KillClosesTheStreamWith1001) {
    WsClient ws(s().port(), stream_target(sandbox_, sandbox_.view_token));
    ASSERT_TRUE(ws.connected());
    ASSERT_TRUE(ws.read_until(is_keyframe));
    EXPECT_EQ(s().del(base()).status, 200u);
    while (ws.read(20s)) {
    }
    EXPECT_EQ(ws.close_code(), 1001);
}

TEST_F(StreamTest, VncsnapshotOfTheSandboxEqualsTheScreenshot) {
    if (::access("/usr/bin/vncsnapshot", X_OK) != 0) GTEST_SKIP() << "vncsnapshot is not installed";
    json inspect = s().get(base()).js();
    ASSERT_TRUE(inspect.contains("vnc")) << inspect.dump();
    EXPECT_EQ(inspect["vnc"]["host"], "127.0.0.1");
    EXPECT_FALSE(s().get("/v1/sandboxes").js()["sandboxes"][0]["vnc"].contains("password"))
        << "the list never shows passwords";
    TempDir dir("deskbox-vncsnapshot");
    std::string passwd = (dir.path() / "passwd").string(), out = (dir.path() / "shot.jpg").string();
    std::string password = inspect["vnc"]["password"];
    ASSERT_EQ(rfbEncryptAndStorePasswd(password.data(), passwd.data()), 0);
    auto r = run_process({"vncsnapshot", "-quiet", "-nocursor", "-quality", "95", "-passwd", passwd,
                          "127.0.0.1::" + std::to_string(inspect["vnc"]["port"].get<int>()), out},
                         60s);
    ASSERT_EQ(r.status.exit_code, 0) << r.err << r.out;
    cv::Mat snapshot = cv::imread(out, cv::IMREAD_COLOR);
    ASSERT_EQ(snapshot.cols, 800);
    EXPECT_GT(cv::PSNR(snapshot, screenshot(s(), sandbox_)), 25.0);
    // A wrong password is refused.
    std::string wrong = (dir.path() / "wrong").string();
    ASSERT_EQ(rfbEncryptAndStorePasswd(const_cast<char*>("nottheone"), wrong.data()), 0);
    auto refused = run_process({"vncsnapshot", "-quiet", "-passwd", wrong,
                                "127.0.0.1::" + std::to_string(inspect["vnc"]["port"].get<int>()),
                                (dir.path() / "no.jpg").string()},
                               60s);
    EXPECT_NE(refused.status.exit_code, 0);
}

TEST_F(StreamTest, VncOverWebSocketSpeaksRfbForTokensOnly) {
    WsClient refused(s().port(), "/v1/sandboxes/" + sandbox_.id + "/vnc?token=wrong", "binary");
    EXPECT_EQ(refused.status(), 401u);
    WsClient ws(s().port(), "/v1/sandboxes/" + sandbox_.id + "/vnc?token=" + sandbox_.view_token,
                "binary");
    ASSERT_TRUE(ws.connected()) << ws.status() << ws.refusal_body();
    auto version = ws.read();
    ASSERT_TRUE(version);
    EXPECT_FALSE(version->text);
    EXPECT_EQ(version->data.substr(0, 4), "RFB ") << version->data;
}

TEST_F(StreamTest, RecordingsPlayAndCarryTheActions) {
    EXPECT_EQ(s().get(base() + "/recording").js()["state"], "idle");
    auto started = s().post(base() + "/recording", {{"actions", true}, {"fps", 15}});
    ASSERT_EQ(started.status, 201u) << started.body;
    std::string id = started.js()["recording"];
    EXPECT_EQ(s().post(base() + "/recording", json::object()).status, 409u);
    EXPECT_EQ(s().post(base() + "/recording", {{"fps", 0}}).status, 400u);
    for (int i = 0; i < 5; ++i) {
        s().post(base() + "/actions",
                 {{"type", "type"}, {"text", "echo frame " + std::to_string(i) + "\n"}});
        std::this_thread::sleep_for(300ms);
    }
    auto stopped = s().del(base() + "/recording");
    ASSERT_EQ(stopped.status, 200u) << stopped.body;
    EXPECT_GT(stopped.js()["frames"].get<int>(), 1);
    EXPECT_EQ(s().del(base() + "/recording").status, 409u);

    TempDir dir("deskbox-recording");
    auto video = s().get("/v1/recordings/" + id);
    ASSERT_EQ(video.status, 200u);
    EXPECT_EQ(video.headers["Content-Type"], "video/mp4");
    std::string file = (dir.path() / "r.mp4").string();
    std::ofstream(file, std::ios::binary) << video.body;
    auto probe = run_process(
        {"ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
         "stream=codec_name,width,nb_read_frames:format=duration", "-of", "json", file});
    ASSERT_EQ(probe.status.exit_code, 0) << probe.err;
    json info = json::parse(probe.out);
    EXPECT_EQ(info["streams"][0]["codec_name"], "h264");
    EXPECT_EQ(info["streams"][0]["width"], 800);
    EXPECT_GT(std::stoi(info["streams"][0]["nb_read_frames"].get<std::string>()), 1);
    EXPECT_GT(std::stod(info["format"]["duration"].get<std::string>()), 1.0);

    auto events = s().get("/v1/recordings/" + id + "/events");
    ASSERT_EQ(events.status, 200u);
    EXPECT_NE(events.body.find("\"kind\":\"actions\""), std::string::npos) << events.body;
    EXPECT_NE(events.body.find("echo frame 4"), std::string::npos);
    EXPECT_NE(s().get("/v1/recordings").body.find(id), std::string::npos);
    EXPECT_EQ(s().get("/v1/recordings/../etc").status, 404u);
    auto deleted = s().del("/v1/recordings/" + id);
    EXPECT_EQ(deleted.status, 200u);
    EXPECT_EQ(deleted.js(), json({{"deleted", id}}));
    EXPECT_EQ(s().get("/v1/recordings/" + id).status, 404u);
}

TEST_F(StreamTest, ARecordingStartedAtCreateEndsPlayableOnKill) {
    auto created =
        s().post("/v1/sandboxes", {{"template", "minimal"}, {"record", {{"actions", true}}}});
    ASSERT_EQ(created.status, 201u) << created.body;
    json sb = created.js();
    std::string id = sb["recording"];
    // Not synchronisation: what is checked is that a recording cut short by a kill is a
    // playable file as long as the wall time it ran (a still screen sends no frames, so there
    // is nothing to wait on but time).
    std::this_thread::sleep_for(1500ms);
    ASSERT_EQ(s().del("/v1/sandboxes/" + sb["id"].get<std::string>()).status, 200u);
    TempDir dir("deskbox-recording");
    std::string file = (dir.path() / "r.mp4").string();
    std::ofstream(file, std::ios::binary) << s().get("/v1/recordings/" + id).body;
    auto probe = run_process(
        {"ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "json", file});
    ASSERT_EQ(probe.status.exit_code, 0) << probe.err;
    EXPECT_GT(std::stod(json::parse(probe.out)["format"]["duration"].get<std::string>()), 1.0);
    EXPECT_EQ(
        s().post("/v1/sandboxes", {{"template", "minimal"}, {"record", {{"fps", 500}}}}).status,
        400u);
}

// Request handlers run off the I/O threads: eight 30 s commands in flight on one sandbox (as
// many as deskboxd once had I/O threads, each held by one) hold up no viewer stream, screenshot
// or /healthz of another.
TEST_F(StreamTest, LongCommandsOnOneSandboxHoldUpNothingElse) {
    Sandbox busy = create(s());
    ASSERT_FALSE(busy.id.empty());
    const std::string busy_base = "/v1/sandboxes/" + busy.id;
    std::atomic<int> returned{0};
    std::vector<std::thread> commands;
    for (int i = 0; i < 8; ++i)
        commands.emplace_back([&, i] {
            s().post(busy_base + "/commands",
                     {{"cmd", "touch /tmp/started." + std::to_string(i) + "; sleep 30"}});
            ++returned;
        });
    struct JoinAll {
        std::vector<std::thread>& threads;
        ~JoinAll() {
            for (auto& t : threads) t.join();
        }
    } join_all{commands};
    // Every one of them is running inside the sandbox (a ninth command answers that).
    EXPECT_TRUE(eventually([&] {
        auto a = s().post(busy_base + "/commands", {{"cmd", "ls /tmp | grep -c '^started'"}});
        return a.status == 200 && a.js().value("stdout", "") == "8\n";
    }));

    WsClient ws(s().port(), stream_target(sandbox_, sandbox_.view_token, "&codec=jpeg"));
    ASSERT_TRUE(ws.connected()) << ws.status() << ws.refusal_body();
    auto hello = ws.read(10s);
    ASSERT_TRUE(hello && hello->text);
    EXPECT_TRUE(ws.read_until(is_keyframe, 10s)) << "the stream sent no picture";
    auto shot = s().get(base() + "/screenshot?format=png");
    EXPECT_EQ(shot.status, 200u) << shot.body;
    EXPECT_EQ(s().get("/healthz").status, 200u);
    EXPECT_EQ(returned.load(), 0) << "the commands ended before the checks, which proved nothing";

    // Killing the busy sandbox ends its commands at once.
    EXPECT_EQ(s().del(busy_base).status, 200u);
}

}  // namespace
}  // namespace deskbox
