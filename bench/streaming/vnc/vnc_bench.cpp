// VNC serving a busy 1280x800 desktop. Ours: VncServer fed from the frame mirror (the agent
// sends damage; capture is not part of this figure). Alternative: x11vnc, what people run on an
// Xvfb desktop, on an Xvfb showing the same scene. Both through the same libvncclient viewer
// (tight, lossless) in the same run:
//   1. a 400x300 window moving 30 times a second: updates/s the viewer gets and the server's CPU;
//   2. latency: a 32x32 square changes colour -> the viewer's pixels show it (p50/p95).
//
// Usage: vnc_bench [--seconds S] [--probes N]
#include <X11/Xlib.h>
#include <X11/Xutil.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <opencv2/core.hpp>

#include "bench/streaming/busy_screen.hpp"
#include "common/child_process.hpp"
#include "common/unique_fd.hpp"
#include "guest-desktop/xvfb_server.hpp"
#include "streaming/frame_mirror.hpp"
#include "streaming/vnc/vnc_server.hpp"
#include "tests/streaming/vnc/test_viewer.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using namespace deskbox;
using deskbox::testing::TestViewer;

constexpr int kWidth = 1280, kHeight = 800;
constexpr int kWindowWidth = 400, kWindowHeight = 300;
constexpr int kProbe = 32, kProbeX = 1200, kProbeY = 40;  // in the panel, away from the window
constexpr char kPassword[] = "benchpw1";

double cpu_ms(clockid_t clock) {
    timespec t{};
    clock_gettime(clock, &t);
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}
double thread_cpu_ms() {
    return cpu_ms(CLOCK_THREAD_CPUTIME_ID);
}
double process_cpu_ms() {
    return cpu_ms(CLOCK_PROCESS_CPUTIME_ID);
}

