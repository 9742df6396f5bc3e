// deskbox-agent end to end: the real binary on its own Xvfb, driven over the agent channel
// (a Unix socket) exactly as the host will drive it.
// gtest first: Xlib's macros (None, Bool...) break its headers otherwise.
#include <gtest/gtest.h>

#include <X11/Xlib.h>
#include <X11/Xutil.h>
#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "protocol/rpc.hpp"
#include "tests/support/processes.hpp"
#include "tests/support/test_paths.hpp"

namespace deskbox {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

// What the host keeps: a frame built only from damage events.
struct HostMirror {
    std::mutex mutex;
    std::condition_variable changed;
    int width = 0, height = 0;
    std::vector<std::uint8_t> pixels;
    std::uint64_t seq = 0;
    std::vector<json> process_events;
    int cursor_shapes = 0;

    void on_event(protocol::Message&& m) {
        std::lock_guard lock(mutex);
        const auto& h = m.header;
        std::string event = h.value("event", "");
        if (event == "damage") {
            int x = h["x"], y = h["y"], w = h["width"], hh = h["height"];
            ASSERT_EQ(m.body.size(), static_cast<std::size_t>(w) * hh * 4);
            ASSERT_LE(x + w, width);
            ASSERT_LE(y + hh, height);
            for (int row = 0; row < hh; ++row)
                std::memcpy(&pixels[((y + row) * static_cast<std::size_t>(width) + x) * 4],
                            &m.body[static_cast<std::size_t>(row) * w * 4],
                            static_cast<std::size_t>(w) * 4);
            seq = h["seq"];
        } else if (event == "cursor.shape") {
            ++cursor_shapes;
        } else if (event.rfind("process.", 0) == 0) {
            json copy = h;
            copy["data"] = m.body;
            process_events.push_back(copy);
        }
        changed.notify_all();
    }
};

class AgentProcess {
  public:
    explicit AgentProcess(std::vector<std::string> extra = {}) {
        socket_ = (dir_.path() / "agent.sock").string();
        SpawnOptions o;
        o.argv = {deskbox::test_paths::kAgent,
                  "--channel",
                  "unix-listen:" + socket_,
                  "--size",
                  "1024x768",
                  "--log-dir",
                  dir_.path().string()};
        for (auto& a : extra) o.argv.push_back(a);
        o.env_overrides = {{"LANG", "C.UTF-8"}, {"LC_ALL", "C.UTF-8"}};
        o.stderr_file = (dir_.path() / "agent.log").string();
        process_ = ChildProcess::spawn(o);
    }
    // SIGTERM first: the agent stops its desktop (Xvfb runs in a process group of its own).
    ~AgentProcess() { process_.terminate(std::chrono::seconds(10)); }
    // Connects (retrying while the agent starts its desktop) and shakes hands.
    std::unique_ptr<protocol::RpcClient> connect(HostMirror* mirror, json* hello = nullptr) {
        for (int attempt = 0; attempt < 300; ++attempt) {
            int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            sockaddr_un addr{};
            addr.sun_family = AF_UNIX;
            std::strcpy(addr.sun_path, socket_.c_str());
            if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
                auto channel = std::make_unique<protocol::Channel>(fd, fd);
                json peer = protocol::handshake(*channel, "host");
                if (hello) *hello = peer;
                if (mirror) {
                    mirror->width = peer["screen"]["width"];
                    mirror->height = peer["screen"]["height"];
                    mirror->pixels.assign(
                        static_cast<std::size_t>(mirror->width) * mirror->height * 4, 0);
                }
                auto client = std::make_unique<protocol::RpcClient>(std::move(channel));
                if (mirror)
                    client->on_event(
                        [mirror](protocol::Message&& m) { mirror->on_event(std::move(m)); });
                client->start();
                return client;
            }
            ::close(fd);
            if (!process_.running()) break;
            std::this_thread::sleep_for(50ms);
        }
        ADD_FAILURE() << "agent did not come up; log:\n" << log();
        return nullptr;
    }
    std::string log() const {
        std::ifstream in(dir_.path() / "agent.log");
        return std::string((std::istreambuf_iterator<char>(in)), {});
    }
    ChildProcess& process() { return process_; }
    const std::string& socket_path() const { return socket_; }
    const TempDir& dir() const { return dir_; }

  private:
    TempDir dir_{"deskbox-agent-test"};
    std::string socket_;
    ChildProcess process_;
};

using testing::children_of;

// Reads the display directly, for comparison with what came over the channel.
std::vector<std::uint8_t> grab_display(const std::string& name, int w, int h) {
    Display* d = XOpenDisplay(name.c_str());
    EXPECT_NE(d, nullptr);
    if (!d) return {};
    XImage* img = XGetImage(d, DefaultRootWindow(d), 0, 0, w, h, AllPlanes, ZPixmap);
    std::vector<std::uint8_t> out(static_cast<std::size_t>(w) * h * 4);
    for (int y = 0; y < h; ++y)
        std::memcpy(&out[static_cast<std::size_t>(y) * w * 4], img->data + y * img->bytes_per_line,
                    static_cast<std::size_t>(w) * 4);
    XDestroyImage(img);
    XCloseDisplay(d);
    return out;
}

