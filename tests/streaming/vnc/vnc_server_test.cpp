// VncServer against real clients: libvncclient (in-process, TestViewer) and vncsnapshot.
#include "streaming/vnc/vnc_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rfb/keysym.h>
#include <rfb/rfb.h>  // rfbEncryptAndStorePasswd, with C linkage

#include <chrono>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "common/unique_fd.hpp"
#include "tests/streaming/vnc/test_viewer.hpp"
#include "tests/streaming/vnc/vnc_test_util.hpp"

namespace deskbox::streaming {
namespace {

using namespace std::chrono_literals;
using namespace vnc_test;
using testing::TestViewer;

// ---- options ----

void expect_parameter_error(VncServer::Options options, const std::string& field) {
    FrameMirror mirror;
    try {
        VncServer server(mirror, options);
        ADD_FAILURE() << "no error for " << field;
    } catch (const ParameterError& error) {
        EXPECT_EQ(error.field(), field) << error.what();
    }
}

TEST(VncServerOptions, BadOptionsNameTheField) {
    auto options = server_options();
    options.password = "";
    expect_parameter_error(options, "password");

    options = server_options();
    options.view_only_password = std::string(kPassword).substr(0, 8) + "-different-tail";
    expect_parameter_error(options, "view_only_password");

    options = server_options();
    options.listen_address = "localhost";  // names are not resolved
    expect_parameter_error(options, "listen_address");

    options = server_options();
    options.listen_address = "192.0.2.1";  // TEST-NET-1: not ours
    expect_parameter_error(options, "listen_address");

    options = server_options();
    options.port = 70000;
    expect_parameter_error(options, "port");

    options = server_options();
    options.max_clients = 0;
    expect_parameter_error(options, "max_clients");
}

TEST(VncServerOptions, PortInUseIsAClearError) {
    VncServer::reserve_descriptors();  // the process's, kept from the first server on
    auto fds_before = count_entries("/proc/self/fd");
    UniqueFd taken(::socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(taken.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(::listen(taken.get(), 1), 0);
    socklen_t size = sizeof(address);
    ASSERT_EQ(::getsockname(taken.get(), reinterpret_cast<sockaddr*>(&address), &size), 0);
    int port = ntohs(address.sin_port);

    FrameMirror mirror;
    auto options = server_options();
    options.port = port;
    try {
        VncServer server(mirror, options);
        FAIL() << "bound a port that is in use";
    } catch (const ParameterError& error) {
        EXPECT_EQ(error.field(), "port");
        EXPECT_NE(std::string(error.what()).find("in use"), std::string::npos) << error.what();
        EXPECT_NE(std::string(error.what()).find(std::to_string(port)), std::string::npos);
    }
    taken.reset();
    EXPECT_EQ(count_entries("/proc/self/fd"), fds_before);

    // Free again: the same port works, and port() reports it.
    VncServer server(mirror, options);
    EXPECT_EQ(server.port(), port);
}

// ---- pixels ----

class VncPixels : public ::testing::TestWithParam<const char*> {};

TEST_P(VncPixels, ViewerSeesTheMirrorThenDamageThenAResize) {
    FrameMirror mirror;
    fill_mirror(mirror, 96, 64, 1);
    VncServer server(mirror, server_options());
    auto options = viewer_options(server);
    options.encodings = GetParam();
    auto viewer = TestViewer::connect(options);
    ASSERT_TRUE(viewer);
    EXPECT_EQ(viewer->desktop_name(), "sandbox-test");
    ASSERT_TRUE(viewer->wait_until([&] { return shows(*viewer, mirror.snapshot()); }));

    // A later damage arrives, and only the damaged area is sent.
    viewer->take_rects();
    Rect damage{30, 10, 20, 12};
    mirror.apply_damage(mirror.seq() + 1, damage.x, damage.y, damage.width, damage.height,
                        pattern(damage.width, damage.height, 9));
    ASSERT_TRUE(viewer->wait_until([&] { return shows(*viewer, mirror.snapshot()); }));
    auto rects = viewer->take_rects();
    ASSERT_FALSE(rects.empty());
    for (const Rect& rect : rects)
        EXPECT_TRUE(contains(damage, rect)) << to_string(rect) << " outside the damage";

    // A new screen size reaches the viewer, with the new pixels.
    fill_mirror(mirror, 120, 40, 3);
    ASSERT_TRUE(viewer->wait_until([&] { return shows(*viewer, mirror.snapshot()); }))
        << viewer->width() << "x" << viewer->height();
    EXPECT_EQ(server.stats().resizes, 1u);

    // And shrinking back.
    fill_mirror(mirror, 64, 48, 4);
    ASSERT_TRUE(viewer->wait_until([&] { return shows(*viewer, mirror.snapshot()); }));

    auto stats = server.stats();
    EXPECT_EQ(stats.clients, 1u);
    EXPECT_EQ(stats.control_logins, 1u);
    EXPECT_GT(stats.framebuffer_updates_sent, 0u);
    EXPECT_GT(stats.rects_sent, 0u);
    EXPECT_GT(stats.bytes_sent, 64u * 48u);
    EXPECT_GE(stats.mirror_updates, 4u);
}

INSTANTIATE_TEST_SUITE_P(Encodings, VncPixels,
                         ::testing::Values("raw", "zrle", "tight", "hextile"));

TEST(VncServer, ServesAMirrorThatGetsItsFirstFrameLater) {
    FrameMirror mirror;  // no screen yet
    VncServer server(mirror, server_options());
    auto viewer = TestViewer::connect(viewer_options(server));
    ASSERT_TRUE(viewer);
    fill_mirror(mirror, 40, 30, 5);
    ASSERT_TRUE(viewer->wait_until([&] { return shows(*viewer, mirror.snapshot()); }))
        << viewer->width() << "x" << viewer->height() << " closed " << viewer->closed();
    EXPECT_EQ(server.stats().resizes, 0u);  // the placeholder does not count
}

TEST(VncServer, ViewerInRgbFormatGetsTranslatedPixels) {
    FrameMirror mirror;
    fill_mirror(mirror, 32, 16, 2);
    VncServer server(mirror, server_options());
    auto options = viewer_options(server);
    options.bgrx = false;  // R, G, B, X in memory: the server must swap
    auto viewer = TestViewer::connect(options);
    ASSERT_TRUE(viewer);
    auto frame = mirror.snapshot().frame;
    auto swapped = [&] {
        const auto& have = viewer->framebuffer();
        if (have.size() != frame->pixels.size()) return false;
        for (std::size_t i = 0; i < have.size(); i += 4)
            if (have[i] != frame->pixels[i + 2] || have[i + 1] != frame->pixels[i + 1] ||
                have[i + 2] != frame->pixels[i])
                return false;
        return true;
    };
    EXPECT_TRUE(viewer->wait_until(swapped));
}

// ---- input and authentication ----

TEST(VncServer, ControlClientInputReachesTheHandler) {
    FrameMirror mirror;
    fill_mirror(mirror, 64, 64, 1);
    InputLog log;
    VncServer server(mirror, server_options(), log.handler());
    auto viewer = TestViewer::connect(viewer_options(server));
    ASSERT_TRUE(viewer);

    ASSERT_TRUE(viewer->send_pointer(10, 20, rfbButton1Mask));
    ASSERT_TRUE(viewer->send_pointer(11, 21, 0));
    ASSERT_TRUE(viewer->send_pointer(5, 6, rfbWheelDownMask));
    ASSERT_TRUE(viewer->send_key(XK_a, true));
    ASSERT_TRUE(viewer->send_key(XK_a, false));
    ASSERT_TRUE(viewer->send_key(XK_Return, true));
    ASSERT_TRUE(viewer->send_cut_text("h\xe9llo"));  // ISO 8859-1 e-acute
    ASSERT_TRUE(eventually([&] { return log.total() == 7; })) << log.total();

    std::lock_guard lock(log.mutex);
    using Pointer = std::tuple<int, int, int>;
    EXPECT_EQ(log.pointer, (std::vector<Pointer>{{10, 20, 1}, {11, 21, 0}, {5, 6, 16}}));
    using Key = std::pair<std::uint32_t, bool>;
    EXPECT_EQ(log.keys, (std::vector<Key>{{0x61, true}, {0x61, false}, {0xff0d, true}}));
    EXPECT_EQ(log.cut_text, (std::vector<std::string>{"h\xc3\xa9llo"}));
    EXPECT_EQ(server.stats().input_events, 7u);
    EXPECT_EQ(server.ignored_input_events(), 0u);
}

TEST(VncServer, ViewOnlyInputNeverReachesTheHandler) {
    FrameMirror mirror;
    fill_mirror(mirror, 64, 64, 1);
    InputLog log;
    VncServer server(mirror, server_options(), log.handler());
    auto spectator = TestViewer::connect(viewer_options(server, kViewPassword));
    ASSERT_TRUE(spectator);
    // A spectator sees the screen like anyone else.
    ASSERT_TRUE(spectator->wait_until([&] { return shows(*spectator, mirror.snapshot()); }));

    ASSERT_TRUE(spectator->send_pointer(3, 4, rfbButton1Mask));  // and keeps the button down
    ASSERT_TRUE(spectator->send_key(XK_a, true));
    ASSERT_TRUE(spectator->send_key(XK_a, false));
    ASSERT_TRUE(spectator->send_cut_text("nope"));
    ASSERT_TRUE(eventually([&] { return server.ignored_input_events() == 4; }))
        << server.ignored_input_events();
    EXPECT_EQ(log.total(), 0u);

    // The spectator's held button does not lock the controlling client out.
    auto controller = TestViewer::connect(viewer_options(server));
    ASSERT_TRUE(controller);
    ASSERT_TRUE(controller->send_pointer(30, 31, 0));
    ASSERT_TRUE(eventually([&] { return log.total() == 1; }));
    {
        std::lock_guard lock(log.mutex);
        EXPECT_EQ(log.pointer.front(), std::make_tuple(30, 31, 0));
    }
    auto stats = server.stats();
    EXPECT_EQ(stats.view_only_logins, 1u);
    EXPECT_EQ(stats.control_logins, 1u);
    EXPECT_EQ(stats.ignored_input_events, 4u);
    EXPECT_EQ(stats.input_events, 1u);
}

TEST(VncServer, WrongPasswordIsRefused) {
    FrameMirror mirror;
    fill_mirror(mirror, 32, 32, 1);
    InputLog log;
    VncServer server(mirror, server_options(), log.handler());
    EXPECT_FALSE(TestViewer::connect(viewer_options(server, "wrong-pw")));
    EXPECT_FALSE(TestViewer::connect(viewer_options(server, std::string(kPassword, 7))));
    // Only the first 8 characters count: a different 9th character still logs in.
    EXPECT_TRUE(TestViewer::connect(viewer_options(server, std::string(kPassword, 8) + "X")));
    auto stats = server.stats();
    EXPECT_EQ(stats.failed_logins, 2u);
    EXPECT_EQ(stats.control_logins, 1u);

    // Without a view-only password, only the control password works.
    auto options = server_options();
    options.view_only_password.clear();
    VncServer strict(mirror, options);
    EXPECT_FALSE(TestViewer::connect(viewer_options(strict, kViewPassword)));
    EXPECT_TRUE(TestViewer::connect(viewer_options(strict)));
}

TEST(VncServer, MaxClientsRefusesTheNextConnection) {
    FrameMirror mirror;
    fill_mirror(mirror, 32, 32, 1);
    auto options = server_options();
    options.max_clients = 1;
    VncServer server(mirror, options);
    auto first = TestViewer::connect(viewer_options(server));
    ASSERT_TRUE(first);
    EXPECT_FALSE(TestViewer::connect(viewer_options(server)));
    EXPECT_EQ(server.stats().connections_refused, 1u);
    first.reset();
    ASSERT_TRUE(eventually([&] { return server.clients() == 0; }));
    EXPECT_TRUE(TestViewer::connect(viewer_options(server)));
}

// ---- cursor ----

TEST(VncServer, RichCursorAndPositionReachAClientThatAsks) {
    FrameMirror mirror;
    fill_mirror(mirror, 128, 96, 1);
    mirror.set_cursor_shape(16, 16, 3, 4, 1, cursor_argb(16));
    mirror.set_cursor_position(50, 40);
    VncServer server(mirror, server_options());
    auto options = viewer_options(server);
    options.remote_cursor = true;
    auto viewer = TestViewer::connect(options);
    ASSERT_TRUE(viewer);
    ASSERT_TRUE(viewer->wait_until([&] {
        return viewer->cursor_shape() && viewer->cursor_position() &&
               shows(*viewer, mirror.snapshot());
    }));
    // It draws the cursor itself, so its pixels are the bare frame.
    const auto& shape = *viewer->cursor_shape();
    EXPECT_EQ(shape.width, 16);
    EXPECT_EQ(shape.height, 16);
    EXPECT_EQ(shape.xhot, 3);
    EXPECT_EQ(shape.yhot, 4);
    ASSERT_EQ(shape.bytes_per_pixel, 4);
    auto pixel = [&](int x, int y) {
        const std::uint8_t* p = &shape.pixels[(static_cast<std::size_t>(y) * 16 + x) * 4];
        return std::array<int, 3>{p[0], p[1], p[2]};  // B, G, R
    };
    EXPECT_EQ(pixel(8, 8), (std::array<int, 3>{0, 0, 255}));  // opaque red
    EXPECT_EQ(pixel(0, 0), (std::array<int, 3>{255, 0, 0}));  // border un-premultiplied: blue
    EXPECT_NE(shape.mask[8 * 16 + 8], 0);
    EXPECT_NE(shape.mask[0], 0);  // alpha 128 counts as opaque on the 1-bit wire mask
    EXPECT_EQ(*viewer->cursor_position(), std::make_pair(50, 40));

    // The agent moves the pointer: the position follows; a new shape replaces the old one.
    mirror.set_cursor_position(70, 20);
    ASSERT_TRUE(
        viewer->wait_until([&] { return viewer->cursor_position() == std::make_pair(70, 20); }));
    int shapes = viewer->cursor_shapes_received();
    mirror.set_cursor_shape(8, 8, 0, 0, 2, cursor_argb(8));
    ASSERT_TRUE(viewer->wait_until([&] { return viewer->cursor_shapes_received() > shapes; }));
    EXPECT_EQ(viewer->cursor_shape()->width, 8);
    EXPECT_TRUE(shows(*viewer, mirror.snapshot()));
}

TEST(VncServer, OwnPointerPositionIsNotEchoedBack) {
    FrameMirror mirror;
    fill_mirror(mirror, 128, 96, 1);
    mirror.set_cursor_shape(16, 16, 0, 0, 1, cursor_argb(16));
    mirror.set_cursor_position(5, 5);
    InputLog log;
    VncServer server(mirror, server_options(), log.handler());
    auto options = viewer_options(server);
    options.remote_cursor = true;
    auto viewer = TestViewer::connect(options);
    ASSERT_TRUE(viewer);
    ASSERT_TRUE(viewer->wait_until([&] { return viewer->cursor_position().has_value(); }));

    // The viewer moves the pointer; the agent's pointer follows (as deskboxd would make it).
    ASSERT_TRUE(viewer->send_pointer(60, 61, 0));
    ASSERT_TRUE(eventually([&] { return log.total() == 1; }));
    mirror.set_cursor_position(60, 61);
    // Then the agent moves it by itself: that position is sent, the echo before it was not.
    mirror.set_cursor_position(90, 10);
    ASSERT_TRUE(
        viewer->wait_until([&] { return viewer->cursor_position() == std::make_pair(90, 10); }));
    // A spectator that never moved gets the same position.
    auto spectator_options = viewer_options(server, kViewPassword);
    spectator_options.remote_cursor = true;
    auto spectator = TestViewer::connect(spectator_options);
    ASSERT_TRUE(spectator);
    ASSERT_TRUE(spectator->wait_until(
        [&] { return spectator->cursor_position() == std::make_pair(90, 10); }));
}

TEST(VncServer, CursorIsDrawnForClientsWithoutCursorSupport) {
    FrameMirror mirror;
    fill_mirror(mirror, 128, 96, 1);
    mirror.set_cursor_shape(16, 16, 3, 4, 1, cursor_argb(16));
    mirror.set_cursor_position(50, 40);
    VncServer server(mirror, server_options());
    auto viewer = TestViewer::connect(viewer_options(server));  // no remote cursor
    ASSERT_TRUE(viewer);

    auto composited = [&] {
        FrameSnapshot snapshot = mirror.snapshot();
        std::vector<std::uint8_t> pixels = snapshot.frame->pixels;
        composite_cursor(pixels.data(), snapshot.width(), snapshot.height(),
                         snapshot.frame->stride(), 0, 0, snapshot.cursor);
        return pixels;
    };
    // libvncserver blends straight colour with its own rounding: allow one or two steps.
    ASSERT_TRUE(viewer->wait_until([&] { return max_difference(*viewer, composited()) <= 2; }))
        << max_difference(*viewer, composited());
    EXPECT_FALSE(shows(*viewer, mirror.snapshot()));  // the cursor really is in the pixels

    // The pointer moves: the old spot is repaired, the cursor drawn at the new one.
    mirror.set_cursor_position(100, 70);
    ASSERT_TRUE(viewer->wait_until([&] { return max_difference(*viewer, composited()) <= 2; }));
    // Damage under the cursor keeps the cursor on top.
    mirror.apply_damage(mirror.seq() + 1, 90, 60, 30, 30, pattern(30, 30, 7));
    ASSERT_TRUE(viewer->wait_until([&] { return max_difference(*viewer, composited()) <= 2; }));
}

TEST(VncServer, OversizedCursorIsScaledDown) {
    FrameMirror mirror;
    fill_mirror(mirror, 256, 256, 1);
    mirror.set_cursor_shape(128, 128, 64, 32, 1, cursor_argb(128));
    mirror.set_cursor_position(100, 100);
    VncServer server(mirror, server_options());
    auto options = viewer_options(server);
    options.remote_cursor = true;
    auto viewer = TestViewer::connect(options);
    ASSERT_TRUE(viewer);
    ASSERT_TRUE(viewer->wait_until(
        [&] { return viewer->cursor_shape() && shows(*viewer, mirror.snapshot()); }));
    EXPECT_EQ(viewer->cursor_shape()->width, 64);
    EXPECT_EQ(viewer->cursor_shape()->xhot, 32);
    EXPECT_EQ(viewer->cursor_shape()->yhot, 16);
    // The connection is still in step: later damage still arrives.
    mirror.apply_damage(mirror.seq() + 1, 0, 0, 16, 16, pattern(16, 16, 8));
    EXPECT_TRUE(viewer->wait_until([&] { return shows(*viewer, mirror.snapshot()); }));
}

// ---- lifetime ----

TEST(VncServer, StopWithClientsLeavesNoThreadOrDescriptor) {
    FrameMirror mirror;
    fill_mirror(mirror, 64, 64, 1);
    // The low numbers kept back for libvncserver's select() are the process's, not a server's.
    VncServer::reserve_descriptors();
    auto fds_before = count_entries("/proc/self/fd");
    auto threads_before = count_entries("/proc/self/task");
    {
        VncServer server(mirror, server_options());
        auto control = TestViewer::connect(viewer_options(server));
        auto spectator = TestViewer::connect(viewer_options(server, kViewPassword));
        ASSERT_TRUE(control && spectator);
        ASSERT_TRUE(control->wait_until([&] { return shows(*control, mirror.snapshot()); }));
        EXPECT_EQ(server.clients(), 2u);
        EXPECT_GT(count_entries("/proc/self/task"), threads_before);

        server.stop();
        EXPECT_TRUE(control->wait_until([] { return false; }, 10s) || control->closed());
        EXPECT_TRUE(control->closed());
        EXPECT_TRUE(spectator->wait_until([] { return false; }, 10s) || spectator->closed());
        EXPECT_TRUE(spectator->closed());
        EXPECT_EQ(server.clients(), 0u);
        EXPECT_EQ(count_entries("/proc/self/task"), threads_before);
        // The port is released: nothing listens any more.
        EXPECT_FALSE(TestViewer::connect(viewer_options(server)));
        server.stop();  // idempotent
    }
    EXPECT_EQ(count_entries("/proc/self/fd"), fds_before);
    EXPECT_EQ(count_entries("/proc/self/task"), threads_before);
}

TEST(VncServer, ClosingTheMirrorDisconnectsClients) {
    FrameMirror mirror;
    fill_mirror(mirror, 64, 64, 1);
    VncServer server(mirror, server_options());
    auto viewer = TestViewer::connect(viewer_options(server));
    ASSERT_TRUE(viewer);
    ASSERT_TRUE(viewer->wait_until([&] { return shows(*viewer, mirror.snapshot()); }));

    mirror.close();
    viewer->wait_until([] { return false; }, 10s);
    EXPECT_TRUE(viewer->closed());
    ASSERT_TRUE(eventually([&] { return server.clients() == 0; }));
    EXPECT_TRUE(server.stats().mirror_closed);
    // Later connections end at once.
    EXPECT_FALSE(TestViewer::connect(viewer_options(server)));
    EXPECT_GE(server.stats().connections_refused, 1u);
}

TEST(VncServer, ManyServersStartAndStopSideBySide) {
    // libvncserver has process-wide state; servers created and stopped while others serve
    // clients must not disturb them.
    FrameMirror mirror;
    fill_mirror(mirror, 64, 32, 1);
    VncServer steady(mirror, server_options());
    auto viewer = TestViewer::connect(viewer_options(steady));
    ASSERT_TRUE(viewer);
    std::thread churn([&] {
        for (int i = 0; i < 20; ++i) {
            VncServer other(mirror, server_options());
            auto other_viewer = TestViewer::connect(viewer_options(other));
            EXPECT_TRUE(other_viewer);
        }
    });
    for (int i = 0; i < 20; ++i) {
        mirror.apply_damage(mirror.seq() + 1, i, 0, 8, 8, pattern(8, 8, i));
        ASSERT_TRUE(viewer->wait_until([&] { return shows(*viewer, mirror.snapshot()); }));
    }
    churn.join();
}

TEST(VncServer, StalledClientIsDroppedAndOthersRecover) {
    // A client that asks for a big frame and never reads fills its socket; the server's one
    // thread waits for it (libvncserver's write timeout, 5 s) and then drops it.
    constexpr int kWidth = 3000, kHeight = 2000;  // 24 MB raw: more than the socket buffers
    FrameMirror mirror;
    mirror.reset(kWidth, kHeight);
    mirror.apply_damage(1, 0, 0, kWidth, kHeight, pattern(kWidth, kHeight, 6));
    VncServer server(mirror, server_options());
    auto stalled = TestViewer::connect(viewer_options(server));  // asks, then never reads
    ASSERT_TRUE(stalled);
    ASSERT_TRUE(eventually([&] { return server.stats().clients == 1; }));

    auto healthy = TestViewer::connect(viewer_options(server));
    ASSERT_TRUE(healthy);
    ASSERT_TRUE(healthy->wait_until([&] { return shows(*healthy, mirror.snapshot()); }, 60s));
    ASSERT_TRUE(eventually([&] { return server.stats().clients == 1; }, 60s));
    // The stalled one was the one dropped: its stream ends before a whole frame arrived.
    stalled->wait_until([] { return false; }, 30s);
    EXPECT_TRUE(stalled->closed());
    EXPECT_FALSE(shows(*stalled, mirror.snapshot()));
    // And the server still serves damage to the healthy one.
    mirror.apply_damage(2, 100, 100, 50, 50, pattern(50, 50, 2));
    EXPECT_TRUE(healthy->wait_until([&] { return shows(*healthy, mirror.snapshot()); }, 30s));
}

TEST(VncServer, ListensOnIpv6Loopback) {
    FrameMirror mirror;
    fill_mirror(mirror, 32, 32, 1);
    auto options = server_options();
    options.listen_address = "::1";
    std::unique_ptr<VncServer> server;
    try {
        server = std::make_unique<VncServer>(mirror, options);
    } catch (const ParameterError& error) {
        GTEST_SKIP() << "no IPv6 loopback here: " << error.what();
    }
    EXPECT_EQ(server->listen_address(), "::1");
    auto viewer_opts = viewer_options(*server);
    viewer_opts.host = "::1";
    auto viewer = TestViewer::connect(viewer_opts);
    ASSERT_TRUE(viewer);
    EXPECT_TRUE(viewer->wait_until([&] { return shows(*viewer, mirror.snapshot()); }));
}

// ---- a standard client: vncsnapshot ----

double psnr(const cv::Mat& a, const cv::Mat& b) {
    double mse = cv::norm(a, b, cv::NORM_L2SQR) / static_cast<double>(a.total() * a.channels());
    return mse == 0 ? 99.0 : 10.0 * std::log10(255.0 * 255.0 / mse);
}

cv::Mat to_bgr(const std::vector<std::uint8_t>& bgrx, int width, int height) {
    cv::Mat out(height, width, CV_8UC3);
    for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x) {
            const std::uint8_t* p = &bgrx[(static_cast<std::size_t>(y) * width + x) * 4];
            out.at<cv::Vec3b>(y, x) = {p[0], p[1], p[2]};
        }
    return out;
}

class VncSnapshot : public ::testing::Test {
  protected:
    void SetUp() override {
        if (::access("/usr/bin/vncsnapshot", X_OK) != 0)
            GTEST_SKIP() << "vncsnapshot is not installed (apt-get install vncsnapshot)";
        // vncsnapshot -passwd reads the obfuscated form vncpasswd writes.
        std::string file = (dir.path() / "passwd").string();
        ASSERT_EQ(rfbEncryptAndStorePasswd(const_cast<char*>(kPassword), file.data()), 0);
    }
    cv::Mat snapshot(const VncServer& server, const std::string& cursor_flag) {
        std::string out = (dir.path() / ("shot" + cursor_flag + ".jpg")).string();
        auto result =
            run_process({"vncsnapshot", "-quiet", "-passwd", (dir.path() / "passwd").string(),
                         cursor_flag, "127.0.0.1::" + std::to_string(server.port()), out},
                        30s);
        EXPECT_EQ(result.status.exit_code, 0) << result.err << result.out;
        return cv::imread(out, cv::IMREAD_COLOR);
    }
    TempDir dir{"deskbox-vnc"};
};

TEST_F(VncSnapshot, ImageMatchesTheMirror) {
    constexpr int kWidth = 320, kHeight = 200;
    FrameMirror mirror;
    mirror.reset(kWidth, kHeight);
    std::vector<std::uint8_t> pixels = smooth(kWidth, kHeight);
    mirror.apply_damage(1, 0, 0, kWidth, kHeight, pixels);
    VncServer server(mirror, server_options());

    cv::Mat image = snapshot(server, "-nocursor");
    ASSERT_FALSE(image.empty());
    ASSERT_EQ(image.cols, kWidth);
    ASSERT_EQ(image.rows, kHeight);
    cv::Mat expected = to_bgr(pixels, kWidth, kHeight);
    EXPECT_GT(psnr(image, expected), 30.0);
    // Not just anything smooth: a different frame scores far lower.
    cv::Mat other = to_bgr(pattern(kWidth, kHeight, 1), kWidth, kHeight);
    EXPECT_LT(psnr(image, other), 20.0);
    EXPECT_EQ(server.stats().control_logins, 1u);
}

TEST_F(VncSnapshot, CursorOnlyWhenAskedFor) {
    constexpr int kWidth = 320, kHeight = 200;
    FrameMirror mirror;
    mirror.reset(kWidth, kHeight);
    std::vector<std::uint8_t> pixels = smooth(kWidth, kHeight);
    mirror.apply_damage(1, 0, 0, kWidth, kHeight, pixels);
    constexpr int kCursor = 16;
    auto argb = cursor_argb(kCursor);
    mirror.set_cursor_shape(kCursor, kCursor, 0, 0, 1, argb);
    mirror.set_cursor_position(200, 40);
    VncServer server(mirror, server_options());
    cv::Rect cursor_area(200, 40, kCursor, kCursor);
    cv::Mat bare = to_bgr(pixels, kWidth, kHeight);

    // By default the image is the bare screen, like the API's screenshot.
    cv::Mat plain = snapshot(server, "-nocursor");
    ASSERT_FALSE(plain.empty());
    EXPECT_GT(psnr(plain, bare), 30.0);
    EXPECT_GT(psnr(plain(cursor_area), bare(cursor_area)), 30.0);

    // -cursor: vncsnapshot takes the rich cursor and its position and draws it itself. RFB
    // cursors have a 1-bit mask, so it shows the straight colour where alpha >= 50%.
    std::vector<std::uint8_t> masked = pixels;
    for (int y = 0; y < kCursor; ++y)
        for (int x = 0; x < kCursor; ++x) {
            std::uint32_t value;
            std::memcpy(&value, &argb[(static_cast<std::size_t>(y) * kCursor + x) * 4], 4);
            std::uint32_t alpha = value >> 24;
            if (alpha < 128) continue;
            std::uint8_t* p = &masked[(static_cast<std::size_t>(40 + y) * kWidth + 200 + x) * 4];
            for (int c = 0; c < 3; ++c)
                p[c] = static_cast<std::uint8_t>(std::min<std::uint32_t>(
                    255, (((value >> (8 * c)) & 0xFF) * 255 + alpha / 2) / alpha));
        }
    cv::Mat with_cursor = snapshot(server, "-cursor");
    ASSERT_FALSE(with_cursor.empty());
    cv::Mat expected = to_bgr(masked, kWidth, kHeight);
    EXPECT_GT(psnr(with_cursor, expected), 30.0);
    EXPECT_GT(psnr(with_cursor(cursor_area), expected(cursor_area)), 30.0);
    EXPECT_LT(psnr(with_cursor(cursor_area), bare(cursor_area)), 20.0);
}

}  // namespace
}  // namespace deskbox::streaming
