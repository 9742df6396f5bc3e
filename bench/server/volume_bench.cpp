// Volumes through deskboxd with real containers, each figure next to the alternative in the
// same run:
//   - write (fsync'd) and read (cold cache) throughput of a volume mounted in a sandbox, next to
//     the sandbox's own disk (its writable layer) in the same sandbox;
//   - a volume's files API without a sandbox (PUT/GET 16 MiB) next to the sandbox's files API;
//   - create of a 1 GiB volume, and a sandbox create with a volume next to one without.
//
//   volume_bench [--rounds N]
// Needs root, runc and the shipped minimal template (images/build.py minimal).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench/support/bench_deskboxd.hpp"
#include "bench/support/percentiles.hpp"
#include "common/parse_integer.hpp"
#include "server/client/api_client.hpp"

namespace {

using namespace deskbox;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr int kMiB = 256;  // written and read by dd per round

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

void drop_host_caches() {
    ::sync();
    std::ofstream("/proc/sys/vm/drop_caches") << "3\n";
}

std::string run(client::ApiClient& api, const std::string& id, const std::string& cmd) {
    json r = api.post_json("/v1/sandboxes/" + id + "/commands", {{"cmd", cmd}});
    if (r.value("exit_code", -1) != 0)
        throw std::runtime_error(cmd + ": " + r.value("stdout", "") + r.value("stderr", ""));
    return r.value("stdout", "");
}

// MB/s from dd's last line ("... copied, 0.66 s, 405 MB/s"): bytes over its own seconds.
double dd_mb_per_s(const std::string& out) {
    const auto copied = out.rfind("copied, ");
    if (copied == std::string::npos) throw std::runtime_error("no dd summary in: " + out);
    const double seconds = std::stod(out.substr(copied + 8));
    return kMiB * 1.048576 / seconds;
}

struct Throughput {
    double write = 0, read = 0;
};

Throughput disk_throughput(client::ApiClient& api, const std::string& id, const std::string& dir,
                           int rounds) {
    std::vector<double> writes, reads;
    const std::string file = dir + "/bench.bin";
    for (int i = 0; i < rounds; ++i) {
        writes.push_back(dd_mb_per_s(run(api, id,
                                         "dd if=/dev/zero of=" + file + " bs=1M count=" +
                                             std::to_string(kMiB) + " conv=fsync 2>&1 | tail -1")));
        drop_host_caches();
        reads.push_back(
            dd_mb_per_s(run(api, id, "dd if=" + file + " of=/dev/null bs=1M 2>&1 | tail -1")));
        run(api, id, "rm -f " + file);
    }
    return {median(writes), median(reads)};
}

// PUT then GET of 16 MiB at `path` through `files` (a files API route), milliseconds each.
std::pair<double, double> files_round_trip(client::ApiClient& api, const std::string& files,
                                           const std::string& path, int rounds) {
    const std::string bytes(16 << 20, 'v');
    std::vector<double> puts, gets;
    for (int i = 0; i < rounds; ++i) {
        auto t0 = Clock::now();
        api.call(client::Method::put, files + "?path=" + path, bytes, "application/octet-stream");
        puts.push_back(ms_since(t0));
        t0 = Clock::now();
        auto got = api.call(client::Method::get, files + "?path=" + path, "", "", "*/*");
        gets.push_back(ms_since(t0));
        if (got.body.size() != bytes.size()) throw std::runtime_error("a short read");
    }
    return {median(puts), median(gets)};
}

}  // namespace

int main(int argc, char** argv) {
    int rounds = 3;
    for (int i = 1; i + 1 < argc; i += 2)
        if (std::string(argv[i]) == "--rounds")
            rounds = int(parse_integer(argv[i + 1]).value_or(3));
    if (::geteuid() != 0) {
        std::fprintf(stderr, "volume_bench: needs root\n");
        return 2;
    }
    bench::Daemon daemon;
    client::ClientOptions options;
    options.server = daemon.url();
    options.request_timeout = std::chrono::minutes(5);
    client::ApiClient api(options);
    std::vector<double> volume_creates;
    for (int i = 0; i < rounds; ++i) {
        const std::string name = "made-" + std::to_string(i);
        const auto t0 = Clock::now();
        api.post_json("/v1/volumes", {{"name", name}, {"size_mb", 1024}});
        volume_creates.push_back(ms_since(t0));
        api.send(client::Method::del, "/v1/volumes/" + name, "", "");
    }
    api.post_json("/v1/volumes", {{"name", "bench"}, {"size_mb", 2048}});

    std::vector<double> with_volume, without;
    std::string id;
    for (int i = 0; i < rounds; ++i) {
        auto t0 = Clock::now();
        json plain = api.post_json("/v1/sandboxes", {{"network", false}});
        without.push_back(ms_since(t0));
        api.send(client::Method::del, "/v1/sandboxes/" + plain.at("id").get<std::string>(), "", "");
        if (!id.empty()) api.send(client::Method::del, "/v1/sandboxes/" + id, "", "");
        t0 = Clock::now();
        json mounted = api.post_json(
            "/v1/sandboxes",
            {{"network", false}, {"volumes", {{{"name", "bench"}, {"path", "/data"}}}}});
        with_volume.push_back(ms_since(t0));
        id = mounted.at("id");
    }

    const Throughput volume = disk_throughput(api, id, "/data", rounds);
    const Throughput own = disk_throughput(api, id, "/home/user", rounds);
    const auto [volume_put, volume_get] =
        files_round_trip(api, "/v1/volumes/bench/files", "/bench/blob.bin", rounds);
    const auto [sandbox_put, sandbox_get] = files_round_trip(api, "/v1/sandboxes/" + id + "/files",
                                                             "/home/user/bench/blob.bin", rounds);
    api.send(client::Method::del, "/v1/sandboxes/" + id, "", "");

    std::printf("volume_bench (%d rounds, medians; dd of %d MiB, reads after dropping caches)\n",
                rounds, kMiB);
    std::printf("%-44s %10s %12s %8s\n", "", "deskbox", "alternative", "ratio");
    auto row = [](const char* what, double ours, double theirs, const char* alternative) {
        std::printf("%-44s %10.1f %12.1f %7.2fx  (%s)\n", what, ours, theirs,
                    theirs > 0 ? ours / theirs : 0.0, alternative);
    };
    row("write MB/s, fsync'd: volume", volume.write, own.write, "the sandbox's own disk");
    row("read MB/s, cold: volume", volume.read, own.read, "the sandbox's own disk");
    row("PUT 16 MiB ms: volume files API", volume_put, sandbox_put, "a sandbox's files API");
    row("GET 16 MiB ms: volume files API", volume_get, sandbox_get, "a sandbox's files API");
    row("sandbox create ms: with a volume", median(with_volume), median(without), "without");
    std::printf("%-44s %10.1f\n", "volume create ms (1 GiB)", median(volume_creates));
    return 0;
}
