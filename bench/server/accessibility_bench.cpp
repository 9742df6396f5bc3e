// The accessibility tree of a Firefox page over HTTP on a real runc `desktop` sandbox (issue 32):
//   - the full tree of the Firefox window (GET /accessibility?scope=all&app=firefox);
//   - a find of one button by role and name (POST /accessibility/find);
// each next to the usual way a screen-only agent finds the same button: OCR of a screenshot for
// its label (POST /locate {"text"}: screenshot, Tesseract, match; the screen changed before each,
// so OCR reads a new frame), measured in the same run.
// No Python pyatspi or accerciser is in the template, so the screen's way is the alternative.
//
//   accessibility_bench [--runs N] [--buttons N]
// Needs root, runc and the `desktop` template built (images/build.py desktop).
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/support/bench_deskboxd.hpp"
#include "bench/support/percentiles.hpp"
#include "common/parse_integer.hpp"
#include "server/client/api_client.hpp"

namespace {

using namespace deskbox;
using Clock = std::chrono::steady_clock;
using bench::ms_since;
using nlohmann::json;

struct BenchArgs {
    int runs = 20;
    int buttons = 60;
};

BenchArgs parse_bench_args(int argc, char** argv) {
    BenchArgs a;
    for (int i = 1; i < argc; ++i) {
        std::string flag = argv[i];
        int* target = flag == "--runs" ? &a.runs : flag == "--buttons" ? &a.buttons : nullptr;
        if (!target || i + 1 >= argc) throw std::invalid_argument("unknown or incomplete " + flag);
        auto v = parse_integer(argv[++i]);
        if (!v || *v < 1 || *v > 1000) throw std::invalid_argument(flag + " needs 1..1000");
        *target = int(*v);
    }
    return a;
}

// A form-like page: a heading, paragraphs, and rows of labelled fields and buttons.
std::string page(int buttons) {
    std::string html =
        "<!DOCTYPE html><html><head><title>Bench page</title><style>body{font:16px sans-serif}"
        "button{margin:4px;font-size:16px}</style></head><body><h1>Orders</h1>";
    for (int i = 0; i < buttons; ++i) {
        const std::string n = std::to_string(i);
        if (i % 10 == 0) html += "<p>Section " + n + " of the form, with some text to read.</p>";
        html += "<label>Field " + n + " <input type=text></label><button>Button " + n + "</button>";
    }
    return html + "</body></html>";
}

void print_row(const char* what, const std::vector<double>& ours, const char* alt_name,
               const std::vector<double>& alt) {
    auto o = bench::percentiles(ours), a = bench::percentiles(alt);
    std::printf("%-30s ours p50 %8.2f ms  p95 %8.2f | %s p50 %8.2f ms  p95 %8.2f | %.1fx\n", what,
                o.p50, o.p95, alt_name, a.p50, a.p95, a.p50 / o.p50);
}

}  // namespace

int main(int argc, char** argv) try {
    const BenchArgs args = parse_bench_args(argc, argv);
    bench::Daemon daemon;
    client::ClientOptions options;
    options.server = daemon.url();
    client::ApiClient api(options);
    json sb = api.post_json(
        "/v1/sandboxes",
        {{"template", "desktop"}, {"timeout_s", 3600}, {"limits", {{"memory_mb", 2048}}}});
    const std::string base = "/v1/sandboxes/" + sb["id"].get<std::string>();
    api.put_bytes(base + "/files?path=/tmp/bench.html", page(args.buttons));
    api.post_json(base + "/commands", {{"cmd", "firefox-esr --new-instance file:///tmp/bench.html"},
                                       {"background", true}});

    // The button in the middle of the first screen, so OCR can see it too.
    const std::string label = "Button 7";
    const json find = {{"role", "push button"}, {"name", label}, {"app", "firefox"}};
    const auto started = Clock::now();
    while (api.post_json(base + "/accessibility/find", find)["matches"].empty()) {
        if (ms_since(started) > 180'000) throw std::runtime_error("the page did not appear");
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));  // let the page settle
    // Each run types a letter into the first field: the screen changes, so OCR reads a new frame
    // (it keeps its results per frame) as an agent's next look would.
    json field = api.post_json(base + "/accessibility/find",
                               {{"role", "entry"}, {"app", "firefox"}, {"max_results", 1}});
    api.post_json(base + "/accessibility/act",
                  {{"ref", field["matches"][0]["ref"]}, {"action", "focus"}});

    std::vector<double> tree_ms, find_ms, ocr_ms;
    json tree;
    int ocr_found = 0;
    for (int i = 0; i < args.runs; ++i) {
        auto t0 = Clock::now();
        tree = api.get_json(base + "/accessibility?scope=all&app=firefox");
        tree_ms.push_back(ms_since(t0));
        t0 = Clock::now();
        json found = api.post_json(base + "/accessibility/find", find);
        find_ms.push_back(ms_since(t0));
        if (found["matches"].empty()) throw std::runtime_error("find lost the button");
        api.post_json(base + "/actions", {{"type", "type"}, {"text", "x"}});
        api.post_json(base + "/wait", {{"until", "stable"}, {"stable_ms", 300}});
        t0 = Clock::now();
        json located = api.post_json(base + "/locate", {{"text", label}, {"exact", true}});
        ocr_ms.push_back(ms_since(t0));
        ocr_found += located["matches"].empty() ? 0 : 1;
    }
    std::printf("Firefox page: %d buttons, %d fields; tree of the window: %d elements%s\n",
                args.buttons, args.buttons, tree["node_count"].get<int>(),
                tree["truncated"].get<bool>() ? " (truncated)" : "");
    print_row("full tree (GET /accessibility)", tree_ms, "OCR locate", ocr_ms);
    print_row("find button by name", find_ms, "OCR locate", ocr_ms);
    std::printf("OCR found \"%s\" in %d of %d runs; find in every run\n", label.c_str(), ocr_found,
                args.runs);
    api.delete_json(base);
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "accessibility_bench: %s\n", e.what());
    return 1;
}
