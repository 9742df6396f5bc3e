// deskboxd end to end over HTTP with real runc sandboxes, next to the pipelines agent stacks
// build from shell tools, measured in the same run on the same sandbox:
//   - create -> first screenshot (and kill), p50/p95;
//   - screenshot round trip at 1280x800 on a busy screen, PNG and JPEG, p50/p99, next to
//     `scrot` run through the commands API plus reading its file through the files API;
//   - click round trip (POST /actions until answered), p50/p99, next to `xdotool` run through
//     the commands API (what the Anthropic demo's shell tool does);
//   - memory of an idle `minimal` and `desktop` sandbox (cgroup), and how many fit in RAM.
//
//   - cold creates step by step (the audit log's start_phases and the wait for ready);
//   - with --pool N, creates that take a pooled sandbox beside cold ones;
//   - --at-once N (containers: default 20) creates at once, each until its first screenshot: cold,
//   and
//     (with --pool of at least N) from the pool.
//
//   sandbox_bench [--creates N] [--shots N] [--clicks N] [--no-desktop] [--runtime
//   container|microvm] [--pool N] [--at-once N]
// With microvm, creates restore from the template snapshot (the first create makes it; a cold
// boot is measured once beside it); --pool N also runs deskboxd with N ready microVMs
// (--microvm-pool) or containers (--container-pool) and measures creates that take one.
// Needs root, runc and the templates built (images/build.py minimal desktop).
#include <sys/sysinfo.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
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

std::string trim_spaces(std::string text) {
    const auto first = text.find_first_not_of(' ');
    if (first == std::string::npos) return {};
    return text.substr(first, text.find_last_not_of(' ') - first + 1);
}

