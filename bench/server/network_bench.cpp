// Sandbox egress through the policy path (server/network: router namespace, TPROXY, the
// egress proxy splicing in deskboxd) next to the same kind of sandbox namespace with plain
// kernel forwarding (what a Docker-style bridge gives: no policy at all) and next to the host
// itself, all against a test internet in a namespace of the bench's own, in the same run:
//   - download and upload throughput of one TCP stream;
//   - connect latency and connect -> first response byte for a small HTTP request;
//   - create -> first screenshot of a container sandbox with networking off, on (the
//     internet) and on with an allow list, through deskboxd.
//
//   network_bench [--seconds S] [--requests N] [--creates N] [--microvm-creates N]
// --microvm-creates also measures microVM creates (restored from their template snapshots,
// one per network setting, made by a first create of each) with networking off and on.
// Needs root (namespaces), the `minimal` template built for the create figures.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/support/bench_deskboxd.hpp"
#include "bench/support/load_average.hpp"
#include "bench/support/percentiles.hpp"
#include "common/parse_integer.hpp"
#include "common/temp_dir.hpp"
#include "server/client/api_client.hpp"
#include "server/network/egress_ca.hpp"
#include "server/network/rtnetlink.hpp"
#include "server/network/sandbox_network.hpp"
#include "tests/support/test_internet.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

