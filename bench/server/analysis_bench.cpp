// Screen analysis over HTTP on a real runc sandbox, each figure next to what a test or agent
// would do without it, measured in the same run:
//   - locate a 64x64 template on the 1280x800 screen (POST /locate), next to the pyautogui way:
//     a full screenshot through the commands API (scrot + files API), decoded and matched at
//     full size with OpenCV (pyscreeze's method);
//   - reaction of a wait for change (an action is sent -> the waiting POST /wait answers), next
//     to a loop polling screenshots every 100 ms and comparing them;
//   - OCR of a terminal full of known text: time and word accuracy, next to the tesseract
//     command on a screenshot.
//
//   analysis_bench [--locates N] [--waits N] [--ocrs N]
// Needs root, runc and the `minimal` template built (images/build.py minimal).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "bench/support/bench_deskboxd.hpp"
#include "bench/support/percentiles.hpp"
#include "common/base64.hpp"
#include "common/child_process.hpp"
#include "common/parse_integer.hpp"
#include "common/temp_dir.hpp"
#include "server/client/api_client.hpp"

namespace {

using namespace deskbox;
using Clock = std::chrono::steady_clock;
using bench::ms_since;
using nlohmann::json;

struct Args {
    int locates = 50;
    int waits = 20;
    int ocrs = 5;
};

Args parse_args(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        std::string flag = argv[i];
        int* target = flag == "--locates" ? &a.locates
                      : flag == "--waits" ? &a.waits
                      : flag == "--ocrs"  ? &a.ocrs
                                          : nullptr;
        if (!target || i + 1 >= argc) throw std::invalid_argument("unknown or incomplete " + flag);
        auto v = parse_integer(argv[++i]);
        if (!v || *v < 1 || *v > 10000) throw std::invalid_argument(flag + " needs 1..10000");
        *target = int(*v);
    }
    return a;
}

void print_row(const char* what, const std::vector<double>& ours, const char* alt_name,
               const std::vector<double>& alt) {
    auto o = bench::percentiles(ours), a = bench::percentiles(alt);
    std::printf("%-34s ours p50 %8.2f ms  p95 %8.2f | %s p50 %8.2f ms  p95 %8.2f | %.1fx\n", what,
                o.p50, o.p95, alt_name, a.p50, a.p95, a.p50 / o.p50);
}

cv::Mat decode(const std::string& png) {
    return cv::imdecode(std::vector<uchar>(png.begin(), png.end()), cv::IMREAD_COLOR);
}

std::string png_base64(const cv::Mat& image) {
    std::vector<uchar> png;
    cv::imencode(".png", image, png);
    return base64_encode(std::span<const std::uint8_t>(png.data(), png.size()));
}

// Known text: words drawn from a fixed vocabulary, the same every run.
std::string known_text(int lines, int words_per_line) {
    static const char* vocabulary[] = {
        "sandbox", "desktop", "agent",  "screen",   "window",  "button",   "terminal", "network",
        "policy",  "stream",  "viewer", "record",   "pointer", "keyboard", "select",   "cancel",
        "submit",  "export",  "import", "settings", "profile", "account",  "invoice",  "report",
        "number",  "4711",    "2026",   "alpha",    "bravo",   "charlie",  "delta",    "echo",
        "foxtrot", "golf",    "hotel",  "india",    "juliet",  "kilo",     "lima",     "mike"};
    std::mt19937 random(2026);
    std::string out;
    for (int l = 0; l < lines; ++l) {
        for (int w = 0; w < words_per_line; ++w) {
            out += vocabulary[random() % (sizeof vocabulary / sizeof *vocabulary)];
            out += w + 1 < words_per_line ? " " : "\n";
        }
    }
    return out;
}

std::vector<std::string> words_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string w; in >> w;) out.push_back(w);
    return out;
}

// Share of the known words read back (as a multiset: each read word counts once).
double word_accuracy(const std::vector<std::string>& known, const std::vector<std::string>& read) {
    std::map<std::string, int> have;
    for (const auto& w : read) ++have[w];
    int hits = 0;
    for (const auto& w : known)
        if (have[w] > 0) {
            --have[w];
            ++hits;
        }
    return known.empty() ? 0 : double(hits) / double(known.size());
}

