// Live streams of a real sandbox, next to x11vnc on the same desktop in the same run:
//   - glass to glass: an action is POSTed -> the first viewer packet showing its effect, for
//     the jpeg and h264 WebSocket streams, p50/p95;
//   - a window moving --fps times a second (30) at --resolution (1280x800): frames per second a
//   viewer receives and
//     the CPU it costs (deskboxd + the sandbox's agent, % of one core), for jpeg, h264, our VNC
//     server, and x11vnc attached to the sandbox's X display (run in the sandbox's network and
//     IPC namespaces with nsenter, so it can use MIT-SHM like it would inside);
//   - ten h264 viewers on one sandbox: frames each and CPU.
//
//   stream_bench [--seconds N] [--latency-samples N] [--resolution WxH] [--fps N (<= 60)]
// Needs root, runc, the minimal template, x11vnc and nsenter. The VNC frame counter is this
// program itself run as `stream_bench --count-vnc HOST PORT PASSWORD SECONDS`.
#include <rfb/rfbclient.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/support/bench_deskboxd.hpp"
#include "bench/support/percentiles.hpp"
#include "bench/support/sandbox_processes.hpp"
#include "common/child_process.hpp"
#include "common/parse_integer.hpp"
#include "common/temp_dir.hpp"
#include "server/client/api_client.hpp"

