// Screen capture on a real Xvfb: the test draws with Xlib on its own connection, keeps a
// host-side mirror by applying every damage rect the engine emits, and checks the mirror
// against what was drawn and against a fresh XGetImage of the whole screen.
// GoogleTest first: Xlib defines macros (None, Bool) that clash with its names.
#include <gtest/gtest.h>

#include <future>

#include <X11/Xlib.h>
#include <X11/Xutil.h>
#include <X11/cursorfont.h>
#ifdef DESKBOX_HAVE_XRANDR
#include <X11/extensions/Xrandr.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "guest-desktop/capture/capture_engine.hpp"
#include "guest-desktop/capture/screen_grabber.hpp"
#include "guest-desktop/capture/tile_differ.hpp"
#include "tests/support/xvfb.hpp"

namespace deskbox::capture {
namespace {

using namespace std::chrono_literals;

// Applies damage rects to a full-screen BGRX buffer, as the host's frame mirror will.
struct Mirror {
    std::mutex mutex;
    int width = 0;
    int height = 0;
    std::vector<std::uint8_t> pixels;
    std::vector<Rect> rects;
    std::uint64_t last_seq = 0;
    std::vector<std::string> problems;  // seq gaps, bad sizes
    std::vector<CursorImage> shapes;
    std::vector<CursorPosition> positions;
    std::vector<std::string> errors;

    Mirror(int w, int h) : width(w), height(h), pixels(static_cast<std::size_t>(w) * h * 4, 0) {}

    CaptureCallbacks callbacks() {
        CaptureCallbacks c;
        c.on_damage = [this](DamageRect&& r) { apply(r); };
        c.on_cursor_shape = [this](CursorImage&& s) {
            std::lock_guard lock(mutex);
            shapes.push_back(std::move(s));
        };
        c.on_cursor_position = [this](CursorPosition p) {
            std::lock_guard lock(mutex);
            positions.push_back(p);
        };
        c.on_error = [this](const std::string& e) {
            std::lock_guard lock(mutex);
            errors.push_back(e);
        };
        return c;
    }

    void apply(const DamageRect& r) {
        std::lock_guard lock(mutex);
        if (r.seq != last_seq + 1)
            problems.push_back("seq " + std::to_string(r.seq) + " after " +
                               std::to_string(last_seq));
        last_seq = r.seq;
        if (r.x < 0 || r.y < 0 || r.width <= 0 || r.height <= 0 || r.x + r.width > width ||
            r.y + r.height > height ||
            r.pixels.size() != static_cast<std::size_t>(r.width) * r.height * 4) {
            problems.push_back("bad rect " + std::to_string(r.x) + "," + std::to_string(r.y) + " " +
                               std::to_string(r.width) + "x" + std::to_string(r.height));
            return;
        }
        rects.push_back({r.x, r.y, r.width, r.height});
        std::size_t row_bytes = static_cast<std::size_t>(r.width) * 4;
        for (int row = 0; row < r.height; ++row)
            std::memcpy(&pixels[(static_cast<std::size_t>(r.y + row) * width + r.x) * 4],
                        r.pixels.data() + row * row_bytes, row_bytes);
    }

