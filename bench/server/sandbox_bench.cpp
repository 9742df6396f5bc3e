// deskboxd end to end over HTTP with real runc sandboxes, next to the pipelines agent stacks
// build from shell tools, measured in the same run on the same sandbox:
//   - create -> first screenshot (and kill), p50/p95;
//   - screenshot round trip at 1280x800 on a busy screen, PNG and JPEG, p50/p99, next to
//     `scrot` run through the commands API plus reading its file through the files API;
//   - click round trip (POST /actions until answered), p50/p99, next to `xdotool` run through
//     the commands API (what the Anthropic demo's shell tool does);
//   - memory of an idle `minimal` and `desktop` sandbox (cgroup), and how many fit in RAM.
//
//   sandbox_bench [--creates N] [--shots N] [--clicks N] [--no-desktop] [--runtime
//   container|microvm] [--pool N]
// With microvm, creates restore from the template snapshot (the first create makes it; a cold
// boot is measured once beside it); --pool N also runs deskboxd with N ready microVMs and
// measures creates that take one.
// Needs root, runc and the templates built (images/build.py minimal desktop).
#include <sys/sysinfo.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench/support/bench_deskboxd.hpp"
#include "bench/support/percentiles.hpp"
#include "common/child_process.hpp"
#include "common/parse_integer.hpp"
#include "common/temp_dir.hpp"
#include "server/client/api_client.hpp"
#include "server/runtime/container/runtime.hpp"