// utime + stime of another process, in milliseconds.
double other_process_cpu_ms(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    std::istringstream fields(text.substr(text.rfind(')') + 2));
    std::string skip;
    for (int i = 3; i < 14; ++i) fields >> skip;  // fields 3..13
    double utime = 0, stime = 0;
    fields >> utime >> stime;
    return (utime + stime) * 1e3 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double percentile(std::vector<double> values, double q) {
    if (values.empty()) return 0;
    std::sort(values.begin(), values.end());
    auto index = static_cast<std::size_t>(q * static_cast<double>(values.size() - 1) + 0.5);
    return values[std::min(values.size() - 1, index)];
}

// Where the moving window is at step i: bouncing across the screen.
cv::Point window_position(int step) {
    auto bounce = [](int value, int range) {
        int period = 2 * range;
        int v = value % period;
        return v < range ? v : period - v;
    };
    return {bounce(step * 12, kWidth - kWindowWidth),
            60 + bounce(step * 7, kHeight - kWindowHeight - 60)};
}

std::uint32_t probe_colour(int i) {
    return 0x00FFFFFFu & (0x3070B0u + static_cast<std::uint32_t>(i) * 0x1F3D5Bu);
}

// What the two setups must be able to do.
class Scene {
  public:
    virtual ~Scene() = default;
    virtual void move_window(int step) = 0;          // called from the animation thread only
    virtual void show_probe(std::uint32_t rgb) = 0;  // called from the main thread only
};

// Ours: the agent's damage, applied to the mirror.
class MirrorScene : public Scene {
  public:
    MirrorScene(streaming::FrameMirror& mirror, const cv::Mat& background, const cv::Mat& window)
        : mirror_(mirror), background_(background), window_(window), frame_(background.clone()) {
        mirror_.reset(kWidth, kHeight, 0);
        apply({0, 0, kWidth, kHeight});
    }
    void move_window(int step) override {
        cv::Point from = position_, to = window_position(step);
        background_(cv::Rect(from, window_.size())).copyTo(frame_(cv::Rect(from, window_.size())));
        window_.copyTo(frame_(cv::Rect(to, window_.size())));
        position_ = to;
        cv::Rect damage = cv::Rect(from, window_.size()) | cv::Rect(to, window_.size());
        apply(damage);
    }
    void show_probe(std::uint32_t rgb) override {
        std::vector<std::uint8_t> pixels(kProbe * kProbe * 4);
        for (std::size_t i = 0; i < pixels.size(); i += 4) {
            pixels[i] = rgb & 0xFF;
            pixels[i + 1] = (rgb >> 8) & 0xFF;
            pixels[i + 2] = (rgb >> 16) & 0xFF;
            pixels[i + 3] = 0;
        }
        std::lock_guard lock(mutex_);
        mirror_.apply_damage(++seq_, kProbeX, kProbeY, kProbe, kProbe, pixels);
    }

  private:
    void apply(const cv::Rect& rect) {
        std::vector<std::uint8_t> pixels(static_cast<std::size_t>(rect.area()) * 4);
        for (int y = 0; y < rect.height; ++y)
            std::memcpy(&pixels[static_cast<std::size_t>(y) * rect.width * 4],
                        frame_.ptr(rect.y + y) + static_cast<std::size_t>(rect.x) * 4,
                        static_cast<std::size_t>(rect.width) * 4);
        std::lock_guard lock(mutex_);
        mirror_.apply_damage(++seq_, rect.x, rect.y, rect.width, rect.height, pixels);
    }
    streaming::FrameMirror& mirror_;
    cv::Mat background_, window_, frame_;
    cv::Point position_ = window_position(0);
    std::mutex mutex_;
    std::uint64_t seq_ = 0;
};

struct ImageDeleter {
    void operator()(XImage* image) const {
        image->data = nullptr;  // the pixels belong to a cv::Mat
        XDestroyImage(image);
    }
};

Pixmap make_pixmap(Display* display, const cv::Mat& bgrx) {
    int screen = DefaultScreen(display);
    Pixmap pixmap = XCreatePixmap(display, RootWindow(display, screen), bgrx.cols, bgrx.rows, 24);
    std::unique_ptr<XImage, ImageDeleter> image(
        XCreateImage(display, DefaultVisual(display, screen), 24, ZPixmap, 0,
                     reinterpret_cast<char*>(bgrx.data), static_cast<unsigned>(bgrx.cols),
                     static_cast<unsigned>(bgrx.rows), 32, static_cast<int>(bgrx.step)));
    XPutImage(display, pixmap, DefaultGC(display, screen), image.get(), 0, 0, 0, 0,
              static_cast<unsigned>(bgrx.cols), static_cast<unsigned>(bgrx.rows));
    return pixmap;
}

// The alternative: the same scene on Xvfb. The X server repaints from background pixmaps by
// itself, so moving the window costs the client one request.
class XScene : public Scene {
  public:
    XScene(const desktop::XvfbServer& xvfb, const cv::Mat& background, const cv::Mat& window)
        : mover_(xvfb.connect()), painter_(xvfb.connect()) {
        Display* d = mover_.get();
        Window root = DefaultRootWindow(d);
        XSetWindowBackgroundPixmap(d, root, make_pixmap(d, background));
        XClearWindow(d, root);
        XSetWindowAttributes attributes{};
        attributes.override_redirect = True;
        attributes.background_pixmap = make_pixmap(d, window);
        cv::Point at = window_position(0);
        window_ = XCreateWindow(d, root, at.x, at.y, kWindowWidth, kWindowHeight, 0, 24,
                                InputOutput, DefaultVisual(d, DefaultScreen(d)),
                                CWOverrideRedirect | CWBackPixmap, &attributes);
        XMapWindow(d, window_);
        XSync(d, False);
    }
    void move_window(int step) override {
        cv::Point to = window_position(step);
        XMoveWindow(mover_.get(), window_, to.x, to.y);
        XFlush(mover_.get());
    }
    void show_probe(std::uint32_t rgb) override {
        Display* d = painter_.get();
        GC gc = DefaultGC(d, DefaultScreen(d));
        XSetForeground(d, gc, rgb);
        XFillRectangle(d, DefaultRootWindow(d), gc, kProbeX, kProbeY, kProbe, kProbe);
        XFlush(d);
    }

  private:
    desktop::DisplayPtr mover_, painter_;  // one connection per thread: Xlib is not locked
    Window window_ = 0;
};

struct Result {
    double updates_per_second = 0;
    double cpu_percent = 0;  // of one core, the VNC server only
    double latency_p50 = 0, latency_p95 = 0;
    int probes_seen = 0;
};

bool shows_probe(const TestViewer& viewer, std::uint32_t rgb) {
    if (viewer.width() != kWidth || viewer.height() != kHeight) return false;
    const std::uint8_t* p =
        &viewer.framebuffer()[(static_cast<std::size_t>(kProbeY + kProbe / 2) * kWidth + kProbeX +
                               kProbe / 2) *
                              4];
    return p[0] == (rgb & 0xFF) && p[1] == ((rgb >> 8) & 0xFF) && p[2] == ((rgb >> 16) & 0xFF);
}

// `server_cpu_ms` reads the server's CPU clock; called from this thread only.
template <typename ServerCpu>
Result run(Scene& scene, TestViewer& viewer, ServerCpu server_cpu_ms, double seconds, int probes) {
    Result result;
    viewer.wait_until([&] { return viewer.updates() > 0; }, 10s);

    // 1. The moving window.
    std::atomic<bool> animating{true};
    std::atomic<double> animation_cpu{0};
    std::thread animation([&] {
        double start = thread_cpu_ms();
        auto next = Clock::now();
        for (int step = 1; animating.load(); ++step) {
            scene.move_window(step);
            next += 33333us;
            std::this_thread::sleep_until(next);
        }
        animation_cpu = thread_cpu_ms() - start;
    });
    double cpu_start = server_cpu_ms();
    double viewer_cpu_start = thread_cpu_ms();
    std::uint64_t updates_start = viewer.updates();
    auto start = Clock::now();
    auto end = start + std::chrono::duration<double>(seconds);
    while (Clock::now() < end) viewer.pump(10ms);
    double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    double viewer_cpu = thread_cpu_ms() - viewer_cpu_start;
    double cpu_end = server_cpu_ms();
    animating = false;
    animation.join();
    double server_cpu = cpu_end - cpu_start;
    if (server_cpu < 0) server_cpu = 0;
    // In-process server: take out this thread (the viewer) and the animation thread.
    if constexpr (std::is_same_v<ServerCpu, double (*)()>) {
        server_cpu -= viewer_cpu + animation_cpu.load();
    }
    result.updates_per_second = static_cast<double>(viewer.updates() - updates_start) / elapsed;
    result.cpu_percent = 100.0 * server_cpu / (elapsed * 1e3);

    // 2. Latency: a square changes colour; how long until the viewer's pixels show it.
    std::vector<double> latencies;
    for (int i = 0; i < probes; ++i) {
        std::uint32_t colour = probe_colour(i);
        viewer.wait_until([] { return false; }, 30ms);  // settle
        auto shown = Clock::now();
        scene.show_probe(colour);
        if (viewer.wait_until([&] { return shows_probe(viewer, colour); }, 5s)) {
            latencies.push_back(
                std::chrono::duration<double, std::milli>(Clock::now() - shown).count());
        }
    }
    result.probes_seen = static_cast<int>(latencies.size());
    result.latency_p50 = percentile(latencies, 0.50);
    result.latency_p95 = percentile(latencies, 0.95);
    return result;
}

int free_port() {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address));
    socklen_t size = sizeof(address);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &size);
    return ntohs(address.sin_port);
}