    std::uint32_t rgb_at(int x, int y) {
        std::lock_guard lock(mutex);
        std::uint32_t v;
        std::memcpy(&v, &pixels[(static_cast<std::size_t>(y) * width + x) * 4], 4);
        return v & 0xffffff;
    }
    std::size_t rect_count() {
        std::lock_guard lock(mutex);
        return rects.size();
    }
};

// The whole screen by plain XGetImage on the test's own connection, rows tightly packed.
std::vector<std::uint8_t> reference_screen(Display* dpy) {
    Window root = DefaultRootWindow(dpy);
    XWindowAttributes a{};
    XGetWindowAttributes(dpy, root, &a);
    XImage* image = XGetImage(dpy, root, 0, 0, static_cast<unsigned>(a.width),
                              static_cast<unsigned>(a.height), AllPlanes, ZPixmap);
    EXPECT_NE(image, nullptr);
    std::vector<std::uint8_t> out(static_cast<std::size_t>(a.width) * a.height * 4);
    if (!image) return out;
    EXPECT_EQ(image->bits_per_pixel, 32);
    for (int y = 0; y < a.height; ++y)
        std::memcpy(&out[static_cast<std::size_t>(y) * a.width * 4],
                    image->data + static_cast<std::size_t>(y) * image->bytes_per_line,
                    static_cast<std::size_t>(a.width) * 4);
    XDestroyImage(image);
    return out;
}

// First differing pixel, for a readable failure.
std::string describe_difference(const std::vector<std::uint8_t>& got,
                                const std::vector<std::uint8_t>& want, int width) {
    if (got.size() != want.size()) return "sizes differ";
    std::size_t differing = 0, first = 0;
    for (std::size_t i = 0; i < got.size(); i += 4) {
        if (std::memcmp(&got[i], &want[i], 4) != 0) {
            if (differing++ == 0) first = i / 4;
        }
    }
    if (!differing) return "";
    std::ostringstream s;
    s << differing << " pixels differ, first at (" << first % width << "," << first / width << ")";
    return s.str();
}

struct Painter {
    Display* dpy;
    GC gc;
    explicit Painter(Display* d) : dpy(d), gc(XCreateGC(d, DefaultRootWindow(d), 0, nullptr)) {}
    ~Painter() { XFreeGC(dpy, gc); }
    // On Xvfb's TrueColor depth-24 visual a pixel value is 0xRRGGBB.
    void fill(Drawable d, std::uint32_t rgb, int x, int y, int w, int h) {
        XSetForeground(dpy, gc, rgb);
        XFillRectangle(dpy, d, gc, x, y, static_cast<unsigned>(w), static_cast<unsigned>(h));
    }
    void point(Drawable d, std::uint32_t rgb, int x, int y) {
        XSetForeground(dpy, gc, rgb);
        XDrawPoint(dpy, d, gc, x, y);
    }
};

struct Mode {
    bool xshm;
    bool xdamage;
};

std::string mode_name(const ::testing::TestParamInfo<Mode>& info) {
    return std::string(info.param.xshm ? "XShm" : "XGetImage") +
           (info.param.xdamage ? "_XDamage" : "_Polling");
}

constexpr int kWidth = 1000;  // not a multiple of the tile size: edge tiles are narrower
constexpr int kHeight = 700;

class CaptureTest : public testing::XvfbTest {
  protected:
    desktop::XvfbOptions xvfb_options() const override {
        desktop::XvfbOptions o;
        o.width = kWidth;
        o.height = kHeight;
        return o;
    }
    Window root() const { return DefaultRootWindow(display()); }

    // Makes sure the server has processed everything this client sent.
    void flush_to_server() { XSync(display(), False); }