// `needle` is looked for with max_results 1 and must be found at `at`; ms per call, end to end
// and server side.
std::pair<std::vector<double>, std::vector<double>> time_locate(client::ApiClient& api,
                                                                const std::string& base,
                                                                const cv::Mat& needle, cv::Point at,
                                                                int runs) {
    const std::string templ = png_base64(needle);
    std::vector<double> ours, server_side;
    for (int i = 0; i < runs; ++i) {
        auto t0 = Clock::now();
        json r = api.post_json(base + "/locate",
                               {{"image", templ}, {"max_results", 1}, {"threshold", 0.9}});
        ours.push_back(ms_since(t0));
        server_side.push_back(r.value("elapsed_ms", 0.0));
        if (r["matches"].empty() || r["matches"][0]["x"] != at.x || r["matches"][0]["y"] != at.y)
            throw std::runtime_error("locate missed the template: " + r.dump());
    }
    return {ours, server_side};
}

void print_server_side(const std::vector<double>& server_side) {
    auto s = bench::percentiles(server_side);
    std::printf("%-34s server-side search p50 %.0f ms p95 %.0f ms (whole ms)\n", "", s.p50, s.p95);
}

void bench_locate(client::ApiClient& api, const std::string& base, int runs) {
    cv::Mat screen = decode(api.get_bytes(base + "/screenshot").body);
    // A 64x64 piece of the busiest terminal text, found once at full size to check it is unique.
    const cv::Rect cut(400, 200, 64, 64);
    cv::Mat needle = screen(cut).clone();
    auto [ours, server_side] = time_locate(api, base, needle, cut.tl(), runs);
    std::vector<double> alternative;
    for (int i = 0; i < std::max(5, runs / 5); ++i) {
        auto t0 = Clock::now();
        api.post_json(base + "/commands", {{"cmd", "scrot -o /tmp/locate.png"}});
        cv::Mat shot = decode(api.get_bytes(base + "/files?path=/tmp/locate.png").body);
        cv::Mat scores;
        cv::matchTemplate(shot, needle, scores, cv::TM_CCOEFF_NORMED);
        double best = 0;
        cv::Point at;
        cv::minMaxLoc(scores, nullptr, &best, nullptr, &at);
        alternative.push_back(ms_since(t0));
        if (at != cut.tl()) throw std::runtime_error("the pyautogui-style search missed");
    }
    print_row("locate 64x64 on 1280x800", ours, "scrot+read+match", alternative);
    print_server_side(server_side);
    // The same piece through JPEG at quality 80 (a template from a lossy screenshot): it never
    // scores a perfect 1, so every candidate is refined.
    std::vector<uchar> jpeg;
    cv::imencode(".jpg", needle, jpeg, {cv::IMWRITE_JPEG_QUALITY, 80});
    auto [lossy, lossy_server_side] =
        time_locate(api, base, cv::imdecode(jpeg, cv::IMREAD_COLOR), cut.tl(), runs);
    print_row("locate, JPEG-q80 template", lossy, "scrot+read+match", alternative);
    print_server_side(lossy_server_side);
}

void bench_wait(const client::ClientOptions& options, const std::string& base, int runs) {
    client::ApiClient actor(options), waiter(options);
    std::vector<double> ours, polling;
    // Keys go to the terminal that fills the screen.
    actor.post_json(base + "/actions", {{"type", "click"}, {"x", 640}, {"y", 400}});
    actor.post_json(base + "/wait", {{"until", "stable"}, {"stable_ms", 500}});
    for (int i = 0; i < runs; ++i) {
        auto answered = std::async(std::launch::async, [&] {
            json r = waiter.post_json(base + "/wait", {{"until", "change"}, {"timeout_ms", 10000}});
            if (!r.value("matched", false)) throw std::runtime_error("the wait saw no change");
            return Clock::now();
        });
        // The wait must be waiting before the change is made.
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
        auto t0 = Clock::now();
        actor.post_json(base + "/actions", i % 2 ? json{{"type", "key"}, {"keys", "BackSpace"}}
                                                 : json{{"type", "type"}, {"text", "x"}});
        ours.push_back(std::chrono::duration<double, std::milli>(answered.get() - t0).count());
    }
    // The usual loop: screenshot, compare with the last one, sleep 100 ms.
    client::ApiClient poller(options);
    for (int i = 0; i < runs; ++i) {
        std::string before = poller.get_bytes(base + "/screenshot").body;
        std::atomic<bool> started{false};
        auto seen = std::async(std::launch::async, [&] {
            started = true;
            const auto give_up = Clock::now() + std::chrono::seconds(10);
            while (Clock::now() < give_up) {
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
                if (poller.get_bytes(base + "/screenshot").body != before) return Clock::now();
            }
            throw std::runtime_error("the polling loop saw no change in 10 s");
        });
        while (!started) std::this_thread::yield();
        // Land the change at a random point of the polling period, as real changes do.
        std::this_thread::sleep_for(std::chrono::milliseconds(150 + (i * 37) % 100));
        auto t0 = Clock::now();
        actor.post_json(base + "/actions", i % 2 ? json{{"type", "key"}, {"keys", "BackSpace"}}
                                                 : json{{"type", "type"}, {"text", "x"}});
        polling.push_back(std::chrono::duration<double, std::milli>(seen.get() - t0).count());
    }
    print_row("wait for change: action -> answer", ours, "100 ms polling", polling);
}