TestViewer::Options viewer_options(int port) {
    TestViewer::Options options;
    options.port = port;
    options.password = kPassword;
    options.encodings = "tight zrle raw";
    return options;
}

void print(const char* name, const Result& r) {
    std::printf("  %-40s %9.1f %9.1f %9.1f %9.1f   (%d probes seen)\n", name, r.updates_per_second,
                r.cpu_percent, r.latency_p50, r.latency_p95, r.probes_seen);
}

}  // namespace

int main(int argc, char** argv) {
    double seconds = 5;
    int probes = 40;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string flag = argv[i];
        if (flag == "--seconds")
            seconds = std::atof(argv[i + 1]);
        else if (flag == "--probes")
            probes = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "usage: %s [--seconds S] [--probes N]\n", argv[0]);
            return 2;
        }
    }

    cv::Mat background = bench::make_busy_screen(kWidth, kHeight, 1);
    cv::Mat window = bench::make_busy_screen(kWindowWidth, kWindowHeight, 7);

    std::printf(
        "VNC, %dx%d busy desktop, a %dx%d window moving 30x/s, one libvncclient viewer (tight, "
        "lossless), %.0f s each, %d latency probes\n",
        kWidth, kHeight, kWindowWidth, kWindowHeight, seconds, probes);
    std::printf("  %-40s %9s %9s %9s %9s\n", "", "updates/s", "cpu %", "lat p50", "lat p95");

    Result ours;
    {
        streaming::FrameMirror mirror;
        MirrorScene scene(mirror, background, window);
        streaming::VncServer::Options options;
        options.password = kPassword;
        streaming::VncServer server(mirror, options);
        auto viewer = TestViewer::connect(viewer_options(server.port()));
        if (!viewer) {
            std::fprintf(stderr, "cannot connect to our server\n");
            return 1;
        }
        ours = run(scene, *viewer, &process_cpu_ms, seconds, probes);
        print("ours: VncServer from the mirror", ours);
    }

    Result theirs;
    {
        desktop::XvfbOptions xvfb_options;
        xvfb_options.width = kWidth;
        xvfb_options.height = kHeight;
        desktop::XvfbServer xvfb(xvfb_options);
        XScene scene(xvfb, background, window);
        int port = free_port();
        SpawnOptions spawn;
        spawn.argv = {"x11vnc",     "-display", xvfb.display_name(),
                      "-localhost", "-rfbport", std::to_string(port),
                      "-passwd",    kPassword,  "-shared",
                      "-forever",   "-quiet",   "-nowf",
                      "-noxrecord"};
        spawn.stdout_to_null = true;
        spawn.stderr_to_null = true;
        ChildProcess x11vnc = ChildProcess::spawn(spawn);
        std::unique_ptr<TestViewer> viewer;
        auto deadline = Clock::now() + 15s;
        while (!viewer && Clock::now() < deadline) {
            viewer = TestViewer::connect(viewer_options(port));
            if (!viewer) std::this_thread::sleep_for(100ms);
        }
        if (!viewer) {
            std::fprintf(stderr, "x11vnc did not come up\n");
            return 1;
        }
        pid_t pid = x11vnc.pid();
        theirs = run(
            scene, *viewer, [pid] { return other_process_cpu_ms(pid); }, seconds, probes);
        print("alternative: x11vnc on Xvfb", theirs);
        viewer.reset();
        x11vnc.terminate();
    }

    auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
    std::printf(
        "  ours/x11vnc: updates/s %.2fx, cpu %.2fx, latency p50 %.2fx, p95 %.2fx "
        "(below 1 is better for cpu and latency)\n",
        ratio(ours.updates_per_second, theirs.updates_per_second),
        ratio(ours.cpu_percent, theirs.cpu_percent), ratio(ours.latency_p50, theirs.latency_p50),
        ratio(ours.latency_p95, theirs.latency_p95));
    return 0;
}