    void expect_mirror_equals_screen(Mirror& mirror) {
        auto want = reference_screen(display());
        std::lock_guard lock(mirror.mutex);
        EXPECT_EQ(describe_difference(mirror.pixels, want, kWidth), "");
        EXPECT_TRUE(mirror.problems.empty()) << mirror.problems.front();
    }
};

class CaptureModeTest : public CaptureTest, public ::testing::WithParamInterface<Mode> {
  protected:
    CaptureOptions options(int max_fps = 30) const {
        CaptureOptions o;
        o.max_fps = max_fps;
        o.use_xshm = GetParam().xshm;
        o.use_xdamage = GetParam().xdamage;
        return o;
    }
};

INSTANTIATE_TEST_SUITE_P(Modes, CaptureModeTest,
                         ::testing::Values(Mode{true, true}, Mode{false, true}, Mode{true, false},
                                           Mode{false, false}),
                         mode_name);

TEST_P(CaptureModeTest, ReportsTheRequestedPaths) {
    CaptureEngine engine(xvfb().display_name(), options());
    EXPECT_EQ(engine.using_xshm(), GetParam().xshm);
    EXPECT_EQ(engine.using_xdamage(), GetParam().xdamage);
    EXPECT_EQ(engine.width(), kWidth);
    EXPECT_EQ(engine.height(), kHeight);
}

TEST_P(CaptureModeTest, FirstFrameCoversTheScreenAndMatchesIt) {
    Painter paint(display());
    paint.fill(root(), 0x123456, 0, 0, kWidth, kHeight);
    flush_to_server();
    Mirror mirror(kWidth, kHeight);
    CaptureEngine engine(xvfb().display_name(), options());
    engine.set_callbacks(mirror.callbacks());
    engine.start();
    EXPECT_EQ(engine.sync(), 1u);
    ASSERT_EQ(mirror.rect_count(), 1u);
    EXPECT_EQ(mirror.rects[0], (Rect{0, 0, kWidth, kHeight}));
    EXPECT_EQ(mirror.rgb_at(999, 699), 0x123456u);
    expect_mirror_equals_screen(mirror);
}

TEST_P(CaptureModeTest, KnownPixelsOnRootAndInAWindowArriveExactly) {
    Mirror mirror(kWidth, kHeight);
    CaptureEngine engine(xvfb().display_name(), options());
    engine.set_callbacks(mirror.callbacks());
    engine.start();
    engine.sync();

    Painter paint(display());
    paint.fill(root(), 0xff0000, 10, 10, 100, 50);
    paint.fill(root(), 0x00ff00, 200, 300, 1, 1);
    paint.fill(root(), 0x0000ff, 990, 690, 10, 10);  // the bottom-right edge tile
    // A child window: drawing into it must reach the root's damage too.
    Window child = XCreateSimpleWindow(display(), root(), 500, 100, 300, 200, 0, 0, 0xabcdef);
    XMapWindow(display(), child);
    paint.fill(child, 0x010203, 20, 30, 40, 50);
    // A pattern of single pixels, one colour each.
    for (int i = 0; i < 64; ++i)
        paint.point(root(), 0x100000u * (i % 16) + 0x000100u * i + 7u, 30 + i * 3, 400 + i % 5);
    flush_to_server();
    std::uint64_t seq = engine.sync();

    EXPECT_EQ(seq, engine.last_seq());
    EXPECT_GT(seq, 1u);
    EXPECT_EQ(mirror.rgb_at(10, 10), 0xff0000u);
    EXPECT_EQ(mirror.rgb_at(109, 59), 0xff0000u);
    EXPECT_NE(mirror.rgb_at(110, 60), 0xff0000u);
    EXPECT_EQ(mirror.rgb_at(200, 300), 0x00ff00u);
    EXPECT_NE(mirror.rgb_at(201, 300), 0x00ff00u);
    EXPECT_EQ(mirror.rgb_at(999, 699), 0x0000ffu);
    EXPECT_EQ(mirror.rgb_at(500, 100), 0xabcdefu);
    EXPECT_EQ(mirror.rgb_at(799, 299), 0xabcdefu);
    EXPECT_EQ(mirror.rgb_at(520, 130), 0x010203u);
    for (int i = 0; i < 64; ++i)
        EXPECT_EQ(mirror.rgb_at(30 + i * 3, 400 + i % 5), 0x100000u * (i % 16) + 0x000100u * i + 7u)
            << "point " << i;
    expect_mirror_equals_screen(mirror);
    XDestroyWindow(display(), child);
}

TEST_P(CaptureModeTest, RandomDrawsLeaveTheMirrorEqualToTheScreen) {
    Mirror mirror(kWidth, kHeight);
    CaptureEngine engine(xvfb().display_name(), options());
    engine.set_callbacks(mirror.callbacks());
    engine.start();

    Painter paint(display());
    std::mt19937 rng(20240611);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    for (int round = 0; round < 12; ++round) {
        int draws = uniform(1, 40);
        for (int i = 0; i < draws; ++i) {
            auto colour = static_cast<std::uint32_t>(uniform(0, 0xffffff));
            switch (uniform(0, 3)) {
                case 0:  // small, possibly hanging over the screen's edge
                    paint.fill(root(), colour, uniform(-20, kWidth), uniform(-20, kHeight),
                               uniform(1, 40), uniform(1, 40));
                    break;
                case 1:  // large
                    paint.fill(root(), colour, uniform(0, kWidth / 2), uniform(0, kHeight / 2),
                               uniform(50, kWidth), uniform(50, kHeight));
                    break;
                case 2:
                    paint.point(root(), colour, uniform(0, kWidth - 1), uniform(0, kHeight - 1));
                    break;
                default: {  // a scroll-like copy
                    int w = uniform(10, 300), h = uniform(10, 300);
                    XCopyArea(display(), root(), root(), paint.gc, uniform(0, kWidth - w),
                              uniform(0, kHeight - h), static_cast<unsigned>(w),
                              static_cast<unsigned>(h), uniform(0, kWidth - w),
                              uniform(0, kHeight - h));
                }
            }
            // Let some draws race the engine's own captures.
            if (uniform(0, 4) == 0) XFlush(display());
        }
        flush_to_server();
        engine.sync();
        SCOPED_TRACE("round " + std::to_string(round));
        expect_mirror_equals_screen(mirror);
    }
    std::lock_guard lock(mirror.mutex);
    EXPECT_TRUE(mirror.errors.empty()) << mirror.errors.front();
}

TEST_P(CaptureModeTest, RedrawingIdenticalPixelsSendsNothing) {
    Painter paint(display());
    paint.fill(root(), 0x336699, 100, 100, 300, 200);
    Window child = XCreateSimpleWindow(display(), root(), 600, 300, 200, 150, 0, 0, 0x445566);
    XMapWindow(display(), child);
    flush_to_server();

    Mirror mirror(kWidth, kHeight);
    CaptureEngine engine(xvfb().display_name(), options());
    engine.set_callbacks(mirror.callbacks());
    engine.start();
    engine.sync();
    std::size_t rects_before = mirror.rect_count();
    auto stats_before = engine.stats();

    paint.fill(root(), 0x336699, 100, 100, 300, 200);  // same colour again
    XClearArea(display(), child, 0, 0, 0, 0, True);    // repaint the background, with Expose
    flush_to_server();
    std::uint64_t seq = engine.sync();

    auto stats_after = engine.stats();
    EXPECT_EQ(mirror.rect_count(), rects_before);
    EXPECT_EQ(seq, 1u);  // only the first frame was ever sent
    EXPECT_EQ(stats_after.tiles_changed, stats_before.tiles_changed);
    // The redraw was seen and compared (the 300x200 fill alone covers at least 4x3 tiles),
    // then dropped: this is not a pass that simply missed the damage.
    EXPECT_GE(stats_after.tiles_compared - stats_before.tiles_compared, 12u);
    expect_mirror_equals_screen(mirror);
    XDestroyWindow(display(), child);
}

TEST_P(CaptureModeTest, SyncRightAfterADrawShowsIt) {
    Mirror mirror(kWidth, kHeight);
    // At 1 capture per second, only sync can make the draw visible this soon.
    CaptureEngine engine(xvfb().display_name(), options(1));
    engine.set_callbacks(mirror.callbacks());
    engine.start();
    engine.sync();
    Painter paint(display());
    for (std::uint32_t colour : {0xaa0000u, 0x00bb00u, 0x0000ccu}) {
        paint.fill(root(), colour, 300, 200, 80, 80);
        flush_to_server();
        engine.sync();
        EXPECT_EQ(mirror.rgb_at(300, 200), colour);
        EXPECT_EQ(mirror.rgb_at(379, 279), colour);
    }
    expect_mirror_equals_screen(mirror);
}

TEST_P(CaptureModeTest, BurstsOfDrawsAreCoalesced) {
    Mirror mirror(kWidth, kHeight);
    CaptureEngine engine(xvfb().display_name(), options(2));
    engine.set_callbacks(mirror.callbacks());
    engine.start();
    engine.sync();
    auto before = engine.stats();

    Painter paint(display());
    constexpr unsigned kDraws = 100;
    for (unsigned i = 0; i < kDraws; ++i) {
        paint.fill(root(), 0x010101u * i, static_cast<int>(i * 37 % 900),
                   static_cast<int>(i * 53 % 600), 60, 60);
        flush_to_server();
        // Spaced out so that an engine capturing on every damage would capture each draw.
        std::this_thread::sleep_for(5ms);
    }
    engine.sync();
    auto after = engine.stats();
    // At most 2 captures per second plus the sync: the draws would have to take 12 s for
    // this bound to be reached, while capturing every damage would pass it ~4 times over.
    EXPECT_LT(after.batches - before.batches, kDraws / 4);
    EXPECT_LT(after.captures - before.captures, kDraws / 4);
    EXPECT_GT(after.rects, before.rects);
    expect_mirror_equals_screen(mirror);
}

TEST_P(CaptureModeTest, FullFrameSendsOneRectOfTheScreen) {
    Mirror mirror(kWidth, kHeight);
    CaptureEngine engine(xvfb().display_name(), options());
    engine.set_callbacks(mirror.callbacks());
    engine.start();
    std::uint64_t first = engine.sync();
    std::uint64_t seq = engine.full_frame();
    EXPECT_EQ(seq, first + 1);
    ASSERT_EQ(mirror.rect_count(), 2u);
    EXPECT_EQ(mirror.rects[1], (Rect{0, 0, kWidth, kHeight}));
    expect_mirror_equals_screen(mirror);
}

// XDamage mode grabs and compares only the damaged tiles, not the screen.
TEST_F(CaptureTest, SmallDamageComparesOnlyItsTile) {
    Mirror mirror(kWidth, kHeight);
    CaptureOptions o;
    o.max_fps = 1;
    o.use_xdamage = true;
    CaptureEngine engine(xvfb().display_name(), o);
    engine.set_callbacks(mirror.callbacks());
    engine.start();
    engine.sync();
    auto before = engine.stats();
    std::size_t rects_before = mirror.rect_count();

    Painter paint(display());
    paint.fill(root(), 0xfedcba, 70, 70, 10, 10);  // inside tile (1,1)
    flush_to_server();
    engine.sync();

    auto after = engine.stats();
    // One pass at most from the timer plus the sync's: each compares tile (1,1) only.
    EXPECT_GE(after.tiles_compared - before.tiles_compared, 1u);
    EXPECT_LE(after.tiles_compared - before.tiles_compared, 2u);
    ASSERT_EQ(mirror.rect_count(), rects_before + 1);
    EXPECT_EQ(mirror.rects.back(), (Rect{64, 64, 64, 64}));
    EXPECT_EQ(mirror.rgb_at(75, 75), 0xfedcbau);
    expect_mirror_equals_screen(mirror);
}

TEST_F(CaptureTest, CursorImageAndPositionFollowThePointer) {
    Mirror mirror(kWidth, kHeight);
    CaptureEngine engine(xvfb().display_name());
    engine.set_callbacks(mirror.callbacks());
    engine.start();
    engine.sync();
    CursorImage initial;
    {
        std::lock_guard lock(mirror.mutex);
        ASSERT_EQ(mirror.shapes.size(), 1u);
        initial = mirror.shapes[0];
        ASSERT_FALSE(mirror.positions.empty());
    }
    EXPECT_GT(initial.width, 0);
    EXPECT_GT(initial.height, 0);
    EXPECT_EQ(initial.pixels.size(), static_cast<std::size_t>(initial.width) * initial.height * 4);

    XWarpPointer(display(), None, root(), 0, 0, 0, 0, 10, 20);
    flush_to_server();
    engine.sync();
    {
        std::lock_guard lock(mirror.mutex);
        EXPECT_EQ(mirror.positions.back(), (CursorPosition{10, 20}));
    }

    // A window with its own cursor; moving the pointer into it changes the displayed cursor.
    Window child = XCreateSimpleWindow(display(), root(), 100, 100, 200, 200, 0, 0, 0xffffff);
    Cursor hand = XCreateFontCursor(display(), XC_hand2);
    XDefineCursor(display(), child, hand);
    XMapWindow(display(), child);
    XWarpPointer(display(), None, root(), 0, 0, 0, 0, 150, 160);
    flush_to_server();
    engine.sync();
    {
        std::lock_guard lock(mirror.mutex);
        EXPECT_EQ(mirror.positions.back(), (CursorPosition{150, 160}));
        ASSERT_GE(mirror.shapes.size(), 2u);
        const CursorImage& now = mirror.shapes.back();
        EXPECT_NE(now.serial, initial.serial);
        EXPECT_NE(now.pixels, initial.pixels);
        EXPECT_EQ(now.pixels.size(), static_cast<std::size_t>(now.width) * now.height * 4);
        // Some pixel is opaque: the 64-bit-per-pixel XFixes array was converted, not garbled.
        bool opaque = false;
        for (std::size_t i = 3; i < now.pixels.size(); i += 4)
            opaque |= static_cast<std::uint8_t>(now.pixels[i]) == 0xff;
        EXPECT_TRUE(opaque);
    }
    // Positions are only sent on change.
    std::size_t positions = mirror.positions.size();
    engine.sync();
    engine.sync();
    EXPECT_EQ(mirror.positions.size(), positions);
    XFreeCursor(display(), hand);
    XDestroyWindow(display(), child);
}

#ifdef DESKBOX_HAVE_XRANDR
TEST_F(CaptureTest, ScreenSizeChangeSendsAFullFrameOfTheNewSize) {
    Mirror mirror(kWidth, kHeight);  // large enough for the smaller screen too
    for (bool xshm : {true, false}) {
        SCOPED_TRACE(xshm ? "XShm" : "XGetImage");
        desktop::XvfbServer server(xvfb_options());
        auto dpy = server.connect();
        CaptureOptions o;
        o.use_xshm = xshm;
        CaptureEngine engine(server.display_name(), o);
        engine.set_callbacks(mirror.callbacks());
        {
            std::lock_guard lock(mirror.mutex);
            mirror.last_seq = 0;
        }
        engine.start();
        engine.sync();

        // Xvfb refuses a screen smaller than its CRTC's mode, so switch the CRTC off first.
        Window root = DefaultRootWindow(dpy.get());
        XRRScreenResources* res = XRRGetScreenResources(dpy.get(), root);
        ASSERT_NE(res, nullptr);
        ASSERT_GE(res->ncrtc, 1);
        XRRSetCrtcConfig(dpy.get(), res, res->crtcs[0], CurrentTime, 0, 0, None, RR_Rotate_0,
                         nullptr, 0);
        XRRFreeScreenResources(res);
        XRRSetScreenSize(dpy.get(), root, 640, 480, 169, 127);
        Painter paint(dpy.get());
        paint.fill(root, 0x5a5a5a, 600, 440, 40, 40);
        XSync(dpy.get(), False);

        // The grab at the old size fails or the ConfigureNotify comes first: either way
        // the engine rebuilds and sends the new screen.
        std::uint64_t seq = 0;
        for (int attempt = 0; attempt < 3 && engine.width() != 640; ++attempt) {
            try {
                seq = engine.sync();
            } catch (const CaptureError&) {
            }
        }
        seq = engine.sync();
        EXPECT_EQ(engine.width(), 640);
        EXPECT_EQ(engine.height(), 480);
        EXPECT_EQ(seq, engine.last_seq());
        EXPECT_EQ(mirror.rgb_at(639, 479), 0x5a5a5au);
        std::lock_guard lock(mirror.mutex);
        EXPECT_TRUE(mirror.problems.empty()) << mirror.problems.front();
        EXPECT_TRUE(std::find(mirror.rects.begin(), mirror.rects.end(), Rect{0, 0, 640, 480}) !=
                    mirror.rects.end());
        auto want = reference_screen(dpy.get());
        for (int y = 0; y < 480; ++y)
            ASSERT_EQ(std::memcmp(&mirror.pixels[static_cast<std::size_t>(y) * kWidth * 4],
                                  &want[static_cast<std::size_t>(y) * 640 * 4], 640 * 4),
                      0)
                << "row " << y;
        mirror.rects.clear();
    }
}
#endif

// Shared memory segments this process created, with their mode bits.
std::vector<unsigned> own_shm_segment_modes() {
    std::ifstream in("/proc/sysvipc/shm");
    std::string line;
    std::getline(in, line);  // header
    std::vector<unsigned> modes;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        long key, shmid;
        unsigned perms;
        unsigned long size;
        long cpid;
        fields >> key >> shmid >> std::oct >> perms >> std::dec >> size >> cpid;
        if (cpid == ::getpid()) modes.push_back(perms);
    }
    return modes;
}

TEST_F(CaptureTest, StopJoinsRestartsAndLeaksNoSegment) {
    ASSERT_TRUE(own_shm_segment_modes().empty());
    {
        Mirror mirror(kWidth, kHeight);
        CaptureOptions o;
        o.use_xshm = true;
        CaptureEngine engine(xvfb().display_name(), o);
        // The segment is already marked for removal: a crash cannot leak it.
        auto modes = own_shm_segment_modes();
        ASSERT_EQ(modes.size(), 1u);
        EXPECT_NE(modes[0] & 01000u, 0u) << "SHM_DEST not set";

        // Not started yet: a sync waits for the start (here it times out first).
        EXPECT_THROW(engine.sync(std::chrono::milliseconds(20)), CaptureError);
        engine.set_callbacks(mirror.callbacks());
        engine.start();
        EXPECT_TRUE(engine.running());
        EXPECT_EQ(engine.sync(), 1u);
        engine.stop();
        EXPECT_FALSE(engine.running());
        engine.stop();  // twice is fine
        EXPECT_THROW(engine.sync(), CaptureError);

        // A restart sends a new base frame.
        engine.start();
        EXPECT_EQ(engine.sync(), 2u);
        EXPECT_EQ(mirror.rects.back(), (Rect{0, 0, kWidth, kHeight}));
        // Destroyed while running: the destructor stops it.
    }
    EXPECT_TRUE(own_shm_segment_modes().empty());
}

// The agent's channel may read a host's first screen.sync before the engine's thread runs
// (a create once failed with "the capture engine is not running"): such a request waits for
// the start and is answered then.
TEST_F(CaptureTest, ASyncAskedBeforeTheStartIsAnsweredOnceItRuns) {
    Mirror mirror(kWidth, kHeight);
    CaptureEngine engine(xvfb().display_name());
    engine.set_callbacks(mirror.callbacks());
    auto early = std::async(std::launch::async, [&] { return engine.sync(); });
    // Give the request time to be queued first; its answer does not depend on this.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    engine.start();
    EXPECT_GE(early.get(), 1u);
    EXPECT_EQ(mirror.rects.front(), (Rect{0, 0, kWidth, kHeight}));

    // Never started: a waiting request is told at the engine's end, not at its timeout.
    CaptureEngine unused(xvfb().display_name());
    auto orphan =
        std::async(std::launch::async, [&] { return unused.sync(std::chrono::seconds(30)); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    unused.stop();
    EXPECT_THROW(orphan.get(), CaptureError);
}

TEST_F(CaptureTest, AThrowingCallbackIsReportedAndCaptureGoesOn) {
    Mirror mirror(kWidth, kHeight);
    CaptureEngine engine(xvfb().display_name());
    auto callbacks = mirror.callbacks();
    callbacks.on_damage = [&](DamageRect&& r) {
        if (r.seq == 2) throw std::runtime_error("consumer failed on seq 2");
        mirror.apply(r);
    };
    engine.set_callbacks(std::move(callbacks));
    engine.start();
    engine.sync();
    Painter paint(display());
    paint.fill(root(), 0x202020, 0, 0, 10, 10);
    flush_to_server();
    try {
        engine.sync();  // throws if the sync's pass ran the callback, not the engine's timer
    } catch (const CaptureError& e) {
        EXPECT_STREQ(e.what(), "sync: consumer failed on seq 2");
    }
    paint.fill(root(), 0x303030, 0, 0, 10, 10);
    flush_to_server();
    EXPECT_EQ(engine.sync(), 3u);
    EXPECT_TRUE(engine.running());
    EXPECT_EQ(mirror.rgb_at(5, 5), 0x303030u);
    EXPECT_EQ(engine.stats().errors, 1u);
    std::lock_guard lock(mirror.mutex);
    ASSERT_EQ(mirror.errors.size(), 1u);
    EXPECT_EQ(mirror.errors[0], "consumer failed on seq 2");
}

TEST_F(CaptureTest, BadOptionsNameTheField) {
    CaptureOptions o;
    o.max_fps = 0;
    try {
        CaptureEngine engine(xvfb().display_name(), o);
        FAIL() << "max_fps 0 accepted";
    } catch (const CaptureError& e) {
        EXPECT_NE(std::string(e.what()).find("max_fps"), std::string::npos) << e.what();
    }
    o = {};
    o.tile_size = 3;
    try {
        CaptureEngine engine(xvfb().display_name(), o);
        FAIL() << "tile_size 3 accepted";
    } catch (const CaptureError& e) {
        EXPECT_NE(std::string(e.what()).find("tile_size"), std::string::npos) << e.what();
    }
    CaptureEngine engine(xvfb().display_name());
    EXPECT_THROW(engine.set_max_fps(5000), CaptureError);
    EXPECT_THROW(CaptureEngine(":4999"), CaptureError);
}

TEST_F(CaptureTest, ScreenGrabberSubRectsMatchTheScreen) {
    Painter paint(display());
    std::mt19937 rng(7);
    for (int i = 0; i < 200; ++i)
        paint.fill(root(), rng() & 0xffffff, static_cast<int>(rng() % kWidth),
                   static_cast<int>(rng() % kHeight), 1 + rng() % 80, 1 + rng() % 80);
    flush_to_server();
    auto want = reference_screen(display());
    for (bool xshm : {true, false}) {
        ScreenGrabber grabber(display(), xshm);
        ASSERT_EQ(grabber.using_xshm(), xshm);
        for (Rect r : {Rect{0, 0, kWidth, kHeight}, Rect{13, 17, 50, 40}, Rect{999, 699, 1, 1},
                       Rect{960, 640, 100, 100} /* clipped */}) {
            ImageView view = grabber.grab(r);
            Rect area = intersect(r, grabber.screen());
            ASSERT_EQ(view.area, area);
            for (int y = area.y; y < area.bottom(); ++y)
                ASSERT_EQ(std::memcmp(view.pixel(area.x, y),
                                      &want[(static_cast<std::size_t>(y) * kWidth + area.x) * 4],
                                      static_cast<std::size_t>(area.width) * 4),
                          0)
                    << (xshm ? "XShm" : "XGetImage") << " rect at " << r.x << "," << r.y << " row "
                    << y;
        }
        EXPECT_THROW(grabber.grab({kWidth, 0, 10, 10}), CaptureError);
    }
}

class NoExtensionsTest : public CaptureTest {
  protected:
    desktop::XvfbOptions xvfb_options() const override {
        auto o = CaptureTest::xvfb_options();
        o.extra_args = {"-extension", "MIT-SHM", "-extension", "DAMAGE"};
        return o;
    }
};

TEST_F(NoExtensionsTest, FallsBackToXGetImageAndPollingOrRefusesWhenRequired) {
    Mirror mirror(kWidth, kHeight);  // outlives the engine that calls into it
    CaptureEngine engine(xvfb().display_name());
    EXPECT_FALSE(engine.using_xshm());
    EXPECT_FALSE(engine.using_xdamage());
    EXPECT_NE(engine.xshm_unavailable_reason().find("MIT-SHM"), std::string::npos)
        << engine.xshm_unavailable_reason();
    EXPECT_NE(engine.xdamage_unavailable_reason().find("DAMAGE"), std::string::npos)
        << engine.xdamage_unavailable_reason();

    engine.set_callbacks(mirror.callbacks());
    engine.start();
    engine.sync();
    Painter paint(display());
    paint.fill(root(), 0x777777, 5, 5, 500, 5);
    flush_to_server();
    engine.sync();
    EXPECT_EQ(mirror.rgb_at(504, 9), 0x777777u);
    expect_mirror_equals_screen(mirror);

    CaptureOptions require_shm;
    require_shm.use_xshm = true;
    try {
        CaptureEngine e(xvfb().display_name(), require_shm);
        FAIL() << "use_xshm=true accepted without MIT-SHM";
    } catch (const CaptureError& e) {
        EXPECT_NE(std::string(e.what()).find("use_xshm"), std::string::npos) << e.what();
    }
    CaptureOptions require_damage;
    require_damage.use_xdamage = true;
    try {
        CaptureEngine e(xvfb().display_name(), require_damage);
        FAIL() << "use_xdamage=true accepted without DAMAGE";
    } catch (const CaptureError& e) {
        EXPECT_NE(std::string(e.what()).find("use_xdamage"), std::string::npos) << e.what();
    }
}

class Depth16Test : public CaptureTest {
  protected:
    desktop::XvfbOptions xvfb_options() const override {
        auto o = CaptureTest::xvfb_options();
        o.depth = 16;
        return o;
    }
};

TEST_F(Depth16Test, UnsupportedPixelFormatIsAClearError) {
    try {
        CaptureEngine engine(xvfb().display_name());
        FAIL() << "a 16-bit screen was accepted";
    } catch (const CaptureError& e) {
        EXPECT_NE(std::string(e.what()).find("depth 16"), std::string::npos) << e.what();
    }
}

// The differ alone, on synthetic images.
TEST(TileDiffer, ReportsOnlyChangedTilesMergedIntoRects) {
    constexpr int w = 200, h = 130, tile = 64;  // 4x3 tiles, the last ones narrower
    std::vector<std::uint8_t> screen(static_cast<std::size_t>(w) * h * 4, 0);
    auto view = [&](Rect area) {
        return ImageView{&screen[(static_cast<std::size_t>(area.y) * w + area.x) * 4],
                         static_cast<std::size_t>(w) * 4, area};
    };
    TileDiffer differ(w, h, tile);
    differ.reset(view({0, 0, w, h}));
    TileGrid all(w, h, tile);
    all.mark_all();
    EXPECT_EQ(differ.compare(view({0, 0, w, h}), all), 12);
    EXPECT_TRUE(differ.take_changed_rects().empty());

    // Change one pixel in tiles (0,0), (1,0) and (3,2), and two tiles of row 1.
    auto poke = [&](int x, int y) { screen[(static_cast<std::size_t>(y) * w + x) * 4 + 1] ^= 1; };
    poke(5, 5);
    poke(127, 63);
    poke(199, 129);
    poke(0, 64);
    poke(64, 127);
    differ.compare(view({0, 0, w, h}), all);
    auto rects = differ.take_changed_rects();
    // Rows 0 and 1 both have tiles 0..1 changed: one 128x128 rect; (3,2) is clipped to 8x2.
    ASSERT_EQ(rects.size(), 2u);
    EXPECT_EQ(rects[0], (Rect{0, 0, 128, 128}));
    EXPECT_EQ(rects[1], (Rect{192, 128, 8, 2}));
    EXPECT_EQ(differ.copy_pixels({199, 129, 1, 1})[1], 1);

    // Only candidate tiles are compared: a change elsewhere stays unseen.
    poke(10, 10);
    poke(150, 100);
    TileGrid one(w, h, tile);
    one.mark_rect({140, 70, 5, 5});  // tile (2,1)
    EXPECT_EQ(differ.compare(view({128, 64, 64, 64}), one), 1);
    rects = differ.take_changed_rects();
    ASSERT_EQ(rects.size(), 1u);
    EXPECT_EQ(rects[0], (Rect{128, 64, 64, 64}));

    EXPECT_THROW(TileDiffer(0, 10, 64), CaptureError);
    EXPECT_THROW(TileDiffer(10, 10, 0), CaptureError);
}

TEST(TileGrid, MergesSpansOfDifferentWidthsSeparately) {
    TileGrid grid(256, 256, 64);
    grid.mark(0, 0);
    grid.mark(1, 0);
    grid.mark(0, 1);  // a narrower span below: not joined
    grid.mark(3, 3);
    auto rects = grid.merged_rects();
    ASSERT_EQ(rects.size(), 3u);
    EXPECT_EQ(rects[0], (Rect{0, 0, 128, 64}));
    EXPECT_EQ(rects[1], (Rect{0, 64, 64, 64}));
    EXPECT_EQ(rects[2], (Rect{192, 192, 64, 64}));
    EXPECT_EQ(grid.bounds(), (Rect{0, 0, 256, 256}));
}

}  // namespace
}  // namespace deskbox::capture