namespace {

using namespace deskbox;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

using bench::ms_since;

using bench::Daemon;

void print_row(const char* what, const std::vector<double>& ours, const char* alt_name,
               const std::vector<double>& alt) {
    auto o = bench::percentiles(ours);
    if (alt.empty()) {
        std::printf("%-30s ours p50 %8.2f ms  p95 %8.2f  p99 %8.2f  (n=%zu)\n", what, o.p50, o.p95,
                    o.p99, ours.size());
        return;
    }
    auto a = bench::percentiles(alt);
    std::printf("%-30s ours p50 %8.2f ms  p99 %8.2f | %s p50 %8.2f ms  p99 %8.2f | %.0fx faster\n",
                what, o.p50, o.p99, alt_name, a.p50, a.p99, a.p50 / o.p50);
}

std::uint64_t read_number(const std::filesystem::path& file) {
    std::ifstream in(file);
    std::uint64_t v = 0;
    in >> v;
    return v;
}

// total_rss + total_mapped_file + total_shmem from a v1 memory.stat: what the sandbox's own
// processes hold (Xvfb's framebuffer is shared memory), without reclaimable page cache.
std::uint64_t resident_bytes(const std::filesystem::path& cgroup_dir) {
    std::ifstream in(cgroup_dir / "memory.stat");
    std::string key;
    std::uint64_t value = 0, sum = 0;
    while (in >> key >> value)
        if (key == "total_rss" || key == "total_mapped_file" || key == "total_shmem") sum += value;
    return sum;
}

std::uint64_t process_rss_bytes(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/statm");
    std::uint64_t size = 0, resident = 0;
    in >> size >> resident;
    return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

struct Args {
    int creates = 10;
    int shots = 100;
    int clicks = 200;
    bool desktop = true;
    std::string runtime = "container";
    int pool = 0;
};

Args parse_args(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        std::string flag = argv[i];
        auto number = [&](int& out) {
            if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a number");
            auto v = parse_integer(argv[++i]);
            if (!v || *v < 1 || *v > 100000)
                throw std::invalid_argument(flag + " needs a number in 1..100000");
            out = static_cast<int>(*v);
        };
        if (flag == "--creates")
            number(a.creates);
        else if (flag == "--shots")
            number(a.shots);
        else if (flag == "--clicks")
            number(a.clicks);
        else if (flag == "--no-desktop")
            a.desktop = false;
        else if (flag == "--pool")
            number(a.pool);
        else if (flag == "--runtime" && i + 1 < argc)
            a.runtime = argv[++i];
        else
            throw std::invalid_argument("unknown flag " + flag);
    }
    return a;
}

std::string g_runtime = "container";

// Milliseconds from create to the first screenshot (the sandbox is killed after).
double create_to_screenshot(client::ApiClient& api, const json& request) {
    auto t0 = Clock::now();
    json sb = api.post_json("/v1/sandboxes", request);
    std::string base = "/v1/sandboxes/" + sb["id"].get<std::string>();
    api.get_bytes(base + "/screenshot?format=png");
    double ms = ms_since(t0);
    api.delete_json(base);
    return ms;
}

// The microVM fast paths: the template snapshot made by the first create, a cold boot for
// comparison, and (pool_size > 0) creates served from the pool.
void bench_microvm_starts(client::ApiClient& api, int runs, int pool_size) {
    // An explicit resolution (the template's own) keeps these creates out of the pool.
    json restore_request = {
        {"template", "minimal"}, {"runtime", "microvm"}, {"resolution", {1280, 800}}};
    if (pool_size == 0) {
        std::printf(
            "first create -> first screenshot (boots and saves the template snapshot) "
            "%8.0f ms\n",
            create_to_screenshot(api, restore_request));
    }
    json cold = restore_request;
    cold["fast_start"] = false;
    std::vector<double> cold_ms = {create_to_screenshot(api, cold)};
    std::vector<double> restored;
    for (int i = 0; i < runs; ++i) restored.push_back(create_to_screenshot(api, restore_request));
    print_row("template snapshot create -> shot", restored, "cold boot", cold_ms);
    if (pool_size == 0) return;
    auto pooled_now = [&] {
        const std::string key = "deskbox_sandboxes{state=\"pooled\"} ";
        std::string metrics = api.get_bytes("/metrics").body;
        auto at = metrics.find(key);
        return at == std::string::npos ? 0 : std::stoi(metrics.substr(at + key.size()));
    };

    std::vector<double> pooled;
    for (int i = 0; i < runs; ++i) {
        auto deadline = Clock::now() + std::chrono::minutes(5);
        while (pooled_now() < pool_size && Clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        pooled.push_back(
            create_to_screenshot(api, {{"template", "minimal"}, {"runtime", "microvm"}}));
    }
    print_row("pooled create -> first shot", pooled, "cold boot", cold_ms);
}

void bench_create(client::ApiClient& api, int runs) {
    std::vector<double> create, first_shot, kill;
    for (int i = 0; i < runs; ++i) {
        auto t0 = Clock::now();
        json sb = api.post_json("/v1/sandboxes", {{"template", "minimal"}, {"runtime", g_runtime}});
        create.push_back(ms_since(t0));
        std::string base = "/v1/sandboxes/" + sb["id"].get<std::string>();
        api.get_bytes(base + "/screenshot?format=png");
        first_shot.push_back(ms_since(t0));
        auto t1 = Clock::now();
        api.delete_json(base);
        kill.push_back(ms_since(t1));
    }
    print_row("create (until running)", create, "", {});
    print_row("create -> first screenshot", first_shot, "", {});
    print_row("kill (all torn down)", kill, "", {});
}

// Fills the screen with detail (text in terminals), then leaves it still.
void make_screen_busy(client::ApiClient& api, const std::string& base) {
    // One background command per window: a background command's process group ends with it.
    for (const char* cmd :
         {"xterm -geometry 160x58+0+0 -e sh -c 'ls -la /usr/bin /usr/lib; sleep 1d'",
          "xterm -geometry 80x30+640+300 -fa Monospace -fs 11 -e sh -c 'ls -la /usr/share; sleep "
          "1d'"})
        api.post_json(base + "/commands", {{"cmd", cmd}, {"background", true}});
    std::this_thread::sleep_for(std::chrono::seconds(3));
}

void bench_screenshots(client::ApiClient& api, const std::string& base, int runs) {
    for (const char* format : {"png", "jpeg"}) {
        std::vector<double> ours;
        std::size_t bytes = 0;
        for (int i = 0; i < runs; ++i) {
            auto t0 = Clock::now();
            auto r = api.get_bytes(base + "/screenshot?format=" + format);
            ours.push_back(ms_since(t0));
            bytes = r.body.size();
        }
        std::vector<double> scrot;
        for (int i = 0; i < std::max(5, runs / 5); ++i) {
            auto t0 = Clock::now();
            api.post_json(base + "/commands",
                          {{"cmd", std::string("scrot -o -q 90 /tmp/shot.") + format}});
            api.get_bytes(base + "/files?path=/tmp/shot." + format);
            scrot.push_back(ms_since(t0));
        }
        std::string what =
            std::string("screenshot ") + format + " (" + std::to_string(bytes / 1024) + " KiB)";
        print_row(what.c_str(), ours, "scrot+read", scrot);
    }
}

void bench_clicks(client::ApiClient& api, const std::string& base, int runs) {
    std::vector<double> ours, xdotool;
    for (int i = 0; i < runs; ++i) {
        int x = 100 + (i * 37) % 1000, y = 100 + (i * 53) % 600;
        auto t0 = Clock::now();
        api.post_json(base + "/actions", {{"type", "click"}, {"x", x}, {"y", y}});
        ours.push_back(ms_since(t0));
    }
    for (int i = 0; i < std::max(10, runs / 5); ++i) {
        int x = 100 + (i * 37) % 1000, y = 100 + (i * 53) % 600;
        auto t0 = Clock::now();
        api.post_json(base + "/commands", {{"cmd", "xdotool mousemove " + std::to_string(x) + " " +
                                                       std::to_string(y) + " click 1"}});
        xdotool.push_back(ms_since(t0));
    }
    print_row("click round trip", ours, "xdotool", xdotool);
}

void bench_memory(client::ApiClient& api, const Daemon& daemon, const std::string& template_name) {
    auto rss_before = process_rss_bytes(daemon.pid());
    json sb = api.post_json("/v1/sandboxes", {{"template", template_name}, {"runtime", g_runtime}});
    std::string id = sb["id"];
    // Let the session settle (desktop: panel, daemons) before calling it idle.
    std::this_thread::sleep_for(std::chrono::seconds(template_name == "desktop" ? 30 : 10));
    api.get_bytes("/v1/sandboxes/" + id + "/screenshot?format=png");
    std::uint64_t usage = 0, resident = 0;
    if (g_runtime == "microvm") {
        // The whole guest is one QEMU process: its PSS is what the host pays.
        auto pids = run_process({"pgrep", "-f", "qemu-system-x86_64.*" + id}).out;
        std::ifstream rollup("/proc/" + pids.substr(0, pids.find('\n')) + "/smaps_rollup");
        std::string key;
        while (rollup >> key)
            if (key == "Pss:") {
                rollup >> resident;
                resident *= 1024;
                break;
            }
        usage = resident;
    } else {
        auto parent = runtime::ContainerRuntime::cgroup_parent_for(daemon.state());
        auto dir = std::filesystem::path("/sys/fs/cgroup/memory") / parent / id;
        usage = read_number(dir / "memory.usage_in_bytes");
        resident = resident_bytes(dir);
    }
    auto host_side = process_rss_bytes(daemon.pid()) - rss_before;
    struct sysinfo info {};
    ::sysinfo(&info);
    double total = static_cast<double>(info.totalram) * info.mem_unit;
    double per_sandbox = static_cast<double>(resident + host_side);
    std::printf(
        "idle %-8s sandbox: resident %6.1f MiB (cgroup usage incl. cache %6.1f MiB), "
        "deskboxd +%5.1f MiB -> ~%.0f at once in %.1f GiB\n",
        template_name.c_str(), resident / 1048576.0, usage / 1048576.0, host_side / 1048576.0,
        total * 0.9 / per_sandbox, total / 1073741824.0);
    api.delete_json("/v1/sandboxes/" + id);
}

}  // namespace

int main(int argc, char** argv) try {
    Args args = parse_args(argc, argv);
    g_runtime = args.runtime;
    std::vector<std::string> daemon_args;
    if (args.pool > 0) {
        if (args.runtime != "microvm")
            throw std::invalid_argument("--pool needs --runtime microvm");
        daemon_args = {"--microvm-pool", "minimal=" + std::to_string(args.pool)};
    }
    Daemon daemon(daemon_args);
    client::ClientOptions options;
    options.server = daemon.url();
    client::ApiClient api(options);

    if (args.runtime == "microvm") bench_microvm_starts(api, args.creates, args.pool);
    bench_create(api, args.creates);

    json sb = api.post_json(
        "/v1/sandboxes",
        {{"template", "minimal"}, {"runtime", g_runtime}, {"resolution", {1280, 800}}});
    std::string base = "/v1/sandboxes/" + sb["id"].get<std::string>();
    make_screen_busy(api, base);
    bench_screenshots(api, base, args.shots);
    bench_clicks(api, base, args.clicks);
    api.delete_json(base);

    bench_memory(api, daemon, "minimal");
    if (args.desktop) bench_memory(api, daemon, "desktop");
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "sandbox_bench: %s\n", e.what());
    return 1;
}
