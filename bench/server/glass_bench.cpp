// Glass to glass where a person sees it: an action is POSTed to deskboxd, and a real headless
// Chromium showing the sandbox's desktop timestamps the first frame it draws with the action's
// effect (the pixel read back from the page's canvas). Rows, all on one sandbox in one run:
//   - deskbox's web viewer, JPEG stream;
//   - deskbox's web viewer, H.264 stream (WebCodecs);
//   - noVNC (Debian's) through deskboxd's VNC endpoint;
//   - noVNC + websockify + x11vnc on the same X display: the stack E2B and the Anthropic demo
//     ship (x11vnc run in the sandbox's network and IPC namespaces, as it would run inside).
// The effect: the template's xterm runs a loop that flips the terminal to reverse video on
// each key, so the action (a key through the same API for every row) turns a large area from
// light to dark or back; the page notes the time of every draw that flips the probed pixel.
// Both clocks are this machine's wall clock (Chromium's performance.timeOrigin + now()).
//
//   glass_bench [--samples N]
// Needs root, runc, the minimal template, chromium, novnc, websockify, x11vnc and nsenter.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
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
#include "tests/server/chromium.hpp"

namespace {

using namespace deskbox;
using nlohmann::json;
using namespace std::chrono_literals;

double wall_ms() {
    return std::chrono::duration<double, std::milli>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Installed in a page whose screen is the canvas `selector` finds: wraps that canvas's 2D
// drawing calls so each draw reads the probed pixel back (at fractions fx, fy of the canvas)
// and notes the wall-clock time when it turns from light to dark or back. Polling as well
// catches a draw through a path the wrapper missed (at the timer's resolution).
std::string probe_script(const std::string& selector, double fx, double fy) {
    std::ostringstream js;
    js << "(() => { const c = document.querySelector('" << selector << "');"
       << " if (!c || !c.width) return false;"
       << " const ctx = c.getContext('2d');"
       << " const g = window.__glass = { flips: [], dark: null, draws: 0 };"
       << " const probe = () => { const x = Math.floor(c.width * " << fx
       << "), y = Math.floor(c.height * " << fy << ");"
       << "   const p = ctx.getImageData(x, y, 1, 1).data; const dark = p[0] + p[1] + p[2] < 384;"
       << "   if (g.dark !== null && dark !== g.dark) g.flips.push(performance.timeOrigin + "
          "performance.now());"
       << "   g.dark = dark; };"
       << " for (const name of ['drawImage', 'putImageData']) { const original = ctx[name];"
       << "   ctx[name] = function (...args) { const r = original.apply(this, args); g.draws++;"
          " probe(); return r; }; }"
       << " setInterval(probe, 4); probe(); return true; })()";
    return js.str();
}

struct Row {
    std::string name;
    std::vector<double> ms;
    int missed = 0;
    std::string note;
};

class GlassRun {
  public:
    GlassRun(client::ApiClient& api, std::string base) : api_(api), base_(std::move(base)) {}

    // Opens `url` in Chromium, waits for the screen canvas to show the desktop, then measures.
    Row measure(const std::string& name, const std::string& url, const std::string& selector,
                double fx, double fy, int samples) {
        Row row{name, {}, 0, {}};
        test::Browser browser(url);
        auto socket = browser.page();
        if (!socket) {
            row.note = "no page";
            return row;
        }
        test::DevTools dt(*socket);
        // The stream's first frames: wait until the canvas has drawn the desktop a while.
        bool installed = false;
        for (int i = 0; i < 300 && !installed; ++i) {
            std::this_thread::sleep_for(100ms);
            json ok = dt.evaluate(probe_script(selector, fx, fy));
            installed = ok.is_boolean() && ok.get<bool>();
        }
        if (!installed) {
            row.note = "the page never drew a screen";
            return row;
        }
        std::this_thread::sleep_for(1s);
        for (int i = 0; i < samples; ++i) {
            const int before = dt.evaluate("window.__glass.flips.length").get<int>();
            const double sent = wall_ms();
            api_.post_json(base_ + "/actions", {{"type", "key"}, {"keys", "x"}});
            std::optional<double> seen;
            for (auto end = std::chrono::steady_clock::now() + 3s;
                 !seen && std::chrono::steady_clock::now() < end;) {
                json at = dt.evaluate("window.__glass.flips[" + std::to_string(before) + "]");
                if (at.is_number())
                    seen = at.get<double>();
                else
                    std::this_thread::sleep_for(2ms);
            }
            if (seen)
                row.ms.push_back(*seen - sent);
            else
                ++row.missed;
            // Settle: the next flip must not be a late draw of this one.
            std::this_thread::sleep_for(250ms);
            const int after = dt.evaluate("window.__glass.flips.length").get<int>();
            if (seen && after != before + 1) row.note = "extra flips seen (a stale frame redrawn)";
        }
        return row;
    }

  private:
    client::ApiClient& api_;
    std::string base_;
};

void print_row(const Row& row, double reference_p50) {
    if (row.ms.empty()) {
        std::printf("  %-34s no samples (%s)\n", row.name.c_str(),
                    row.note.empty() ? "missed" : row.note.c_str());
        return;
    }
    auto p = bench::percentiles(row.ms);
    std::printf("  %-34s p50 %6.1f ms  p95 %6.1f ms  (n=%zu, missed %d)", row.name.c_str(), p.p50,
                p.p95, row.ms.size(), row.missed);
    if (reference_p50 > 0 && p.p50 != reference_p50)
        std::printf("  %.2fx the JPEG viewer's", p.p50 / reference_p50);
    if (!row.note.empty()) std::printf("  [%s]", row.note.c_str());
    std::printf("\n");
}

int free_loopback_port() {
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    return acceptor.local_endpoint().port();
}

std::string percent_encoded(const std::string& text) {
    std::string out;
    for (unsigned char ch : text) {
        char hex[4];
        std::snprintf(hex, sizeof hex, "%%%02X", ch);
        out += std::isalnum(ch) ? std::string(1, static_cast<char>(ch)) : std::string(hex);
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) try {
    int samples = 30;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string flag = argv[i];
        auto v = parse_integer(argv[i + 1]);
        if (flag != "--samples" || !v || *v < 1 || *v > 1000)
            throw std::invalid_argument("usage: glass_bench [--samples 1..1000]");
        samples = static_cast<int>(*v);
    }
    bench::Daemon daemon;
    client::ClientOptions options;
    options.server = "http://127.0.0.1:" + std::to_string(daemon.port());
    client::ApiClient api(options);
    json created =
        api.post_json("/v1/sandboxes", {{"template", "minimal"}, {"resolution", {1280, 800}}});
    const std::string id = created["id"];
    const std::string base = "/v1/sandboxes/" + id;
    const std::string view_token = created["view_token"];
    const std::string vnc_password = created["vnc"]["password"];

    // The xterm: a loop that flips reverse video on every key, and where it is on the screen.
    api.post_json(base + "/actions",
                  {{"type", "type"},
                   {"text",
                    "clear; bash -c 'r=0; while IFS= read -rsn1 k; do r=$((1-r));"
                    " if [ $r = 1 ]; then printf \"\\033[?5h\"; else printf \"\\033[?5l\"; fi;"
                    " done'\n"}});
    std::this_thread::sleep_for(1s);
    json windows = api.get_json(base + "/windows")["windows"];
    double fx = 0.5, fy = 0.5;
    for (const auto& w : windows)
        if (w.value("title", "").find("xterm") != std::string::npos || windows.size() == 1) {
            fx = (w["x"].get<double>() + w["width"].get<double>() * 0.8) / 1280.0;
            fy = (w["y"].get<double>() + w["height"].get<double>() * 0.8) / 800.0;
        }

    const std::string server = "http://127.0.0.1:" + std::to_string(daemon.port());
    GlassRun run(api, base);
    std::vector<Row> rows;
    std::printf(
        "glass to glass: POST /actions (a key) -> the flipped pixel drawn in Chromium's "
        "canvas, %d samples each\n",
        samples);
    rows.push_back(run.measure("deskbox viewer, JPEG",
                               server + "/view/" + id + "?codec=jpeg&token=" + view_token,
                               "#screen", fx, fy, samples));
    rows.push_back(run.measure("deskbox viewer, H.264 (WebCodecs)",
                               server + "/view/" + id + "?codec=h264&token=" + view_token,
                               "#screen", fx, fy, samples));

    // noVNC's own page, served from its own origin.
    const int files_port = free_loopback_port();
    SpawnOptions files;
    files.argv = {"python3", "-m",        "http.server", std::to_string(files_port),
                  "--bind",  "127.0.0.1", "--directory", "/usr/share/novnc"};
    files.stdout_to_null = files.stderr_to_null = true;
    ChildProcess files_server = ChildProcess::spawn(files);
    std::this_thread::sleep_for(1s);
    const std::string novnc = "http://127.0.0.1:" + std::to_string(files_port) + "/vnc_lite.html";
    const std::string our_vnc_path = "v1/sandboxes/" + id + "/vnc?token=" + view_token;
    rows.push_back(run.measure("noVNC -> deskboxd's VNC",
                               novnc + "?host=127.0.0.1&port=" + std::to_string(daemon.port()) +
                                   "&path=" + percent_encoded(our_vnc_path) +
                                   "&view_only=1&password=" + vnc_password,
                               "#screen canvas", fx, fy, samples));

    // x11vnc as the sandbox's user on its display, listening on a Unix socket websockify reaches.
    TempDir sockets("deskbox-glass");
    std::filesystem::permissions(sockets.path(), std::filesystem::perms::all);
    const std::string x11vnc_socket = (sockets.path() / "x11vnc.sock").string();
    const auto pids = bench::sandbox_pids(daemon.state(), id);
    if (pids.empty()) throw std::runtime_error("the sandbox's processes were not found");
    const pid_t agent = pids.front();
    std::string display = api.post_json(
        base + "/commands", {{"cmd", "ls /tmp/.X11-unix | head -1 | tr -d X"}})["stdout"];
    while (!display.empty() && display.back() == '\n') display.pop_back();
    SpawnOptions x11vnc;
    x11vnc.argv = bench::beside_sandbox(agent);
    const std::vector<std::string> x11vnc_args = {"x11vnc",  "-display",  ":" + display, "-rfbport",
                                                  "0",       "-unixsock", x11vnc_socket, "-forever",
                                                  "-shared", "-viewonly", "-quiet",      "-nopw"};
    x11vnc.argv.insert(x11vnc.argv.end(), x11vnc_args.begin(), x11vnc_args.end());
    x11vnc.stdout_to_null = x11vnc.stderr_to_null = true;
    ChildProcess x11vnc_process = ChildProcess::spawn(x11vnc);
    for (int i = 0; i < 100 && !std::filesystem::exists(x11vnc_socket); ++i)
        std::this_thread::sleep_for(100ms);
    const int websockify_port = free_loopback_port();
    SpawnOptions websockify;
    websockify.argv = {"websockify", "--unix-target=" + x11vnc_socket,
                       "127.0.0.1:" + std::to_string(websockify_port)};
    websockify.stdout_to_null = websockify.stderr_to_null = true;
    ChildProcess websockify_process = ChildProcess::spawn(websockify);
    std::this_thread::sleep_for(1s);
    Row theirs =
        std::filesystem::exists(x11vnc_socket)
            ? run.measure("noVNC + websockify + x11vnc",
                          novnc + "?host=127.0.0.1&port=" + std::to_string(websockify_port) +
                              "&path=websockify",
                          "#screen canvas", fx, fy, samples)
            : Row{"noVNC + websockify + x11vnc", {}, 0, "x11vnc did not start"};
    rows.push_back(theirs);
    websockify_process.terminate(5s);
    x11vnc_process.terminate(5s);

    const double ours = rows.front().ms.empty() ? 0 : bench::percentiles(rows.front().ms).p50;
    for (const auto& row : rows) print_row(row, ours);
    if (ours > 0 && !theirs.ms.empty())
        std::printf(
            "the peers' stack (noVNC + x11vnc) takes %.1fx the JPEG viewer's time to glass\n",
            bench::percentiles(theirs.ms).p50 / ours);
    api.delete_json(base);
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "glass_bench: %s\n", e.what());
    return 1;
}
