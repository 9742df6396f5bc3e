// VncServer with TigerVNC's viewer on an Xvfb of its own: pixels, the agent's pointer, input.
// (Apart from the other tests: Xlib's macros clash with OpenCV's and GoogleTest's names.)
#include <unistd.h>

#include <algorithm>
#include <optional>

#include <rfb/rfb.h>  // rfbEncryptAndStorePasswd

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "streaming/vnc/vnc_server.hpp"
#include "tests/streaming/vnc/vnc_test_util.hpp"
#include "tests/support/xvfb.hpp"

#include <X11/Xlib.h>
#include <X11/Xutil.h>
#include <X11/extensions/XTest.h>

namespace deskbox::streaming {
namespace {

using namespace vnc_test;

constexpr int kWidth = 320, kHeight = 200;  // the mirror's screen

class TigerVnc : public testing::XvfbTest {
  protected:
    void SetUp() override {
        if (::access("/usr/bin/xtigervncviewer", X_OK) != 0)
            GTEST_SKIP() << "xtigervncviewer is not installed (apt-get install tigervnc-viewer)";
        XvfbTest::SetUp();
        ASSERT_EQ(rfbEncryptAndStorePasswd(const_cast<char*>(kPassword), passwd.data()), 0);
    }
    ChildProcess start_viewer(int port) {
        SpawnOptions spawn;
        spawn.argv = {"xtigervncviewer",
                      "-passwd",
                      passwd,
                      "-geometry",
                      "+0+0",
                      "-RemoteResize=0",
                      "-AutoSelect=0",
                      "-PreferredEncoding=ZRLE",
                      "-NoJPEG",
                      "127.0.0.1::" + std::to_string(port)};
        spawn.env_overrides = {{"DISPLAY", xvfb().display_name()}};
        spawn.stdout_to_null = true;
        spawn.stderr_to_null = true;
        return ChildProcess::spawn(spawn);
    }
    // A `width` x `height` area of the Xvfb screen, BGRX.
    std::vector<std::uint8_t> grab(int x, int y, int width, int height) {
        std::vector<std::uint8_t> pixels(static_cast<std::size_t>(width) * height * 4);
        XImage* image =
            XGetImage(display(), DefaultRootWindow(display()), x, y, static_cast<unsigned>(width),
                      static_cast<unsigned>(height), AllPlanes, ZPixmap);
        if (!image) return pixels;
        for (int row = 0; row < height; ++row)
            std::memcpy(&pixels[static_cast<std::size_t>(row) * width * 4],
                        image->data + static_cast<std::size_t>(row) * image->bytes_per_line,
                        static_cast<std::size_t>(width) * 4);
        XDestroyImage(image);
        return pixels;
    }
    // Where on the screen `bgrx` (kWidth x kHeight) is shown, within 2 per channel.
    std::optional<std::pair<int, int>> find(const std::vector<std::uint8_t>& bgrx) {
        constexpr int kSearch = 64;
        auto screen = grab(0, 0, kWidth + kSearch, kHeight + kSearch);
        int stride = (kWidth + kSearch) * 4;
        for (int oy = 0; oy < kSearch; ++oy)
            for (int ox = 0; ox < kSearch; ++ox) {
                bool same = true;
                for (int y = 0; y < kHeight && same; ++y)
                    for (int x = 0; x < kWidth * 4 && same; ++x)
                        if (x % 4 != 3 &&
                            std::abs(
                                screen[static_cast<std::size_t>(oy + y) * stride + ox * 4 + x] -
                                bgrx[static_cast<std::size_t>(y) * kWidth * 4 + x]) > 2)
                            same = false;
                if (same) return std::make_pair(ox, oy);
            }
        return std::nullopt;
    }
    TempDir dir{"deskbox-vnc"};
    std::string passwd = (dir.path() / "passwd").string();
};

int max_pixel_difference(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
    int worst = 0;
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
        if (i % 4 != 3) worst = std::max(worst, std::abs(a[i] - b[i]));
    return worst;
}

TEST_F(TigerVnc, ShowsTheMirrorWithTheAgentsPointerAndSendsInput) {
    FrameMirror mirror;
    mirror.reset(kWidth, kHeight);
    mirror.apply_damage(1, 0, 0, kWidth, kHeight, smooth(kWidth, kHeight));
    mirror.set_cursor_shape(16, 16, 0, 0, 1, cursor_argb(16));
    mirror.set_cursor_position(250, 30);
    InputLog log;
    VncServer server(mirror, server_options(), log.handler());
    ChildProcess viewer = start_viewer(server.port());

    // TigerVNC takes cursor shapes but not PointerPos, so the agent's pointer is drawn into its
    // pixels (libvncserver's blend: within 2 of ours).
    auto expected = [&] {
        FrameSnapshot snapshot = mirror.snapshot();
        std::vector<std::uint8_t> pixels = snapshot.frame->pixels;
        composite_cursor(pixels.data(), kWidth, kHeight, kWidth * 4u, 0, 0, snapshot.cursor);
        return pixels;
    };
    // Without a window manager the viewer's window lands near, not exactly at, the top left:
    // find where its picture is.
    std::optional<std::pair<int, int>> origin;
    ASSERT_TRUE(eventually([&] {
        origin = find(expected());
        return origin.has_value();
    })) << "the viewer never showed the mirror's picture (with the cursor drawn in)";
    auto shows_now = [&] {
        return max_pixel_difference(grab(origin->first, origin->second, kWidth, kHeight),
                                    expected()) <= 2;
    };

    // Damage reaches it too.
    mirror.apply_damage(2, 10, 10, 64, 48, pattern(64, 48, 3));
    ASSERT_TRUE(eventually(shows_now));
    // And the agent's pointer moving.
    mirror.set_cursor_position(100, 150);
    ASSERT_TRUE(eventually(shows_now));

    // A click and a key in its window reach the InputHandler in screen coordinates.
    Display* d = display();
    XTestFakeMotionEvent(d, DefaultScreen(d), origin->first + 40, origin->second + 50, 0);
    XTestFakeButtonEvent(d, 1, True, 0);
    XTestFakeButtonEvent(d, 1, False, 0);
    // No window manager gives it the keyboard focus: do that here, as clicking would.
    Window root = 0, child = 0;
    int root_x = 0, root_y = 0, win_x = 0, win_y = 0;
    unsigned int buttons = 0;
    XQueryPointer(d, DefaultRootWindow(d), &root, &child, &root_x, &root_y, &win_x, &win_y,
                  &buttons);
    ASSERT_NE(child, 0u);
    XSetInputFocus(d, child, RevertToParent, CurrentTime);
    XSync(d, False);
    XTestFakeKeyEvent(d, XKeysymToKeycode(d, XK_a), True, 0);
    XTestFakeKeyEvent(d, XKeysymToKeycode(d, XK_a), False, 0);
    XSync(d, False);
    auto saw = [&] {
        std::lock_guard lock(log.mutex);
        bool pressed = std::find(log.pointer.begin(), log.pointer.end(),
                                 std::make_tuple(40, 50, 1)) != log.pointer.end();
        bool released = !log.pointer.empty() && log.pointer.back() == std::make_tuple(40, 50, 0);
        bool key = std::find(log.keys.begin(), log.keys.end(), std::make_pair(0x61u, false)) !=
                   log.keys.end();
        return pressed && released && key;
    };
    EXPECT_TRUE(eventually(saw)) << [&] {
        std::lock_guard lock(log.mutex);
        std::string seen;
        for (auto [x, y, mask] : log.pointer)
            seen += "(" + std::to_string(x) + "," + std::to_string(y) + "," + std::to_string(mask) +
                    ") ";
        for (auto [keysym, down] : log.keys)
            seen += "key " + std::to_string(keysym) + (down ? " down " : " up ");
        return seen;
    }();
    EXPECT_EQ(server.stats().control_logins, 1u);
    viewer.terminate();
}

}  // namespace
}  // namespace deskbox::streaming
