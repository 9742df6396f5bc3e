// Named snapshots, forks and auto_resume through deskboxd, each figure next to what a user does
// without them, measured in the same run:
//   - a prepared sandbox (files written, as a setup script or a package install leaves them):
//     snapshot time and size; create from the snapshot to its first screenshot next to a fresh
//     create plus running the setup again;
//   - fork of N copies next to N creates from the snapshot one after another;
//   - the first command on a sandbox its timeout paused (auto_resume) next to one on a running
//     sandbox, and next to the explicit resume + command a client without auto_resume sends;
//   - with --microvm, the same for a microVM: a memory snapshot, a create from it next to a
//     create from the template.
//
//   snapshot_bench [--rounds N] [--fork N] [--microvm]
// Needs root, runc and the shipped minimal template (images/build.py minimal); --microvm needs
// QEMU and images/build_microvm.py minimal.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/support/bench_deskboxd.hpp"
#include "common/parse_integer.hpp"
#include "server/client/api_client.hpp"

namespace {

using namespace deskbox;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

// What "prepared" means: 2000 small files and a 64 MiB one, as a dependency install leaves.
constexpr const char* kSetup =
    "mkdir -p /home/user/project/src && cd /home/user/project/src && "
    "for i in $(seq 1 2000); do head -c 2048 /dev/urandom > f$i; done && "
    "head -c 67108864 /dev/urandom > /home/user/project/model.bin && sync";

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

long long mem_available_kib() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    long long value = 0;
    std::string unit;
    while (in >> key >> value >> unit)
        if (key == "MemAvailable:") return value;
    throw std::runtime_error("no MemAvailable in /proc/meminfo");
}