namespace {

using namespace deskbox;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace beast = boost::beast;
namespace net = boost::asio;
namespace websocket = beast::websocket;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// ---- CPU accounting ----
double cpu_seconds(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    auto close = text.rfind(')');
    if (close == std::string::npos) return 0;
    std::istringstream rest(text.substr(close + 2));
    std::string field;
    double ticks = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i)
        if (i == 14 || i == 15) ticks += std::stod(field);
    return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double cpu_seconds(const std::vector<pid_t>& pids) {
    double sum = 0;
    for (pid_t p : pids) sum += cpu_seconds(p);
    return sum;
}

using bench::Daemon;

// ---- a WebSocket viewer counting packets on its own thread ----
class Viewer {
  public:
    Viewer(int port, const std::string& target) : ws_(io_) {
        beast::get_lowest_layer(ws_).connect(net::ip::tcp::endpoint(
            net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
        ws_.handshake("127.0.0.1", target);
        thread_ = std::thread([this] { loop(); });
    }
    ~Viewer() {
        stop_ = true;
        beast::error_code ec;
        beast::get_lowest_layer(ws_).socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
        thread_.join();
    }
    std::uint64_t packets() const { return packets_; }
    // Waits until a packet arrives after `since` (by count); returns when it did.
    Clock::time_point wait_packet_after(std::uint64_t count, std::chrono::milliseconds timeout) {
        auto end = Clock::now() + timeout;
        while (Clock::now() < end) {
            if (packets_.load() > count) return last_packet_.load();
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        return Clock::time_point{};
    }

  private:
    void loop() {
        beast::flat_buffer buffer;
        while (!stop_) {
            beast::error_code ec;
            ws_.read(buffer, ec);
            if (ec) return;
            if (!ws_.got_text()) {
                last_packet_ = Clock::now();
                ++packets_;
            }
            buffer.consume(buffer.size());
        }
    }
    net::io_context io_;
    websocket::stream<beast::tcp_stream> ws_;
    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::atomic<std::uint64_t> packets_{0};
    std::atomic<Clock::time_point> last_packet_{};
};

// ---- the VNC frame counter (run as a child, possibly inside the sandbox's namespaces) ----
std::string g_vnc_password;
void vnc_quiet(const char*, ...) {}
char* vnc_password(rfbClient*) {
    return strdup(g_vnc_password.c_str());
}
std::atomic<std::uint64_t> g_updates{0};
void vnc_update_done(rfbClient*) {
    ++g_updates;
}

int count_vnc(const std::string& host, int port, const std::string& password, int seconds) {
    g_vnc_password = password;
    rfbClientLog = rfbClientErr = vnc_quiet;
    rfbClient* client = rfbGetClient(8, 3, 4);
    client->serverHost = strdup(host.c_str());
    client->serverPort = port;
    client->GetPassword = vnc_password;
    client->FinishedFrameBufferUpdate = vnc_update_done;
    client->appData.encodingsString = strdup("tight zrle hextile raw");
    client->appData.compressLevel = 1;
    client->appData.qualityLevel = 7;
    client->appData.enableJPEG = TRUE;
    if (!rfbInitClient(client, nullptr, nullptr)) {
        std::printf("error\n");
        return 1;
    }
    auto end = Clock::now() + std::chrono::seconds(seconds);
    while (Clock::now() < end) {
        int n = WaitForMessage(client, 50000);
        if (n < 0) break;
        if (n > 0 && !HandleRFBServerMessage(client)) break;
    }
    std::printf("%llu\n", static_cast<unsigned long long>(g_updates.load()));
    rfbClientCleanup(client);
    return 0;
}

// ---- the sandbox side ----
struct Sandbox {
    std::string id, view_token, control_token, vnc_password;
    int vnc_port = 0;
};

std::vector<pid_t> sandbox_pids(const Daemon& d, const std::string& id) {
    return bench::sandbox_pids(d.state(), id);
}

// CPU used by `pids` while `during` runs, in % of one core.
double measure_cpu_percent(const std::vector<pid_t>& pids, const std::function<void()>& during) {
    double before = cpu_seconds(pids);
    auto t0 = Clock::now();
    during();
    return (cpu_seconds(pids) - before) / (ms_since(t0) / 1000.0) * 100.0;
}

// True once a socket in `pid`'s network namespace listens on TCP `port` (IPv4 or IPv6), read
// from /proc/PID/net/tcp{,6}; false if none does within `timeout`.
bool wait_for_listener(pid_t pid, int port, std::chrono::seconds timeout) {
    char wanted[8];
    std::snprintf(wanted, sizeof wanted, ":%04X", port);
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
        for (const char* table : {"/net/tcp", "/net/tcp6"}) {
            std::ifstream in("/proc/" + std::to_string(pid) + table);
            std::string line;
            std::getline(in, line);  // header
            while (std::getline(in, line)) {
                std::istringstream fields(line);
                std::string slot, local, remote, state;
                fields >> slot >> local >> remote >> state;
                if (state == "0A" && local.size() > 5 && local.ends_with(wanted)) return true;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
}

}  // namespace

int main(int argc, char** argv) try {
    if (argc == 6 && std::string(argv[1]) == "--count-vnc")
        return count_vnc(argv[2], std::stoi(argv[3]), argv[4], std::stoi(argv[5]));
    int seconds = 10, samples = 40, fps = 30, width = 1280, height = 800;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string flag = argv[i];
        if (flag == "--resolution") {
            if (std::sscanf(argv[i + 1], "%dx%d", &width, &height) != 2 || width < 320 ||
                height < 200 || width > 3840 || height > 2160)
                throw std::invalid_argument("--resolution needs WxH (320x200..3840x2160)");
            continue;
        }
        auto v = parse_integer(argv[i + 1]);
        if (!v || *v < 1 || *v > 10000)
            throw std::invalid_argument(flag + " needs a positive number");
        if (flag == "--seconds")
            seconds = static_cast<int>(*v);
        else if (flag == "--latency-samples")
            samples = static_cast<int>(*v);
        else if (flag == "--fps" && *v <= 60)
            fps = static_cast<int>(*v);
        else
            throw std::invalid_argument("unknown flag " + flag);
    }
    Daemon daemon;
    client::ClientOptions options;
    options.server = "http://127.0.0.1:" + std::to_string(daemon.port());
    client::ApiClient api(options);
    json created =
        api.post_json("/v1/sandboxes", {{"template", "minimal"}, {"resolution", {width, height}}});
    Sandbox sb{created["id"], created["view_token"], created["control_token"],
               created["vnc"]["password"], created["vnc"]["port"]};
    const std::string base = "/v1/sandboxes/" + sb.id;
    auto stream = [&](const std::string& codec) {
        return "/v1/sandboxes/" + sb.id + "/stream?codec=" + codec + "&token=" + sb.view_token +
               "&fps=" + std::to_string(fps) + "&width=" + std::to_string(width) +
               "&height=" + std::to_string(height);
    };
    std::this_thread::sleep_for(std::chrono::seconds(2));  // the autostarted terminal settles

    // ---- glass to glass ----
    std::printf(
        "glass to glass (POST /actions typing one character -> first packet after it), n=%d\n",
        samples);
    for (const char* codec : {"jpeg", "h264"}) {
        Viewer viewer(daemon.port(), stream(codec));
        std::this_thread::sleep_for(std::chrono::milliseconds(800));
        std::vector<double> latency;
        for (int i = 0; i < samples; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(150));  // quiet screen
            auto count = viewer.packets();
            auto t0 = Clock::now();
            api.post_json(base + "/actions", {{"type", "type"}, {"text", i % 2 ? "x" : "y"}});
            auto seen = viewer.wait_packet_after(count, std::chrono::seconds(5));
            if (seen != Clock::time_point{})
                latency.push_back(std::chrono::duration<double, std::milli>(seen - t0).count());
        }
        auto p = bench::percentiles(latency);
        std::printf("  %-5s p50 %6.1f ms  p95 %6.1f ms  (%zu/%d seen)\n", codec, p.p50, p.p95,
                    latency.size(), samples);
    }

    // ---- a moving window ----
    // One xdotool runs the whole sweep (a move, then a sleep of one frame interval, 50 times),
    // so the mover costs one process per sweep rather than one per move. --sync waits for each
    // move to land: xdotool's own sleep does not flush Xlib's queue, so the moves would go out
    // together.
    std::string sweep;
    for (int x = 0; x <= 600; x += 12)
        sweep += " windowmove --sync $w " + std::to_string(x) + " 100 sleep " +
                 std::to_string(1.0 / fps).substr(0, 6);
    api.post_json(base + "/commands",
                  {{"cmd",
                    "xterm -T mover -geometry 70x22+0+100 -e sh -c 'ls -la /usr/bin; sleep 1d' & "
                    "w=$(xdotool search --sync --name mover | head -1); "
                    "while :; do xdotool" +
                        sweep + "; done"},
                   {"background", true}});
    std::this_thread::sleep_for(std::chrono::seconds(3));
    std::vector<pid_t> ours = sandbox_pids(daemon, sb.id);
    ours.push_back(daemon.pid());
    std::printf(
        "moving window at %d Hz, %dx%d, %d s each, streams asked for %d fps (CPU: deskboxd + the "
        "sandbox's processes, incl. the mover)\n",
        fps, width, height, seconds, fps);
    double idle_cpu = measure_cpu_percent(
        ours, [&] { std::this_thread::sleep_for(std::chrono::seconds(seconds)); });
    std::printf("  no viewer                 CPU %5.1f %% (baseline: capture + the mover itself)\n",
                idle_cpu);
    for (const char* codec : {"jpeg", "h264"}) {
        Viewer viewer(daemon.port(), stream(codec));
        std::uint64_t start = 0;
        double cpu = measure_cpu_percent(ours, [&] {
            start = viewer.packets();
            std::this_thread::sleep_for(std::chrono::seconds(seconds));
        });
        double fps = static_cast<double>(viewer.packets() - start) / seconds;
        std::printf(
            "  ws %-5s 1 viewer        %5.1f packets/s  CPU %5.1f %% (+%.1f over baseline)\n",
            codec, fps, cpu, cpu - idle_cpu);
    }
    {
        std::vector<std::unique_ptr<Viewer>> viewers;
        for (int i = 0; i < 10; ++i)
            viewers.push_back(std::make_unique<Viewer>(daemon.port(), stream("h264")));
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        std::vector<std::uint64_t> start;
        double cpu = measure_cpu_percent(ours, [&] {
            for (auto& v : viewers) start.push_back(v->packets());
            std::this_thread::sleep_for(std::chrono::seconds(seconds));
        });
        double min_fps = 1e9, sum = 0;
        for (std::size_t i = 0; i < viewers.size(); ++i) {
            double fps = static_cast<double>(viewers[i]->packets() - start[i]) / seconds;
            min_fps = std::min(min_fps, fps);
            sum += fps;
        }
        std::printf("  ws h264  10 viewers       %5.1f fps avg, %5.1f min  CPU %5.1f %% (+%.1f)\n",
                    sum / 10, min_fps, cpu, cpu - idle_cpu);
    }
    auto count_updates = [&](const std::vector<std::string>& prefix, int port,
                             const std::string& password) {
        std::vector<std::string> argv = prefix;
        for (std::string a :
             {std::filesystem::read_symlink("/proc/self/exe").string(), std::string("--count-vnc"),
              std::string("127.0.0.1"), std::to_string(port), password, std::to_string(seconds)})
            argv.push_back(a);
        return run_process(argv, std::chrono::seconds(seconds + 30));
    };
    {
        RunResult counted;
        double cpu = measure_cpu_percent(
            ours, [&] { counted = count_updates({}, sb.vnc_port, sb.vnc_password); });
        double fps = std::atof(counted.out.c_str()) / seconds;
        std::printf("  our VNC  1 viewer         %5.1f updates/s  CPU %5.1f %% (+%.1f)\n", fps, cpu,
                    cpu - idle_cpu);
    }
    // x11vnc on the same display, inside the sandbox's network and IPC namespaces.
    pid_t agent = ours.front();
    std::string target = std::to_string(agent);
    auto display = api.post_json(base + "/commands",
                                 {{"cmd", "ls /tmp/.X11-unix | head -1 | tr -d X"}})["stdout"]
                       .get<std::string>();
    while (!display.empty() && display.back() == '\n') display.pop_back();
    SpawnOptions x11vnc;
    x11vnc.argv = bench::beside_sandbox(agent);
    const std::vector<std::string> x11vnc_args = {"x11vnc",  "-display", ":" + display, "-rfbport",
                                                  "5977",    "-passwd",  "benchpw1",    "-forever",
                                                  "-shared", "-quiet"};
    x11vnc.argv.insert(x11vnc.argv.end(), x11vnc_args.begin(), x11vnc_args.end());
    x11vnc.stdout_to_null = true;
    x11vnc.stderr_to_null = true;
    ChildProcess x11 = ChildProcess::spawn(x11vnc);
    // Until it listens: a fixed 3 s sleep here was too short on a loaded host, and the row said
    // "could not connect" for an x11vnc still starting.
    if (!wait_for_listener(agent, 5977, std::chrono::seconds(60))) {
        std::printf(
            "  x11vnc   1 viewer         x11vnc did not listen on port 5977 within 60 s "
            "(%s)\n",
            x11.running() ? "still running" : "it exited");
    } else {
        std::vector<pid_t> theirs = sandbox_pids(daemon, sb.id);
        // x11vnc is not in the sandbox's cgroup; its own process joins the account.
        auto found = run_process({"pgrep", "-x", "x11vnc"});
        std::istringstream pids(found.out);
        for (pid_t p; pids >> p;) theirs.push_back(p);
        theirs.push_back(daemon.pid());
        RunResult counted;
        double cpu = measure_cpu_percent(theirs, [&] {
            counted = count_updates({"nsenter", "-t", target, "-n", "-i"}, 5977, "benchpw1");
        });
        double fps = std::atof(counted.out.c_str()) / seconds;
        std::printf("  x11vnc   1 viewer         %5.1f updates/s  CPU %5.1f %% (+%.1f) [%s]\n", fps,
                    cpu, cpu - idle_cpu,
                    counted.out.find("error") != std::string::npos ? "could not connect" : "ok");
    }
    x11.terminate(std::chrono::seconds(5));
    api.delete_json(base);
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "stream_bench: %s\n", e.what());
    return 1;
}