namespace {

using namespace deskbox;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

using bench::ms_since;

// Where a client runs: the host's own namespace (null), or a namespace's fd.
using Where = const network::NetworkNamespace*;

template <typename F>
auto in(Where where, F f) {
    decltype(f()) out{};
    if (!where) return f();
    where->run([&] { out = f(); });
    return out;
}

int connect_to(const std::string& address, int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    ::inet_pton(AF_INET, address.c_str(), &a.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

std::string head(const std::string& host) {
    return "GET / HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
}

// Busy CPU time of the whole machine (all cores, softirq included), in seconds.
double machine_busy_seconds() {
    std::ifstream in("/proc/stat");
    std::string cpu;
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0;
    in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq;
    return (user + nice + system + irq + softirq) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

struct Transfer {
    double gbit_per_s = 0;
    double cpu_s_per_gb = 0;  // machine CPU seconds per GB moved
};

// Gbit/s received from the byte source for `seconds`.
Transfer download(Where where, const std::string& address, double seconds) {
    return in(where, [&] {
        int fd = connect_to(address, 9000);
        if (fd < 0) return Transfer{};
        std::string h = head("allowed.test");
        (void)!::write(fd, h.data(), h.size());
        std::vector<char> buffer(1 << 20);
        std::uint64_t total = 0;
        auto t0 = Clock::now();
        double cpu0 = machine_busy_seconds();
        while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds) {
            ssize_t n = ::read(fd, buffer.data(), buffer.size());
            if (n <= 0) break;
            total += static_cast<std::uint64_t>(n);
        }
        double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
        double cpu = machine_busy_seconds() - cpu0;
        ::close(fd);
        return Transfer{static_cast<double>(total) * 8 / elapsed / 1e9,
                        cpu / (static_cast<double>(total) / 1e9)};
    });
}

// Gbit/s the sink received while we sent for `seconds`.
Transfer upload(Where where, const std::string& address, double seconds, test::TestInternet& net) {
    return in(where, [&] {
        int fd = connect_to(address, 9001);
        if (fd < 0) return Transfer{};
        // A sized body, as a real upload sends: the proxy reads HTTP request by request, and
        // bytes after a head without a length would be a next request (and cut as malformed).
        std::string h =
            "POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 1099511627776\r\n\r\n";
        (void)!::write(fd, h.data(), h.size());
        std::vector<char> buffer(1 << 20, 'u');
        auto before = net.sink_bytes();
        auto t0 = Clock::now();
        double cpu0 = machine_busy_seconds();
        while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds)
            if (::write(fd, buffer.data(), buffer.size()) <= 0) break;
        ::close(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the sink catches up
        double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
        double cpu = machine_busy_seconds() - cpu0;
        double bytes = static_cast<double>(net.sink_bytes() - before);
        return Transfer{bytes * 8 / elapsed / 1e9, bytes > 0 ? cpu / (bytes / 1e9) : 0};
    });
}

struct Latency {
    std::vector<double> connect_ms, first_byte_ms;
};

// `n` fresh connections, each a small HTTP request to port 80.
Latency requests(Where where, const std::string& address, int n) {
    return in(where, [&] {
        Latency out;
        for (int i = 0; i < n; ++i) {
            auto t0 = Clock::now();
            int fd = connect_to(address, 80);
            if (fd < 0) continue;
            out.connect_ms.push_back(ms_since(t0));
            std::string h = head("allowed.test");
            (void)!::write(fd, h.data(), h.size());
            char c;
            if (::read(fd, &c, 1) == 1) out.first_byte_ms.push_back(ms_since(t0));
            ::close(fd);
        }
        return out;
    });
}

struct TlsLatency {
    std::vector<double> fresh_ms;  // connect + TLS handshake + request -> whole response
    std::vector<double> kept_ms;   // one more request on that connection -> whole response
    std::string error;
};
// `n` fresh HTTPS connections to `name` (at `address`), verifying against `ca_file`, each
// with two requests.
TlsLatency https_requests(Where where, const std::string& name, const std::string& address, int n,
                          const std::string& ca_file) {
    return in(where, [&] {
        namespace net = boost::asio;
        namespace http = boost::beast::http;
        TlsLatency out;
        net::io_context io;
        net::ssl::context context(net::ssl::context::tls_client);
        context.load_verify_file(ca_file);
        context.set_verify_mode(net::ssl::verify_peer);
        http::request<http::empty_body> req(http::verb::get, "/", 11);
        req.set(http::field::host, name);
        for (int i = 0; i < n; ++i) {
            try {
                auto t0 = Clock::now();
                net::ssl::stream<net::ip::tcp::socket> stream(io, context);
                stream.next_layer().connect({net::ip::make_address(address), 443});
                stream.next_layer().set_option(net::ip::tcp::no_delay(true));
                SSL_set_tlsext_host_name(stream.native_handle(), name.c_str());
                SSL_set1_host(stream.native_handle(), name.c_str());
                stream.handshake(net::ssl::stream_base::client);
                boost::beast::flat_buffer buffer;
                for (auto* into : {&out.fresh_ms, &out.kept_ms}) {
                    auto t = into == &out.fresh_ms ? t0 : Clock::now();
                    http::write(stream, req);
                    http::response<http::string_body> res;
                    http::read(stream, buffer, res);
                    into->push_back(ms_since(t));
                }
                boost::system::error_code ignored;
                stream.next_layer().close(ignored);
            } catch (const std::exception& e) {
                out.error = e.what();
            }
        }
        return out;
    });
}

// A sandbox-like namespace whose traffic the kernel forwards through the host to the test
// internet: interfaces of our own with forwarding on just for them (per-interface; the
// host's global setting is untouched), gone with the namespace.
class UnrestrictedNamespace {
  public:
    explicit UnrestrictedNamespace(test::TestInternet& internet)
        : ns_(network::NetworkNamespace::create()) {
        {
            network::RtNetlink host;
            host.add_veth(kLink, "eth0", ns_.fd());
            host.add_address(kLink, "10.77.0.1", 30);
            host.set_up(kLink);
        }
        for (const std::string& link : {std::string(kLink), internet.host_side_link()}) {
            std::ofstream("/proc/sys/net/ipv4/conf/" + link + "/forwarding") << "1";
        }
        ns_.run([&] {
            network::RtNetlink nl;
            nl.set_up("lo");
            nl.add_address("eth0", "10.77.0.2", 30);
            nl.set_up("eth0");
            nl.add_route("0.0.0.0", 0, "10.77.0.1", "eth0");
        });
    }
    const network::NetworkNamespace* where() const { return &ns_; }

  private:
    static constexpr const char* kLink = "dbxbench0";
    network::NetworkNamespace ns_;
};

struct Args {
    double seconds = 3;
    int requests = 300;
    int creates = 8;
    int microvm_creates = 0;
};

Args parse_args(int argc, char** argv) {
    Args a;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string flag = argv[i];
        auto v = parse_integer(argv[i + 1]);
        if (!v || *v < 1 || *v > 100000) throw std::invalid_argument(flag + " needs 1..100000");
        if (flag == "--seconds")
            a.seconds = static_cast<double>(*v);
        else if (flag == "--requests")
            a.requests = static_cast<int>(*v);
        else if (flag == "--creates")
            a.creates = static_cast<int>(*v);
        else if (flag == "--microvm-creates")
            a.microvm_creates = static_cast<int>(*v);
        else
            throw std::invalid_argument("unknown flag " + flag);
    }
    return a;
}

void bench_creates(test::TestInternet& internet, int runs, const std::string& runtime) {
    bench::Daemon daemon(
        {"--dns-upstream", internet.dns_address(), "--public-range", internet.web_address()});
    client::ClientOptions options;
    options.server = daemon.url();
    client::ApiClient api(options);
    const std::vector<std::pair<const char*, json>> kinds = {
        {"network off", false}, {"internet", true}, {"allow list", {{"allow", {"allowed.test"}}}}};
    std::vector<std::vector<double>> ms(kinds.size());
    api.set_request_timeout(std::chrono::minutes(5));
    try {
        // Warm: the template's path is cached, and a microVM's template snapshots are made (one
        // per network setting: the guest's NIC is in the saved state).
        for (const auto& kind : kinds) {
            json sb =
                api.post_json("/v1/sandboxes", {{"runtime", runtime}, {"network", kind.second}});
            api.delete_json("/v1/sandboxes/" + sb["id"].get<std::string>());
        }
    } catch (const std::exception& e) {
        std::printf("create figures skipped: %s\n", e.what());
        return;
    }
    for (int i = 0; i < runs; ++i)
        for (std::size_t k = 0; k < kinds.size(); ++k) {  // interleaved: the same noise for all
            auto t0 = Clock::now();
            json sb = api.post_json("/v1/sandboxes",
                                    {{"runtime", runtime}, {"network", kinds[k].second}});
            std::string base = "/v1/sandboxes/" + sb["id"].get<std::string>();
            api.get_bytes(base + "/screenshot?format=png");
            ms[k].push_back(ms_since(t0));
            api.delete_json(base);
        }
    double off = bench::percentile(ms[0], 0.5);
    for (std::size_t k = 0; k < kinds.size(); ++k) {
        auto p = bench::percentiles(ms[k]);
        std::printf(
            "%-9s create -> first screenshot, %-11s p50 %7.1f ms  p95 %7.1f  (%+.1f%% vs off, "
            "n=%zu)\n",
            runtime.c_str(), kinds[k].first, p.p50, p.p95, (p.p50 / off - 1) * 100, ms[k].size());
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::signal(SIGPIPE, SIG_IGN);  // a reset connection is a figure of 0, not the end
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    try {
        Args args = parse_args(argc, argv);
        if (::geteuid() != 0) throw std::runtime_error("needs root (network namespaces)");
        std::printf("load average %s\n", bench::load_average().c_str());
        test::TestInternet internet(std::map<std::string, std::string>{{"allowed.test", "web"}});
        network::NetworkOptions options;
        options.dns_upstream = internet.dns_address();
        options.public_ranges = {*network::parse_ip_range(internet.web_address())};
        TempDir ca_dir("deskbox-bench-ca");
        options.egress_ca = network::EgressCa::load_or_create(ca_dir.path());
        options.egress_trust = {internet.ca_file()};
        network::NetworkService service(options);
        auto make = [&](const json& policy) {
            network::SandboxNetwork::Options o;
            o.sandbox_id = "bench";
            o.policy = network::NetworkPolicy::parse(policy);
            o.kind = network::SandboxNetwork::Kind::container;
            return service.create(o);
        };
        auto allowlist = make({{"allow", {"allowed.test"}}});
        auto internet_policy = make(true);
        UnrestrictedNamespace unrestricted(internet);
        auto sandbox_ns = [](const std::shared_ptr<network::SandboxNetwork>& n) {
            return network::NetworkNamespace::open(n->container_netns_path());
        };
        auto allow_ns = sandbox_ns(allowlist);
        auto open_ns = sandbox_ns(internet_policy);
        const std::string web = internet.web_address();
        requests(&allow_ns, web, 5);  // warm: the proxy's own lookup of allowed.test
        requests(&open_ns, web, 5);

        struct Path {
            const char* name;
            Where where;
        };
        const Path paths[] = {{"policy path (allow list)", &allow_ns},
                              {"policy path (internet)", &open_ns},
                              {"unrestricted (kernel forwarding)", unrestricted.where()},
                              {"host directly", nullptr}};
        std::printf("\n%-34s %10s %9s %10s %9s %12s %12s %13s %13s\n",
                    "one TCP stream, 198.18/15 test host", "down Gb/s", "CPU s/GB", "up Gb/s",
                    "CPU s/GB", "connect p50", "connect p99", "1st byte p50", "1st byte p99");
        double base_down = 0, base_up = 0, base_connect = 0, base_first = 0;
        std::vector<std::array<double, 6>> rows;
        for (const auto& p : paths) {
            auto d = download(p.where, web, args.seconds);
            auto u = upload(p.where, web, args.seconds, internet);
            double down = d.gbit_per_s, up = u.gbit_per_s;
            auto l = requests(p.where, web, args.requests);
            auto c = bench::percentiles(l.connect_ms), f = bench::percentiles(l.first_byte_ms);
            std::printf("%-34s %10.2f %9.2f %10.2f %9.2f %9.3f ms %9.3f ms %10.3f ms %10.3f ms\n",
                        p.name, down, d.cpu_s_per_gb, up, u.cpu_s_per_gb, c.p50, c.p99, f.p50,
                        f.p99);
            rows.push_back({down, up, c.p50, c.p99, f.p50, f.p99});
            if (p.where == unrestricted.where()) {
                base_down = down;
                base_up = up;
                base_connect = c.p50;
                base_first = f.p50;
            }
        }
        std::printf(
            "\npolicy path (allow list) vs unrestricted: download %.0f%%, upload %.0f%%, "
            "connect %+.3f ms, first byte %+.3f ms (goal: >= 80%%, < 1 ms added)\n",
            rows[0][0] / base_down * 100, rows[0][1] / base_up * 100, rows[0][2] - base_connect,
            rows[0][4] - base_first);
        std::printf(
            "policy path (internet)   vs unrestricted: download %.0f%%, upload %.0f%%, "
            "connect %+.3f ms, first byte %+.3f ms\n\n",
            rows[1][0] / base_down * 100, rows[1][1] / base_up * 100, rows[1][2] - base_connect,
            rows[1][4] - base_first);
        // HTTPS with a credential rule (TLS ended at the proxy, a header set, TLS again to the
        // server) next to the same request passed through end to end.
        auto ruled =
            make({{"allow", {"allowed.test"}},
                  {"rules",
                   json::array({{{"domain", "allowed.test"}, {"headers", {{"X-Bench", "1"}}}}})}});
        auto ruled_ns = sandbox_ns(ruled);
        const std::string egress_ca = options.egress_ca->certificate_path().string();
        https_requests(&ruled_ns, "allowed.test", web, 3, egress_ca);  // warm: lookups, leaf
        https_requests(&allow_ns, "allowed.test", web, 3, internet.ca_file());
        auto ended = https_requests(&ruled_ns, "allowed.test", web, args.requests, egress_ca);
        auto passed =
            https_requests(&allow_ns, "allowed.test", web, args.requests, internet.ca_file());
        if (!ended.error.empty() || !passed.error.empty())
            std::printf("https figures incomplete: %s %s\n", ended.error.c_str(),
                        passed.error.c_str());
        auto ef = bench::percentiles(ended.fresh_ms), pf = bench::percentiles(passed.fresh_ms);
        auto ek = bench::percentiles(ended.kept_ms), pk = bench::percentiles(passed.kept_ms);
        std::printf("%-44s %12s %12s %14s %14s\n", "HTTPS GET / (allow list), n per row",
                    "new conn p50", "new conn p99", "kept-alive p50", "kept-alive p99");
        std::printf("%-44s %9.3f ms %9.3f ms %11.3f ms %11.3f ms\n",
                    "credential rule (TLS ended at the proxy)", ef.p50, ef.p99, ek.p50, ek.p99);
        std::printf("%-44s %9.3f ms %9.3f ms %11.3f ms %11.3f ms\n", "passed through end to end",
                    pf.p50, pf.p99, pk.p50, pk.p99);
        std::printf(
            "added by ending TLS: new connection %+.3f ms, request on a kept-alive one "
            "%+.3f ms (goal: < 2 ms)\n\n",
            ef.p50 - pf.p50, ek.p50 - pk.p50);
        bench_creates(internet, args.creates, "container");
        if (args.microvm_creates > 0) bench_creates(internet, args.microvm_creates, "microvm");
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "network_bench: %s\n", e.what());
        return 1;
    }
}
