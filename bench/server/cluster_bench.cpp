// What a deskbox cluster costs and gives, on this host: real etcd and real deskboxd nodes on
// loopback, real container sandboxes.
//   1. The latency a routed request adds: the same request (a cursor read, a click, a PNG
//      screenshot) sent to the node that owns the sandbox and to another node that forwards it.
//      Goal: under 1 ms at p50.
//   2. Creates per second through a 1-node cluster and a 3-node cluster, the same number of
//      concurrent clients. (All nodes share this host's cores: on one machine more nodes cannot
//      make more CPU; what this shows is that placement and forwarding do not cost throughput.)
//
//   cluster_bench [--requests N] [--creates N] [--clients N]
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/support/bench_deskboxd.hpp"
#include "bench/support/percentiles.hpp"
#include "server/client/api_client.hpp"
#include "tests/support/etcd_cluster.hpp"

namespace {

using namespace deskbox;
using nlohmann::json;

const std::string kSecret = "cluster-bench-secret-0123456789";

struct Options {
    int requests = 300;
    int creates = 12;
    int clients = 4;
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string key = argv[i];
        const int value = std::atoi(argv[i + 1]);
        if (value <= 0) {
            std::fprintf(stderr, "%s: expected a positive number\n", argv[i]);
            std::exit(2);
        }
        if (key == "--requests")
            o.requests = value;
        else if (key == "--creates")
            o.creates = value;
        else if (key == "--clients")
            o.clients = value;
        else {
            std::fprintf(stderr,
                         "usage: cluster_bench [--requests N] [--creates N] [--clients N]\n");
            std::exit(2);
        }
    }
    return o;
}

// `nodes` deskboxd members of one cluster on `etcd`, each with its own host id range.
std::vector<std::unique_ptr<bench::Daemon>> start_nodes(const test::EtcdCluster& etcd, int nodes,
                                                        int capacity, const std::string& prefix) {
    std::vector<std::unique_ptr<bench::Daemon>> out;
    for (int i = 0; i < nodes; ++i) {
        const std::uint64_t first = 3'200'000'000ull + std::uint64_t(i) * 32 * 65536;
        out.push_back(std::make_unique<bench::Daemon>(std::vector<std::string>{
            "--cluster", "etcd=" + etcd.endpoint_list(), "--node-name",
            "bench-" + std::to_string(i), "--cluster-secret", kSecret, "--cluster-prefix", prefix,
            "--max-sandboxes", std::to_string(capacity), "--userns-range",
            std::to_string(first) + ":32", "--default-network", "false"}));
    }
    return out;
}

client::ApiClient client_of(const bench::Daemon& node) {
    client::ClientOptions o;
    o.server = node.url();
    return client::ApiClient(o);
}

// p50/p95 in ms of `n` runs of `request` through `api`.
template <typename Request>
bench::Percentiles time_requests(int n, Request&& request) {
    std::vector<double> samples;
    for (int i = 0; i < n; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        request();
        samples.push_back(bench::ms_since(t0));
    }
    return bench::percentiles(samples);
}

void routed_latency(const Options& o, const test::EtcdCluster& etcd) {
    auto nodes = start_nodes(etcd, 2, 4, "/bench-latency/");
    auto owner_api = client_of(*nodes[1]);
    auto other_api = client_of(*nodes[0]);
    // Placed on the emptiest: drain the first so the sandbox lands on the second.
    other_api.post_json("/v1/nodes/bench-0/drain");
    json sandbox = other_api.post_json("/v1/sandboxes", {{"template", "minimal"}});
    other_api.post_json("/v1/nodes/bench-0/undrain");
    const std::string base = "/v1/sandboxes/" + sandbox["id"].get<std::string>();
    std::printf("routed requests: sandbox %s on %s, %d requests each, p50/p95 ms\n",
                sandbox["id"].get<std::string>().c_str(),
                sandbox["node"].get<std::string>().c_str(), o.requests);
    struct Kind {
        const char* name;
        std::function<void(client::ApiClient&)> run;
    };
    const std::vector<Kind> kinds = {
        {"cursor", [&](client::ApiClient& api) { api.get_json(base + "/cursor"); }},
        {"click",
         [&](client::ApiClient& api) {
             api.post_json(base + "/actions", {{"type", "click"}, {"x", 5}, {"y", 5}});
         }},
        {"screenshot png",
         [&](client::ApiClient& api) { api.get_bytes(base + "/screenshot?format=png"); }},
    };
    for (const auto& kind : kinds) {
        for (int warm = 0; warm < 10; ++warm) kind.run(owner_api), kind.run(other_api);
        auto direct = time_requests(o.requests, [&] { kind.run(owner_api); });
        auto routed = time_requests(o.requests, [&] { kind.run(other_api); });
        std::printf(
            "  %-15s direct %7.3f / %7.3f   routed %7.3f / %7.3f   added p50 %6.3f ms "
            "(routed/direct %.2fx)\n",
            kind.name, direct.p50, direct.p95, routed.p50, routed.p95, routed.p50 - direct.p50,
            routed.p50 / direct.p50);
    }
    owner_api.delete_json(base);
}

// Creates `o.creates` sandboxes with `o.clients` concurrent clients spread over the nodes;
// returns creates per second (all killed after).
double creates_per_second(const Options& o, const test::EtcdCluster& etcd, int node_count) {
    auto nodes = start_nodes(etcd, node_count, o.creates,
                             "/bench-creates-" + std::to_string(node_count) + "/");
    std::vector<std::vector<std::string>> made(o.clients);
    std::atomic<int> next{0};
    std::atomic<int> failed{0};
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> clients;
    for (int c = 0; c < o.clients; ++c)
        clients.emplace_back([&, c] {
            auto api = client_of(*nodes[c % nodes.size()]);
            while (next.fetch_add(1) < o.creates) {
                auto r = api.send(client::Method::post, "/v1/sandboxes",
                                  json{{"template", "minimal"}}.dump());
                if (r.status == 201)
                    made[c].push_back(r.json()["id"]);
                else
                    ++failed;
            }
        });
    for (auto& t : clients) t.join();
    const double seconds = bench::ms_since(t0) / 1000.0;
    auto api = client_of(*nodes[0]);
    std::size_t total = 0;
    for (const auto& ids : made)
        for (const auto& id : ids) {
            api.send(client::Method::del, "/v1/sandboxes/" + id);
            ++total;
        }
    if (failed) std::printf("  (%d creates failed)\n", failed.load());
    return double(total) / seconds;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    try {
        test::EtcdCluster etcd(3);
        routed_latency(o, etcd);
        std::printf("creates: %d sandboxes, %d concurrent clients\n", o.creates, o.clients);
        const double one = creates_per_second(o, etcd, 1);
        const double three = creates_per_second(o, etcd, 3);
        std::printf(
            "  1 node  %6.2f creates/s\n  3 nodes %6.2f creates/s (3 nodes/1 node %.2fx, "
            "same host)\n",
            one, three, three / one);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cluster_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