// Lets the desktops started last finish starting and killed ones' memory return.
void settle() {
    std::this_thread::sleep_for(std::chrono::seconds(3));
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

class Bench {
  public:
    explicit Bench(client::ApiClient& api) : api_(api) {}

    std::string run(const std::string& id, const std::string& cmd) {
        json r = api_.post_json("/v1/sandboxes/" + id + "/commands", {{"cmd", cmd}});
        if (r.value("exit_code", -1) != 0)
            throw std::runtime_error(cmd + ": " + r.value("stdout", "") + r.value("stderr", ""));
        return r.value("stdout", "");
    }
    // Create (the body as given) to the first screenshot's bytes, ms; the id in `id`.
    double create_to_screenshot(const json& body, std::string& id) {
        const auto t0 = Clock::now();
        id = api_.post_json("/v1/sandboxes", body).at("id");
        api_.call(client::Method::get, "/v1/sandboxes/" + id + "/screenshot", "", "", "*/*");
        return ms_since(t0);
    }
    void kill(const std::string& id) {
        api_.send(client::Method::del, "/v1/sandboxes/" + id, "", "");
    }
    void drop_snapshot(const std::string& name) {
        api_.send(client::Method::del, "/v1/snapshots/" + name, "", "");
    }
    json snapshot(const std::string& id, const std::string& name, double& ms) {
        const auto t0 = Clock::now();
        json made = api_.post_json("/v1/sandboxes/" + id + "/snapshots", {{"name", name}});
        ms = ms_since(t0);
        return made;
    }
    client::ApiClient& api() { return api_; }

  private:
    client::ApiClient& api_;
};

void row(const char* what, double ours, double theirs, const char* alternative) {
    std::printf("%-52s %10.0f %12.0f %7.2fx  (%s)\n", what, ours, theirs,
                ours > 0 ? theirs / ours : 0.0, alternative);
}

void container_rows(Bench& b, int rounds, int fork_count) {
    const json base = {{"network", false}, {"timeout_s", 1800}};
    std::string source;
    b.create_to_screenshot(base, source);
    const auto setup_t0 = Clock::now();
    b.run(source, kSetup);
    const double setup_ms = ms_since(setup_t0);

    std::vector<double> snapshot_ms, from_snapshot, fresh_and_setup;
    long long size = 0;
    for (int i = 0; i < rounds; ++i) {
        double ms = 0;
        const std::string name = "bench-" + std::to_string(i);
        size = b.snapshot(source, name, ms).value("size_bytes", 0LL);
        snapshot_ms.push_back(ms);
        std::string copy, fresh;
        json from = base;
        from.erase("network");
        from["snapshot"] = name;
        from_snapshot.push_back(b.create_to_screenshot(from, copy));
        if (b.run(copy, "ls /home/user/project/src | wc -l") != "2000\n")
            throw std::runtime_error("the copy lacks the setup's files");
        b.kill(copy);
        const double created = b.create_to_screenshot(base, fresh);
        const auto t0 = Clock::now();
        b.run(fresh, kSetup);
        fresh_and_setup.push_back(created + ms_since(t0));
        b.kill(fresh);
        if (i + 1 < rounds) b.drop_snapshot(name);
    }

    // A fork next to the same number of creates from the snapshot, one after another: time to
    // the last copy's first screenshot, and the host memory each copy takes (MemAvailable's
    // drop over the copies: pages they share are counted once).
    std::vector<double> fork_ms, serial_ms, fork_mib, serial_mib;
    auto screenshot = [&](const std::string& id) {
        b.api().call(client::Method::get, "/v1/sandboxes/" + id + "/screenshot", "", "", "*/*");
    };
    for (int i = 0; i < rounds; ++i) {
        settle();
        long long before = mem_available_kib();
        auto t0 = Clock::now();
        json forked =
            b.api().post_json("/v1/sandboxes/" + source + "/fork", {{"count", fork_count}});
        std::vector<std::string> made;
        for (const auto& copy : forked.at("sandboxes")) made.push_back(copy.at("id"));
        for (const auto& id : made) screenshot(id);
        fork_ms.push_back(ms_since(t0));
        settle();
        fork_mib.push_back((before - mem_available_kib()) / 1024.0 / fork_count);
        for (const auto& id : made) b.kill(id);
        made.clear();

        settle();
        before = mem_available_kib();
        t0 = Clock::now();
        for (int n = 0; n < fork_count; ++n) {
            made.push_back(b.api()
                               .post_json("/v1/sandboxes",
                                          {{"snapshot", "bench-" + std::to_string(rounds - 1)}})
                               .at("id"));
            screenshot(made.back());
        }
        serial_ms.push_back(ms_since(t0));
        settle();
        serial_mib.push_back((before - mem_available_kib()) / 1024.0 / fork_count);
        for (const auto& id : made) b.kill(id);
    }
    b.drop_snapshot("bench-" + std::to_string(rounds - 1));
    b.kill(source);

    // auto_resume: the first command after the timeout paused the sandbox.
    std::vector<double> woken, running, explicit_resume;
    std::string sleeper, awake;
    b.create_to_screenshot({{"network", false}, {"timeout_s", 1}, {"auto_resume", true}}, sleeper);
    b.create_to_screenshot({{"network", false}, {"timeout_s", 1}, {"on_timeout", "pause"}}, awake);
    auto paused = [&](const std::string& id) {
        for (int i = 0; i < 100; ++i) {
            if (b.api().get_json("/v1/sandboxes/" + id).value("state", "") == "paused") return;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        throw std::runtime_error(id + " was not paused by its timeout");
    };
    for (int i = 0; i < rounds; ++i) {
        paused(sleeper);
        auto t0 = Clock::now();
        b.run(sleeper, "true");
        woken.push_back(ms_since(t0));
        t0 = Clock::now();
        b.run(sleeper, "true");
        running.push_back(ms_since(t0));
        paused(awake);
        t0 = Clock::now();
        b.api().post_json("/v1/sandboxes/" + awake + "/resume", json::object());
        b.run(awake, "true");
        explicit_resume.push_back(ms_since(t0));
    }
    b.kill(sleeper);
    b.kill(awake);

    std::printf("container (setup: 2000 files + 64 MiB, %.0f ms to run)\n", setup_ms);
    std::printf("%-52s %10.0f\n", "snapshot ms (filesystem, source keeps running)",
                median(snapshot_ms));
    std::printf("%-52s %10.1f\n", "snapshot size MiB", size / 1048576.0);
    row("create from snapshot -> first screenshot ms", median(from_snapshot),
        median(fresh_and_setup), "fresh create + the setup again");
    char what[96];
    std::snprintf(what, sizeof what, "fork of %d -> the last copy's first screenshot ms",
                  fork_count);
    row(what, median(fork_ms), median(serial_ms), "as many creates from the snapshot in turn");
    row("  host memory per copy MiB", median(fork_mib), median(serial_mib),
        "per sandbox created from the snapshot");
    row("first command on a timeout-paused sandbox ms", median(woken), median(explicit_resume),
        "explicit resume + command");
    std::printf("%-52s %10.0f\n", "  (the same command on a running sandbox ms)", median(running));
}

void microvm_rows(Bench& b, int rounds) {
    const json base = {{"runtime", "microvm"}, {"timeout_s", 1800}};
    std::string source;
    b.create_to_screenshot(base, source);
    b.run(source, "head -c 16777216 /dev/urandom > /home/user/data.bin && sync");
    std::vector<double> snapshot_ms, from_snapshot, from_template;
    long long size = 0;
    for (int i = 0; i < rounds; ++i) {
        double ms = 0;
        const std::string name = "vm-bench-" + std::to_string(i);
        size = b.snapshot(source, name, ms).value("size_bytes", 0LL);
        snapshot_ms.push_back(ms);
        std::string copy, fresh;
        from_snapshot.push_back(b.create_to_screenshot({{"snapshot", name}}, copy));
        b.kill(copy);
        from_template.push_back(b.create_to_screenshot(base, fresh));
        b.kill(fresh);
        b.drop_snapshot(name);
    }
    auto t0 = Clock::now();
    json forked = b.api().post_json("/v1/sandboxes/" + source + "/fork", {{"count", 2}});
    const double fork_ms = ms_since(t0);
    for (const auto& copy : forked.at("sandboxes")) b.kill(copy.at("id"));
    b.kill(source);

    std::printf("microvm (TCG here; memory snapshots)\n");
    std::printf("%-52s %10.0f\n", "snapshot ms (memory + disk, source paused meanwhile)",
                median(snapshot_ms));
    std::printf("%-52s %10.1f\n", "snapshot size MiB", size / 1048576.0);
    row("create from snapshot -> first screenshot ms", median(from_snapshot), median(from_template),
        "create from the template snapshot");
    std::printf("%-52s %10.0f\n", "fork of 2 -> both started ms", fork_ms);
}

}  // namespace

int main(int argc, char** argv) {
    int rounds = 3, fork_count = 10;
    bool microvm = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--microvm") microvm = true;
        if (arg == "--rounds" && i + 1 < argc)
            rounds = int(parse_integer(argv[++i]).value_or(3));
        else if (arg == "--fork" && i + 1 < argc)
            fork_count = int(parse_integer(argv[++i]).value_or(10));
    }
    if (::geteuid() != 0) {
        std::fprintf(stderr, "snapshot_bench: needs root\n");
        return 2;
    }
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows appear as they are measured
    bench::Daemon daemon({"--max-sandboxes", std::to_string(fork_count + 4)});
    client::ClientOptions options;
    options.server = daemon.url();
    options.request_timeout = std::chrono::minutes(5);
    client::ApiClient api(options);
    Bench b(api);
    std::printf("snapshot_bench (%d rounds, medians; ratio = alternative / deskbox)\n", rounds);
    std::printf("%-52s %10s %12s %8s\n", "", "deskbox", "alternative", "ratio");
    try {
        container_rows(b, rounds, fork_count);
        if (microvm) microvm_rows(b, rounds);
    } catch (const std::exception& e) {  // the daemon still stops and removes its state
        std::fprintf(stderr, "snapshot_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