// Compares ignoring the padding byte of BGRX.
bool same_rgb(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); i += 4)
        if (std::memcmp(&a[i], &b[i], 3) != 0) return false;
    return true;
}

TEST(Agent, HelloMirrorAndSyncShowTheScreen) {
    AgentProcess agent;
    HostMirror mirror;
    json hello;
    auto client = agent.connect(&mirror, &hello);
    ASSERT_TRUE(client);
    EXPECT_EQ(hello["screen"]["width"], 1024);
    EXPECT_EQ(hello["screen"]["height"], 768);
    std::string display = hello["display"];

    // Paint the root with a command inside the desktop, then sync: the mirror must match.
    auto r = client->call("exec.run", {{"argv", {"xsetroot", "-solid", "#3366cc"}}});
    EXPECT_EQ(r.result["exit_code"], 0) << r.result.dump();
    auto sync = client->call("screen.sync");
    std::uint64_t seq = sync.result["seq"];
    std::lock_guard lock(mirror.mutex);
    EXPECT_EQ(mirror.seq, seq);
    auto actual = grab_display(display, 1024, 768);
    EXPECT_TRUE(same_rgb(mirror.pixels, actual));
    // 0x3366cc in BGRX.
    EXPECT_EQ(mirror.pixels[0], 0xcc);
    EXPECT_EQ(mirror.pixels[1], 0x66);
    EXPECT_EQ(mirror.pixels[2], 0x33);
    EXPECT_GE(mirror.cursor_shapes, 1);
}

// The host syncs the screen the moment the handshake ends (sandbox create does): the agent must
// have its capture running before it reads that request. It once started reading first, and a
// create failed now and then with "the capture engine is not running".
TEST(Agent, ASyncSentRightAfterTheHandshakeIsAnswered) {
    AgentProcess agent;
    for (int round = 0; round < 25; ++round) {
        HostMirror mirror;
        auto client = agent.connect(&mirror);
        ASSERT_TRUE(client);
        protocol::Reply sync;
        ASSERT_NO_THROW(sync = client->call("screen.sync")) << "round " << round;
        EXPECT_GE(sync.result.value("seq", 0), 1u) << sync.result.dump();
    }
}

TEST(Agent, TypesUnicodeIntoATerminalAndReadsItBack) {
    AgentProcess agent;
    HostMirror mirror;
    auto client = agent.connect(&mirror);
    ASSERT_TRUE(client);
    auto out = agent.dir().path() / "typed.txt";
    // A terminal whose shell writes the first line it reads to a file.
    auto r =
        client->call("exec.run", {{"argv",
                                   {"xterm", "-geometry", "80x10+0+0", "-e", "sh", "-c",
                                    "IFS= read -r line; printf '%s' \"$line\" > " + out.string()}},
                                  {"env", {{"LANG", "C.UTF-8"}, {"LC_ALL", "C.UTF-8"}}},
                                  {"background", true}});
    ASSERT_TRUE(r.result.contains("pid"));
    // Wait for its window.
    bool shown = false;
    for (int i = 0; i < 200 && !shown; ++i) {
        auto w = client->call("windows.list");
        for (auto& win : w.result["windows"])
            if (win.value("class", "").find("xterm") != std::string::npos ||
                win.value("class", "").find("XTerm") != std::string::npos)
                shown = win.value("visible", false);
        if (!shown) std::this_thread::sleep_for(50ms);
    }
    ASSERT_TRUE(shown) << agent.log();
    const std::string text = "Grêmio naïve café 日本語 😀 --help; rm -rf \"$x\"";
    client->call("input.actions", {{"actions",
                                    {{{"type", "click"}, {"x", 100}, {"y", 50}},
                                     {{"type", "type"}, {"text", text + "\n"}}}}});
    std::string got;
    for (int i = 0; i < 200; ++i) {
        try {
            auto f = client->call("files.read", {{"path", out.string()}});
            got = f.body;
            break;
        } catch (const protocol::RpcError&) {
            std::this_thread::sleep_for(50ms);
        }
    }
    EXPECT_EQ(got, text);
}