void bench_ocr(client::ApiClient& api, const std::string& base, int runs) {
    const std::string text = known_text(40, 10);
    api.call(client::Method::put, base + "/files?path=/tmp/known.txt", text,
             "application/octet-stream");
    api.post_json(base + "/commands",
                  {{"cmd",
                    "xterm -geometry 150x40+0+0 -fa 'DejaVu Sans Mono' -fs 11 -e sh -c "
                    "'cat /tmp/known.txt; sleep 1d'"},
                   {"background", true}});
    api.post_json(base + "/wait", {{"until", "text"}, {"text", "foxtrot"}, {"timeout_ms", 20000}});
    api.post_json(base + "/wait", {{"until", "stable"}, {"stable_ms", 1000}});
    const auto known = words_of(text);
    std::vector<double> ours;
    double accuracy = 0;
    for (int i = 0; i < runs; ++i) {
        // A region a pixel different each time: the server keeps OCR of recent frames.
        auto t0 = Clock::now();
        json r = api.post_json(base + "/ocr", {{"region", {0, 0, 1280, 800 - i}}});
        ours.push_back(ms_since(t0));
        accuracy = word_accuracy(known, words_of(r["text"]));
    }
    TempDir dir("analysis-bench");
    std::vector<double> cli;
    double cli_accuracy = 0;
    for (int i = 0; i < runs; ++i) {
        auto t0 = Clock::now();
        std::string png = api.get_bytes(base + "/screenshot").body;
        std::ofstream(dir.path() / "shot.png", std::ios::binary) << png;
        auto r = run_process({"tesseract", (dir.path() / "shot.png").string(), "-"});
        cli.push_back(ms_since(t0));
        cli_accuracy = word_accuracy(known, words_of(r.out));
    }
    print_row("OCR of a 1280x800 terminal", ours, "tesseract CLI", cli);
    std::printf("%-34s word accuracy ours %.1f%% | tesseract CLI %.1f%% (%zu known words)\n", "",
                accuracy * 100, cli_accuracy * 100, known.size());
}

}  // namespace

int main(int argc, char** argv) try {
    Args args = parse_args(argc, argv);
    bench::Daemon daemon;
    client::ClientOptions options;
    options.server = daemon.url();
    client::ApiClient api(options);
    json sb = api.post_json("/v1/sandboxes", {{"template", "minimal"}, {"timeout_s", 3600}});
    const std::string base = "/v1/sandboxes/" + sb["id"].get<std::string>();
    // A busy screen: a terminal full of text.
    api.post_json(
        base + "/commands",
        {{"cmd", "xterm -geometry 150x40+0+0 -e sh -c 'ls -la /usr/bin /usr/lib; sleep 1d'"},
         {"background", true}});
    api.post_json(base + "/wait",
                  {{"until", "stable"}, {"stable_ms", 1500}, {"timeout_ms", 20000}});
    bench_locate(api, base, args.locates);
    bench_wait(options, base, args.waits);
    api.post_json(base + "/commands", {{"cmd", "pkill xterm"}});
    bench_ocr(api, base, args.ocrs);
    api.delete_json(base);
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "analysis_bench: %s\n", e.what());
    return 1;
}
