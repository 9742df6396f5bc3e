// What usage sampling costs deskboxd: its own CPU time with N idle `minimal` containers over a
// window, sampling off (--usage-sample-s 0) against on (every 5 s, the default, and every
// 1 s), each on a fresh deskboxd. Prints deskboxd's CPU % per mode, the difference per sample
// of one sandbox, and the ledger's bytes per sample.
//
//   usage_bench [--sandboxes N] [--seconds S]
// Needs root, runc and the `minimal` template built (images/build.py minimal). Touches only
// loopback.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bench/support/load_average.hpp"
#include "common/parse_integer.hpp"
#include "common/temp_dir.hpp"
#include "server/client/api_client.hpp"
#include "server/runtime/runtime.hpp"
#include "tests/support/deskboxd_process.hpp"
#include "tests/support/test_paths.hpp"

namespace {

using namespace deskbox;
using nlohmann::json;

struct Args {
    int sandboxes = 10;
    int seconds = 30;
};

Args parse_args(int argc, char** argv) {
    Args a;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        auto value = parse_integer(argv[i + 1]);
        if (!value || *value < 1 || *value > 1000)
            throw std::invalid_argument(flag + " needs a number from 1 to 1000");
        if (flag == "--sandboxes")
            a.sandboxes = static_cast<int>(*value);
        else if (flag == "--seconds")
            a.seconds = static_cast<int>(*value);
        else
            throw std::invalid_argument("unknown flag " + flag);
    }
    return a;
}

struct Measured {
    double cpu_percent = 0;  // of one CPU, deskboxd's over the window
    std::uint64_t ledger_bytes = 0;
};

Measured measure(const Args& args, int sample_s) {
    TempDir dir("usage-bench");
    const auto state = dir.path() / "state";
    test::DeskboxdProcess server(test_paths::kDeskboxd, state, dir.path() / "deskboxd.log",
                                 {"--usage-sample-s", std::to_string(sample_s), "--max-sandboxes",
                                  std::to_string(args.sandboxes)});
    client::ClientOptions options;
    options.server = server.url();
    options.request_timeout = std::chrono::minutes(5);
    client::ApiClient api(options);
    std::vector<std::string> ids;
    // A small disk each: 100 of the default 8 GiB would be refused as disk overcommitted on a
    // host with less than 400 GiB free, and idle sandboxes write nothing.
    for (int i = 0; i < args.sandboxes; ++i)
        ids.push_back(
            api.post_json("/v1/sandboxes",
                          {{"network", false}, {"ready", false}, {"limits", {{"disk_mb", 512}}}})
                .value("id", ""));
    // Let the creates' work settle before the window.
    std::this_thread::sleep_for(std::chrono::seconds(3));
    const auto before = runtime::read_process_cpu_memory(server.pid());
    const auto ledger = state / "usage" / "ledger.jsonl";
    std::error_code ec;
    const auto ledger_before = std::filesystem::file_size(ledger, ec);
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(args.seconds));
    const auto after = runtime::read_process_cpu_memory(server.pid());
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    Measured m;
    if (before && after) m.cpu_percent = (after->cpu_ns - before->cpu_ns) / 1e9 / wall * 100;
    const auto ledger_after = std::filesystem::file_size(ledger, ec);
    if (!ec && ledger_after >= ledger_before) m.ledger_bytes = ledger_after - ledger_before;
    for (const auto& id : ids) api.delete_json("/v1/sandboxes/" + id);
    return m;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const Args args = parse_args(argc, argv);
        std::printf("usage sampling overhead: %d idle minimal containers, %d s window, load %s\n",
                    args.sandboxes, args.seconds, bench::load_average().c_str());
        const Measured off = measure(args, 0);
        std::printf("  sampling off     deskboxd CPU %6.2f %%\n", off.cpu_percent);
        for (int sample_s : {5, 1}) {
            const Measured on = measure(args, sample_s);
            const double samples = 1.0 * args.sandboxes * args.seconds / sample_s;
            const double per_sample_us =
                (on.cpu_percent - off.cpu_percent) / 100.0 * args.seconds / samples * 1e6;
            std::printf(
                "  every %d s        deskboxd CPU %6.2f %%  (+%.2f points; %.0f us of CPU per "
                "sandbox sample; ledger %.0f bytes per sample)\n",
                sample_s, on.cpu_percent, on.cpu_percent - off.cpu_percent, per_sample_us,
                samples > 0 ? on.ledger_bytes / samples : 0.0);
        }
        std::printf("load after: %s\n", bench::load_average().c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "usage_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