std::uint64_t process_rss_bytes(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/statm");
    std::uint64_t size = 0, resident = 0;
    in >> size >> resident;
    return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

// Where an idle container's memory goes: its cgroup's memory.stat (anonymous, page cache,
// shared memory, kernel) and each process's PSS split into anonymous, file and shmem.
void print_memory_breakdown(const std::filesystem::path& cgroup_dir) {
    std::map<std::string, std::uint64_t> stat;
    {
        std::ifstream in(cgroup_dir / "memory.stat");
        std::string key;
        std::uint64_t value = 0;
        while (in >> key >> value) stat[key] = value;
    }
    const double kernel =
        static_cast<double>(read_number(cgroup_dir / "memory.kmem.usage_in_bytes"));
    std::printf(
        "  cgroup: rss %.1f MiB, cache %.1f (of it shmem %.1f, mapped %.1f, "
        "inactive_file %.1f), kernel %.1f MiB\n",
        stat["total_rss"] / 1048576.0, stat["total_cache"] / 1048576.0,
        stat["total_shmem"] / 1048576.0, stat["total_mapped_file"] / 1048576.0,
        stat["total_inactive_file"] / 1048576.0, kernel / 1048576.0);
    std::ifstream procs(cgroup_dir / "cgroup.procs");
    for (pid_t pid = 0; procs >> pid;) {
        std::ifstream comm_in("/proc/" + std::to_string(pid) + "/comm");
        std::string comm;
        std::getline(comm_in, comm);
        std::map<std::string, std::uint64_t> kb;
        std::ifstream rollup("/proc/" + std::to_string(pid) + "/smaps_rollup");
        for (std::string line; std::getline(rollup, line);) {
            auto colon = line.find(':');
            if (colon == std::string::npos) continue;
            auto value =
                parse_integer(trim_spaces(line.substr(colon + 1, line.rfind(' ') - colon)));
            if (value) kb[line.substr(0, colon)] = static_cast<std::uint64_t>(*value);
        }
        std::printf(
            "  %-16s pid %7d: RSS %6.1f MiB, PSS %6.1f (anon %5.1f, file %5.1f, "
            "shmem %5.1f)\n",
            comm.c_str(), pid, kb["Rss"] / 1024.0, kb["Pss"] / 1024.0, kb["Pss_Anon"] / 1024.0,
            kb["Pss_File"] / 1024.0, kb["Pss_Shmem"] / 1024.0);
    }
}

struct Args {
    int creates = 10;
    int shots = 100;
    int clicks = 200;
    bool desktop = true;
    std::string runtime = "container";
    int pool = 0;
    int at_once = -1;  // -1: 20 containers, no microVMs (TCG would take minutes)
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
        else if (flag == "--at-once")
            number(a.at_once);
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

int pooled_now(client::ApiClient& api) {
    const std::string key = "deskbox_sandboxes{state=\"pooled\"} ";
    std::string metrics = api.get_bytes("/metrics").body;
    auto at = metrics.find(key);
    return at == std::string::npos ? 0 : std::stoi(metrics.substr(at + key.size()));
}

void wait_for_pool(client::ApiClient& api, int size) {
    auto deadline = Clock::now() + std::chrono::minutes(3);
    while (pooled_now(api) < size && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
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
    std::vector<double> pooled;
    for (int i = 0; i < runs; ++i) {
        wait_for_pool(api, pool_size);
        pooled.push_back(
            create_to_screenshot(api, {{"template", "minimal"}, {"runtime", "microvm"}}));
    }
    print_row("pooled create -> first shot", pooled, "cold boot", cold_ms);
}

// The last `kind` line of a sandbox's audit log (its detail), or null.
json audit_detail(const std::filesystem::path& state, const std::string& id,
                  const std::string& kind) {
    std::ifstream in(state / "audit" / (id + ".jsonl"));
    json found;
    for (std::string line; std::getline(in, line);) {
        auto entry = json::parse(line, nullptr, false);
        if (entry.is_object() && entry.value("kind", "") == kind) found = entry["detail"];
    }
    return found;
}

// Per step of the start (the audit log's start_phases, then the wait for the template's ready
// condition), its p50 over the creates measured.
void print_phases(const std::vector<json>& phase_lines) {
    std::vector<std::string> order;
    std::map<std::string, std::vector<double>> by_name;
    for (const auto& phases : phase_lines)
        for (auto& [name, ms] : phases.items()) {
            if (!by_name.count(name)) order.push_back(name);
            by_name[name].push_back(ms.get<double>());
        }
    std::printf("  cold create, step by step (p50 ms):");
    for (const auto& name : order)
        std::printf(" %s %.1f", name.c_str(), bench::percentiles(by_name[name]).p50);
    std::printf("\n");
}

// Cold creates (a request the pool, if any, does not fit: an env of its own) one at a time:
// create -> running (the template's ready condition met) -> first screenshot, with the start's
// steps from the audit log.
std::vector<double> bench_create(client::ApiClient& api, const std::filesystem::path& state,
                                 int runs) {
    std::vector<double> create, first_shot, kill;
    std::vector<json> phases;
    for (int i = 0; i < runs; ++i) {
        auto t0 = Clock::now();
        json sb = api.post_json(
            "/v1/sandboxes",
            {{"template", "minimal"}, {"runtime", g_runtime}, {"env", {{"BENCH", "cold"}}}});
        create.push_back(ms_since(t0));
        const std::string id = sb["id"];
        std::string base = "/v1/sandboxes/" + id;
        api.get_bytes(base + "/screenshot?format=png");
        first_shot.push_back(ms_since(t0));
        auto t1 = Clock::now();
        api.delete_json(base);
        kill.push_back(ms_since(t1));
        json line = audit_detail(state, id, "start_phases");
        if (line.is_object()) {
            if (auto ready = audit_detail(state, id, "ready"); ready.is_object())
                line["ready_wait"] = ready.value("waited_ms", 0);
            phases.push_back(line);
        }
    }
    print_row("create (until running)", create, "", {});
    print_row("create -> first screenshot", first_shot, "", {});
    print_row("kill (all torn down)", kill, "", {});
    if (!phases.empty()) print_phases(phases);
    return first_shot;
}

// Container creates that take a pooled sandbox (the pool full before each), beside cold ones.
void bench_container_pool(client::ApiClient& api, int runs, int pool_size,
                          const std::vector<double>& cold) {
    std::vector<double> pooled;
    for (int i = 0; i < runs; ++i) {
        wait_for_pool(api, pool_size);
        pooled.push_back(
            create_to_screenshot(api, {{"template", "minimal"}, {"runtime", g_runtime}}));
    }
    print_row("pooled create -> first shot", pooled, "cold create", cold);
}

// `count` creates at once, each until its first screenshot: the wall time until all answered.
double creates_at_once(const std::string& server, int count, const json& request,
                       std::vector<double>& each) {
    std::vector<std::thread> threads;
    std::vector<double> ms(static_cast<std::size_t>(count), -1);
    std::vector<std::string> ids(static_cast<std::size_t>(count));
    auto t0 = Clock::now();
    for (int i = 0; i < count; ++i)
        threads.emplace_back([&, i] {
            try {
                client::ClientOptions options;
                options.server = server;
                client::ApiClient api(options);
                auto start = Clock::now();
                json sb = api.post_json("/v1/sandboxes", request);
                ids[static_cast<std::size_t>(i)] = sb["id"];
                api.get_bytes("/v1/sandboxes/" + sb["id"].get<std::string>() +
                              "/screenshot?format=png");
                ms[static_cast<std::size_t>(i)] = ms_since(start);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "create %d of %d: %s\n", i + 1, count, e.what());
            }
        });
    for (auto& t : threads) t.join();
    const double wall = ms_since(t0);
    client::ClientOptions options;
    options.server = server;
    client::ApiClient api(options);
    for (const auto& id : ids)
        if (!id.empty()) api.delete_json("/v1/sandboxes/" + id);
    for (double v : ms)
        if (v >= 0) each.push_back(v);
    return wall;
}

void bench_creates_at_once(client::ApiClient& api, const std::string& server, int count,
                           int pool_size) {
    std::vector<double> cold_each;
    const double cold = creates_at_once(
        server, count,
        {{"template", "minimal"}, {"runtime", g_runtime}, {"env", {{"BENCH", "cold"}}}}, cold_each);
    std::printf(
        "%d creates at once, cold: all answered with a screenshot in %.0f ms (%zu ok, "
        "each p50 %.0f ms)\n",
        count, cold, cold_each.size(), bench::percentiles(cold_each).p50);
    if (pool_size < count) return;
    wait_for_pool(api, pool_size);
    std::vector<double> pooled_each;
    const double pooled = creates_at_once(
        server, count, {{"template", "minimal"}, {"runtime", g_runtime}}, pooled_each);
    std::printf(
        "%d creates at once, pooled: all answered with a screenshot in %.0f ms (%zu ok, "
        "each p50 %.0f ms) | cold %.0f ms | %.1fx faster\n",
        count, pooled, pooled_each.size(), bench::percentiles(pooled_each).p50, cold,
        cold / pooled);
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
        print_memory_breakdown(dir);
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
    if (args.at_once < 0) args.at_once = args.runtime == "container" ? 20 : 0;
    // Room for the creates at once beside a full pool; their 8 GiB disk caps are promised, not
    // used, so the disk commitment is off (40 of them would pass 2x this machine's free space).
    std::vector<std::string> daemon_args = {
        "--max-sandboxes", std::to_string(args.at_once + args.pool + 2), "--disk-overcommit", "0"};
    if (args.pool > 0)
        daemon_args.insert(daemon_args.end(),
                           {args.runtime == "microvm" ? "--microvm-pool" : "--container-pool",
                            "minimal=" + std::to_string(args.pool)});
    Daemon daemon(daemon_args);
    client::ClientOptions options;
    options.server = daemon.url();
    client::ApiClient api(options);

    if (args.runtime == "microvm") bench_microvm_starts(api, args.creates, args.pool);
    // Cold creates first, while the pool (if any) fills beside them as it would in use.
    const auto cold = bench_create(api, daemon.state(), args.creates);
    if (args.runtime == "container" && args.pool > 0)
        bench_container_pool(api, args.creates, args.pool, cold);
    if (args.at_once > 0) bench_creates_at_once(api, daemon.url(), args.at_once, args.pool);

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