TEST(Agent, FilesClipboardCursorAndErrors) {
    AgentProcess agent;
    auto client = agent.connect(nullptr);
    ASSERT_TRUE(client);
    std::string blob;
    std::mt19937 rng(7);
    for (int i = 0; i < 300000; ++i) blob.push_back(static_cast<char>(rng()));
    auto path = (agent.dir().path() / "blob.bin").string();
    client->call("files.write", {{"path", path}}, blob);
    EXPECT_EQ(client->call("files.read", {{"path", path}}).body, blob);

    client->call("clipboard.set", {{"text", "naïve 日本語 😀"}});
    EXPECT_EQ(client->call("clipboard.get").result["text"], "naïve 日本語 😀");

    client->call("input.actions", {{"actions", {{{"type", "move"}, {"x", 321}, {"y", 123}}}}});
    auto cursor = client->call("cursor.get").result;
    EXPECT_EQ(cursor["x"], 321);
    EXPECT_EQ(cursor["y"], 123);

    // Out of range: an error naming the field, nothing executed.
    try {
        client->call("input.actions", {{"actions", {{{"type", "click"}, {"x", 1024}, {"y", 5}}}}});
        FAIL() << "click outside the screen accepted";
    } catch (const protocol::RpcError& e) {
        EXPECT_EQ(e.code(), "invalid_action");
        EXPECT_EQ(e.field(), "actions[0].x");
    }
    try {
        client->call("no.such.method");
        FAIL();
    } catch (const protocol::RpcError& e) {
        EXPECT_EQ(e.code(), "unknown_method");
    }
    try {
        client->call("files.read", {{"path", "relative/path"}});
        FAIL();
    } catch (const protocol::RpcError& e) {
        EXPECT_EQ(e.field(), "path");
    }
}

// Accessibility on a desktop without an accessibility bus (this host's Xvfb, no GTK app): the
// agent says so, twice (libatspi is never left half-initialised, where its next call aborts),
// and still checks its params first.
TEST(Agent, AccessibilityWithoutABusSaysSoAndKeepsServing) {
    AgentProcess agent;
    auto client = agent.connect(nullptr);
    ASSERT_TRUE(client);
    for (int attempt = 0; attempt < 2; ++attempt) {
        try {
            client->call("accessibility.tree", {{"scope", "all"}});
            FAIL() << "a tree without an accessibility bus";
        } catch (const protocol::RpcError& e) {
            EXPECT_EQ(e.code(), "accessibility_unavailable");
            const std::string message = e.what();
            // With libatspi (the CI host has it): no bus. Without: no library.
            EXPECT_TRUE(message.find("the accessibility bus is not running") != std::string::npos ||
                        message.find("libatspi not installed") != std::string::npos)
                << message;
        }
    }
    try {
        client->call("accessibility.find", {{"role", "push button"}, {"max_results", 0}});
        FAIL();
    } catch (const protocol::RpcError& e) {
        EXPECT_EQ(e.code(), "bad_request");
        EXPECT_EQ(e.field(), "max_results");
    }
    EXPECT_NO_THROW(client->call("ping"));
}

TEST(Agent, SurvivesGarbageAndServesTheNextHost) {
    AgentProcess agent;
    {
        auto client = agent.connect(nullptr);
        ASSERT_TRUE(client);
    }
    // A peer that sends garbage instead of a hello.
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, agent.socket_path().c_str());
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    std::string garbage(100000, '\xff');
    (void)!::send(fd, garbage.data(), garbage.size(), MSG_NOSIGNAL);
    char buf[4096];
    while (::read(fd, buf, sizeof buf) > 0) {
    }  // the agent closes on us
    ::close(fd);
    EXPECT_TRUE(agent.process().running());
    auto client = agent.connect(nullptr);
    ASSERT_TRUE(client);
    EXPECT_NO_THROW(client->call("ping"));
}

TEST(Agent, BackgroundProcessStreamsOutputAndExit) {
    AgentProcess agent;
    HostMirror mirror;
    auto client = agent.connect(&mirror);
    ASSERT_TRUE(client);
    auto r =
        client->call("exec.run", {{"cmd", "echo one; echo two >&2; exit 7"}, {"stream", true}});
    int pid = r.result["pid"];
    std::unique_lock lock(mirror.mutex);
    ASSERT_TRUE(mirror.changed.wait_for(lock, 10s, [&] {
        for (auto& e : mirror.process_events)
            if (e["event"] == "process.exit" && e["pid"] == pid) return true;
        return false;
    }));
    std::string out, err;
    int exit_code = -1;
    for (auto& e : mirror.process_events) {
        if (e["pid"] != pid) continue;
        if (e["event"] == "process.output")
            (e["stream"] == "stdout" ? out : err) += e["data"].get<std::string>();
        if (e["event"] == "process.exit") exit_code = e["exit_code"];
    }
    EXPECT_EQ(out, "one\n");
    EXPECT_EQ(err, "two\n");
    EXPECT_EQ(exit_code, 7);
}

TEST(Agent, SigtermStopsEverything) {
    AgentProcess agent;
    auto client = agent.connect(nullptr);
    ASSERT_TRUE(client);
    client->call("exec.run", {{"argv", {"sleep", "300"}}, {"background", true}});
    pid_t pid = agent.process().pid();
    auto kids = children_of(pid);
    EXPECT_FALSE(kids.empty());  // Xvfb, the WM, sleep
    agent.process().signal(SIGTERM);
    auto status = agent.process().wait(20s);
    ASSERT_TRUE(status) << "agent did not stop on SIGTERM";
    EXPECT_EQ(status->exit_code, 0) << agent.log();
    for (pid_t kid : kids) EXPECT_NE(::kill(kid, 0), 0) << "child " << kid << " survived";
}

}  // namespace
}  // namespace deskbox
