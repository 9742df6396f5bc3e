// The host side of sandbox networks (server/network) on the real kernel, without a runtime:
// SandboxNetworks of the container kind, a test internet in a namespace of the test's own
// (tests/support/test_internet.hpp), and real clients (curl, python3) run inside the sandbox's
// namespace, the one runc joins.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "common/child_process.hpp"
#include "server/network/sandbox_network.hpp"
#include "tests/support/host_state.hpp"
#include "tests/support/test_internet.hpp"

namespace deskbox::network {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using test::host_interfaces;
using test::live_network_namespaces;

struct Ran {
    int exit_code;
    std::string out, err;
    std::chrono::milliseconds took;
};

Ran run_inside(const std::string& netns_path, std::vector<std::string> argv,
               std::chrono::milliseconds timeout = 20s) {
    auto ns = NetworkNamespace::open(netns_path);
    SpawnOptions o;
    o.argv = std::move(argv);
    o.netns_fd = ns.fd();
    auto start = std::chrono::steady_clock::now();
    auto r = run_process(o, timeout);
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    return {r.timed_out ? -1 : r.status.exit_code, r.out, r.err, took};
}

// A TCP listener in the host's (the test's) namespace on every address, counting connections:
// sandboxes must never reach it.
class HostListener {
  public:
    HostListener() {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
        ::listen(fd_, 16);
        socklen_t len = sizeof a;
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] {
            while (true) {
                int c = ::accept(fd_, nullptr, nullptr);
                if (c < 0) return;
                ++accepted_;
                ::close(c);
            }
        });
    }
    ~HostListener() {
        ::shutdown(fd_, SHUT_RDWR);
        ::close(fd_);
        thread_.join();
    }
    int port() const { return port_; }
    int accepted() const { return accepted_; }

  private:
    int fd_ = -1, port_ = 0;
    std::atomic<int> accepted_{0};
    std::thread thread_;
};

class SandboxNetworkTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
        internet_ = std::make_unique<test::TestInternet>(std::map<std::string, std::string>{
            {"allowed.test", "web"},
            {"other.test", "other"},
            {"a.wild.test", "web"},
            {"b.wild.test", "other"},
            {"lan.test", "lan"},
            {"rebind.test", "127.0.0.1"},
            {"private.test", "10.1.2.3"},
            {"metadata.test", "169.254.169.254"},
        });
        NetworkOptions options;
        options.dns_upstream = internet_->dns_address();
        options.first_bytes_timeout = 500ms;
        // web and other stand for the internet; lan stays what 198.18/15 is (special).
        options.public_ranges = {*parse_ip_range(internet_->web_address()),
                                 *parse_ip_range(internet_->other_address())};
        options.secret_value = [this](const std::string& name) -> std::optional<std::string> {
            std::lock_guard lock(audit_mutex_);
            auto it = secrets_.find(name);
            if (it == secrets_.end()) return std::nullopt;
            return it->second;
        };
        service_ = std::make_unique<NetworkService>(options);
    }

    std::shared_ptr<SandboxNetwork> make(const nlohmann::json& policy, std::uint64_t kbps = 0) {
        SandboxNetwork::Options o;
        o.sandbox_id = "sb-test";
        o.policy = NetworkPolicy::parse(policy);
        o.kind = SandboxNetwork::Kind::container;
        o.egress_kbps = kbps;
        o.audit = [this](const std::string& kind, const nlohmann::json& detail) {
            std::lock_guard lock(audit_mutex_);
            audit_.push_back(kind + " " + detail.dump());
        };
        return service_->create(o);
    }

    Ran curl(const SandboxNetwork& net, const std::vector<std::string>& args) {
        std::vector<std::string> argv = {"curl", "-sS", "-k", "--max-time", "8", "--noproxy", "*"};
        argv.insert(argv.end(), args.begin(), args.end());
        return run_inside(net.container_netns_path(), argv);
    }
    Ran python(const SandboxNetwork& net, const std::string& code) {
        return run_inside(net.container_netns_path(), {"python3", "-c", code});
    }

    std::string audit_text() {
        std::lock_guard lock(audit_mutex_);
        std::string all;
        for (auto& line : audit_) all += line + "\n";
        return all;
    }
    void expect_reached(const Ran& r, const std::string& address) {
        EXPECT_EQ(r.exit_code, 0) << r.err;
        EXPECT_NE(r.out.find("deskbox test host " + address), std::string::npos) << r.out;
    }
    // A connection that must not get anywhere: fails, and fast (a reset, not a timeout).
    void expect_refused(const Ran& r, const std::string& what) {
        EXPECT_NE(r.exit_code, 0) << what << " reached: " << r.out;
        EXPECT_EQ(r.out.find("deskbox test host"), std::string::npos) << what << ": " << r.out;
        EXPECT_LT(r.took, 5s) << what << " took " << r.took.count() << " ms: " << r.err;
    }

    std::unique_ptr<test::TestInternet> internet_;
    std::unique_ptr<NetworkService> service_;
    std::mutex audit_mutex_;
    std::vector<std::string> audit_;
    std::map<std::string, std::string> secrets_;  // under audit_mutex_
};

TEST_F(SandboxNetworkTest, AnAllowedNameIsReachedOverHttpAndHttps) {
    auto net = make({{"allow", {"allowed.test"}}});
    auto r = curl(*net, {"http://allowed.test/"});
    expect_reached(r, internet_->web_address());
    EXPECT_NE(r.out.find("host=allowed.test"), std::string::npos) << r.out;
    r = curl(*net, {"https://allowed.test/"});
    expect_reached(r, internet_->web_address());
    EXPECT_NE(r.out.find("sni=allowed.test"), std::string::npos) << r.out;
    auto totals = net->totals();
    EXPECT_EQ(totals.allowed, 2u);
    EXPECT_EQ(totals.blocked, 0u);
    EXPECT_GT(totals.bytes_in, 0u);
    EXPECT_GT(totals.bytes_out, 0u);
    // A connection's audit line is written when the proxy sees it close.
    for (int i = 0; i < 100 && audit_text().find("\"bytes_in\"") == std::string::npos; ++i)
        std::this_thread::sleep_for(20ms);
    EXPECT_NE(audit_text().find("\"decision\":\"allowed\""), std::string::npos) << audit_text();
    EXPECT_NE(audit_text().find("\"destination\":\"allowed.test\""), std::string::npos);
    auto described = net->describe();
    EXPECT_EQ(described["policy"]["mode"], "allowlist");
    EXPECT_EQ(described["egress"]["destinations"][0]["destination"], "allowed.test");
}

TEST_F(SandboxNetworkTest, ANameNotAllowedIsNeitherResolvedNorConnected) {
    auto net = make({{"allow", {"allowed.test"}}});
    auto r = curl(*net, {"http://other.test/"});
    EXPECT_EQ(r.exit_code, 6) << "expected 'could not resolve': " << r.err;
    // Knowing the address does not help: the proxy reads the Host / SNI.
    expect_refused(curl(*net, {"--resolve", "other.test:80:" + internet_->other_address(),
                               "http://other.test/"}),
                   "HTTP to other.test by address");
    expect_refused(curl(*net, {"--resolve", "other.test:443:" + internet_->other_address(),
                               "https://other.test/"}),
                   "HTTPS to other.test by address");
    EXPECT_GE(net->totals().blocked, 2u);
    EXPECT_GE(net->totals().dns_refused, 1u);
    EXPECT_NE(audit_text().find("'other.test' is not in the allow list"), std::string::npos)
        << audit_text();
}

TEST_F(SandboxNetworkTest, WildcardsAllowSubdomainsAndDenyWins) {
    auto net = make({{"allow", {"*.wild.test"}}, {"deny", {"b.wild.test"}}});
    expect_reached(curl(*net, {"http://a.wild.test/"}), internet_->web_address());
    EXPECT_EQ(curl(*net, {"http://b.wild.test/"}).exit_code, 6);
    expect_refused(curl(*net, {"--resolve", "b.wild.test:80:" + internet_->other_address(),
                               "http://b.wild.test/"}),
                   "a denied name by address");
    // "*.wild.test" is not "wild.test" itself, nor a name that only ends the same way.
    EXPECT_EQ(curl(*net, {"http://allowed.test/"}).exit_code, 6);
}

// Three requests on one kept-alive connection to allowed.test: the same Host twice, then
// another. Prints each answer's body, or "cut" when the connection was reset or closed.
const char* kKeepAliveClient = R"(import socket, sys
s = socket.create_connection(("allowed.test", 80), timeout=5)
def ask(host):
    s.sendall(("GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % host).encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk: raise ConnectionError("closed")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    n = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0]
    while len(body) < n: body += s.recv(4096)
    return body.decode().strip()
for host in ["allowed.test", "allowed.test", sys.argv[1]]:
    try: print(ask(host))
    except OSError: print("cut"); break
)";

TEST_F(SandboxNetworkTest, EveryRequestOnAKeptAliveConnectionIsChecked) {
    // other.test is allowed but lives at another address (domain fronting); forbidden.test is
    // not allowed at all. Either cuts the connection; the server never sees the request.
    auto net = make({{"allow", {"allowed.test", "other.test"}}});
    for (const std::string later : {"other.test", "forbidden.test"}) {
        auto r =
            run_inside(net->container_netns_path(), {"python3", "-c", kKeepAliveClient, later});
        EXPECT_EQ(r.exit_code, 0) << r.err;
        auto first = r.out.find("host=allowed.test");
        ASSERT_NE(first, std::string::npos) << r.out;
        EXPECT_NE(r.out.find("host=allowed.test", first + 1), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("\ncut\n"), std::string::npos) << later << ": " << r.out;
    }
    for (const auto& seen : internet_->requests_seen())
        EXPECT_EQ(seen.find("host=allowed.test"), 0u) << "the server saw " << seen;
    EXPECT_EQ(net->totals().cut, 2u);
    // Bodies still pass, sized or chunked (re-chunked by the proxy), on one connection.
    auto r =
        curl(*net, {"-d", std::string(100000, 'b'), "http://allowed.test/", "-H",
                    "Transfer-Encoding: chunked", "--next", "-d", "x=1", "http://allowed.test/"});
    EXPECT_EQ(r.exit_code, 0) << r.err << audit_text();
    EXPECT_EQ(net->totals().allowed, 3u);
    EXPECT_EQ(net->totals().cut, 2u);
    for (int i = 0; i < 100 && audit_text().find("\"cut\"") == std::string::npos; ++i)
        std::this_thread::sleep_for(20ms);
    EXPECT_NE(audit_text().find("\"decision\":\"cut\""), std::string::npos) << audit_text();
    EXPECT_NE(audit_text().find("request 3: Host forbidden.test"), std::string::npos)
        << audit_text();
    EXPECT_EQ(net->describe()["egress"]["connections"]["cut"], 2);
}

TEST_F(SandboxNetworkTest, CredentialRulesSetHeadersOnEveryMatchingPlainHttpRequest) {
    {
        std::lock_guard lock(audit_mutex_);
        secrets_["tok"] = "Bearer from-the-store";
    }
    json rules =
        json::array({{{"domain", "allowed.test"},
                      {"path", "/headers/in"},
                      {"headers", {{"Authorization", "secret:tok"}, {"X-Inline", "yes"}}}}});
    auto net = make({{"allow", {"allowed.test", "other.test"}}, {"rules", rules}});
    // Two requests on one connection: the path decides, request by request; what the sandbox
    // sent under the rule's header names is replaced.
    auto r = curl(*net, {"-H", "Authorization: Bearer fake", "http://allowed.test/headers/out",
                         "http://allowed.test/headers/in"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto in = r.out.find("Authorization: Bearer from-the-store");
    ASSERT_NE(in, std::string::npos) << r.out;
    EXPECT_LT(r.out.find("Authorization: Bearer fake"), in) << "out keeps the sandbox's own";
    EXPECT_EQ(r.out.find("Authorization: Bearer fake", in), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("X-Inline: yes"), std::string::npos) << r.out;
    EXPECT_EQ(net->totals().allowed, 1u) << "one connection for both";
    // Another domain gets nothing.
    r = curl(*net, {"http://other.test/headers/in"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.find("from-the-store"), std::string::npos) << r.out;
    // A secret deleted meanwhile: its requests are cut, not sent without it.
    {
        std::lock_guard lock(audit_mutex_);
        secrets_.clear();
    }
    expect_refused(curl(*net, {"http://allowed.test/headers/in"}), "a rule whose secret is gone");
    for (int i = 0; i < 100 && audit_text().find("does not exist any more") == std::string::npos;
         ++i)
        std::this_thread::sleep_for(20ms);
    const std::string audit = audit_text();
    EXPECT_NE(audit.find("secret tok of the rule for allowed.test"), std::string::npos) << audit;
    EXPECT_NE(audit.find("\"injected_headers\":[\"Authorization\",\"X-Inline\"]"),
              std::string::npos)
        << audit;
    EXPECT_EQ(audit.find("from-the-store"), std::string::npos) << audit;
    EXPECT_EQ(net->describe()["policy"]["rules"][0]["headers"]["X-Inline"], "(inline value)");
}

TEST_F(SandboxNetworkTest, CredentialRulesNeverFollowAHostToAnotherAddress) {
    {
        std::lock_guard lock(audit_mutex_);
        secrets_["tok"] = "Bearer from-the-store";
    }
    // The internet, so the address alone lets the connection through: a Host naming the rule's
    // domain at another address (curl --resolve skips DNS) must not get the secret.
    json rules =
        json::array({{{"domain", "allowed.test"}, {"headers", {{"X-Key", "secret:tok"}}}}});
    auto net = make({{"rules", rules}});
    auto r = curl(*net, {"--resolve", "allowed.test:80:" + internet_->other_address(),
                         "http://allowed.test/headers"});
    EXPECT_EQ(r.out.find("from-the-store"), std::string::npos) << r.out;
    // Through its DNS, the same request gets it.
    r = curl(*net, {"http://allowed.test/headers"});
    EXPECT_NE(r.out.find("X-Key: Bearer from-the-store"), std::string::npos) << r.out << r.err;
    // Nor a Host naming it on a connection to another name's address.
    r = curl(*net, {"http://other.test/headers", "-H", "Host: allowed.test",
                    "http://other.test/headers"});
    EXPECT_EQ(r.out.find("from-the-store"), std::string::npos) << r.out;
}

TEST_F(SandboxNetworkTest, ALargeUploadPassesTheRequestByRequestProxy) {
    // 64 MiB with a Content-Length (past Beast's 1 MB default body limit) to the sink, whose
    // count shows it all arrived.
    auto net = make({{"allow", {"allowed.test"}}});
    const char* upload = R"(import socket
n = 64 << 20
s = socket.create_connection(("allowed.test", 9001), timeout=20)
s.sendall(b"POST /sink HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: %d\r\n\r\n" % n)
for _ in range(n >> 20): s.sendall(b"u" * (1 << 20))
s.close()
)";
    const auto before = internet_->sink_bytes();
    auto r = run_inside(net->container_netns_path(), {"python3", "-c", upload});
    EXPECT_EQ(r.exit_code, 0) << r.err << audit_text();
    for (int i = 0; i < 200 && internet_->sink_bytes() - before < (64u << 20); ++i)
        std::this_thread::sleep_for(20ms);
    EXPECT_GE(internet_->sink_bytes() - before, 64u << 20) << audit_text();
    EXPECT_EQ(net->totals().blocked, 0u) << audit_text();
}

TEST_F(SandboxNetworkTest, AnIpLiteralIsRefusedEvenWhenAnAllowedNameResolvesToIt) {
    auto net = make({{"allow", {"allowed.test"}}});
    expect_reached(curl(*net, {"http://allowed.test/"}), internet_->web_address());
    expect_refused(curl(*net, {"http://" + internet_->web_address() + "/"}), "HTTP to the IP");
    expect_refused(curl(*net, {"https://" + internet_->web_address() + "/"}), "HTTPS to the IP");
    // Allowed by address, it works by address.
    auto by_ip = make({{"allow", {internet_->web_address()}}});
    expect_reached(curl(*by_ip, {"http://" + internet_->web_address() + "/"}),
                   internet_->web_address());
}

TEST_F(SandboxNetworkTest, HostAndSniThatDoNotMatchTheAddressAreRefused) {
    auto net = make({{"allow", {"allowed.test"}}});
    // allowed.test is web's name; other answers at another address.
    expect_refused(curl(*net, {"--resolve", "allowed.test:80:" + internet_->other_address(),
                               "http://allowed.test/"}),
                   "Host: allowed.test at other's address");
    expect_refused(curl(*net, {"--resolve", "allowed.test:443:" + internet_->other_address(),
                               "https://allowed.test/"}),
                   "SNI allowed.test at other's address");
    expect_refused(
        curl(*net, {"-H", "Host: allowed.test", "http://" + internet_->other_address() + "/"}),
        "a Host header naming an allowed host");
    EXPECT_NE(audit_text().find("does not resolve to " + internet_->other_address()),
              std::string::npos)
        << audit_text();
    for (const auto& seen : internet_->requests_seen())
        EXPECT_EQ(seen.find("address=" + internet_->other_address()), std::string::npos) << seen;
}

TEST_F(SandboxNetworkTest, DnsRebindingToLoopbackOrPrivateAddressesIsStripped) {
    auto net = make({{"allow", {"rebind.test", "private.test", "metadata.test"}}});
    for (const char* name : {"rebind.test", "private.test", "metadata.test"})
        EXPECT_EQ(curl(*net, {std::string("http://") + name + "/"}).exit_code, 6) << name;
    EXPECT_NE(audit_text().find("addresses_removed"), std::string::npos) << audit_text();
    // Named explicitly, a private address is the operator's choice; loopback and link-local never.
    auto lan = make({{"allow", {"private.test", "10.1.2.3", "metadata.test", "169.254.169.254"}}});
    auto r = python(*lan,
                    "import socket\n"
                    "print(socket.gethostbyname('private.test'))\n"
                    "try:\n  print(socket.gethostbyname('metadata.test'))\n"
                    "except OSError as e:\n  print('refused', e)\n");
    EXPECT_NE(r.out.find("10.1.2.3"), std::string::npos) << r.out << r.err;
    EXPECT_NE(r.out.find("refused"), std::string::npos) << r.out << r.err;
}

TEST_F(SandboxNetworkTest, TheHostIsNeverReachableWhateverThePolicy) {
    HostListener host;
    const std::string port = std::to_string(host.port());
    std::vector<std::string> host_addresses = {"10.0.2.2",  "10.0.2.3",
                                               "10.0.2.1",  internet_->host_side_address(),
                                               "127.0.0.1", "169.254.169.254"};
    auto r = run_process({"sh", "-c", "ip -o -4 addr show | awk '{print $4}' | cut -d/ -f1"}, 5s);
    std::istringstream lines(r.out);
    for (std::string a; std::getline(lines, a);)
        if (!a.empty()) host_addresses.push_back(a);
    for (const nlohmann::json& policy :
         {nlohmann::json(true), nlohmann::json{{"allow",
                                                {"0.0.0.0/0", "10.0.0.0/8", "127.0.0.0/8",
                                                 "169.254.0.0/16", internet_->subnet()}}}}) {
        auto net = make(policy);
        for (const auto& address : host_addresses)
            expect_refused(curl(*net, {"http://" + address + ":" + port + "/"}),
                           "the host at " + address + " with " + policy.dump());
    }
    EXPECT_EQ(host.accepted(), 0);
}

TEST_F(SandboxNetworkTest, OneSandboxCannotReachAnother) {
    auto a = make(true);
    auto b = make(true);
    // b serves on every address of its own namespace.
    SpawnOptions server;
    server.argv = {"python3", "-m", "http.server", "8000", "--bind", "0.0.0.0"};
    auto b_ns = NetworkNamespace::open(b->container_netns_path());
    server.netns_fd = b_ns.fd();
    server.stdout_to_null = server.stderr_to_null = true;
    auto serving = ChildProcess::spawn(server);
    bool up = false;
    for (int i = 0; i < 100 && !up; ++i) {
        up = curl(*b, {"-o", "/dev/null", "http://127.0.0.1:8000/"}).exit_code == 0;
        if (!up) std::this_thread::sleep_for(50ms);
    }
    ASSERT_TRUE(up) << "python3 -m http.server did not come up in b";
    for (const std::string address : {"10.0.2.15", "10.0.2.2", "10.0.2.3", "127.0.0.1"}) {
        auto r = curl(*a, {"http://" + address + ":8000/"});
        EXPECT_NE(r.exit_code, 0) << "a reached b through " << address << ": " << r.out;
    }
}

TEST_F(SandboxNetworkTest, PrivateRangesNeedAnExplicitAddressAllow) {
    auto open = make(true);
    expect_reached(curl(*open, {"http://allowed.test/"}), internet_->web_address());
    expect_reached(curl(*open, {"http://" + internet_->other_address() + "/"}),
                   internet_->other_address());
    expect_refused(curl(*open, {"http://" + internet_->lan_address() + "/"}),
                   "a private address under network: true");
    EXPECT_EQ(curl(*open, {"http://lan.test/"}).exit_code, 6);  // stripped from DNS too
    auto lan = make({{"allow", {internet_->lan_address() + "/32"}}});
    expect_reached(curl(*lan, {"http://" + internet_->lan_address() + "/"}),
                   internet_->lan_address());
}

TEST_F(SandboxNetworkTest, NetworkFalseHasOnlyLoopback) {
    auto net = make(false);
    auto r = run_inside(net->container_netns_path(), {"ip", "-o", "link", "show"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("lo:"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("eth0"), std::string::npos) << r.out;
    auto c = curl(*net, {"http://" + internet_->web_address() + "/"});
    EXPECT_EQ(c.exit_code, 7) << c.err;  // couldn't connect: network unreachable
    EXPECT_TRUE(net->resolv_conf().empty());
}

TEST_F(SandboxNetworkTest, UdpGoesOutUnderTrueAndToDnsLearnedAddressesUnderAnAllowList) {
    const std::string echo =
        "import socket,sys\n"
        "s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)\n"
        "s.sendto(b'ping', (sys.argv[1], 7))\n"
        "try:\n  print('reply', s.recvfrom(100)[0])\n"
        "except OSError as e:\n  print('nothing', e)\n";
    auto open = make(true);
    auto r =
        run_inside(open->container_netns_path(), {"python3", "-c", echo, internet_->web_address()});
    EXPECT_NE(r.out.find("reply b'ping'"), std::string::npos) << r.out << r.err;
    auto named = make({{"allow", {"allowed.test"}}});
    r = run_inside(named->container_netns_path(),
                   {"python3", "-c", echo, internet_->web_address()});
    EXPECT_NE(r.out.find("nothing"), std::string::npos)
        << "UDP to an address no allowed name gave: " << r.out;
    EXPECT_EQ(curl(*named, {"-o", "/dev/null", "http://allowed.test/"}).exit_code, 0);
    r = run_inside(named->container_netns_path(),
                   {"python3", "-c", echo, internet_->web_address()});
    EXPECT_NE(r.out.find("reply b'ping'"), std::string::npos) << r.out << r.err;
}

TEST_F(SandboxNetworkTest, DnsWorksOverUdpAndTcpAtAnyServerAddress) {
    auto net = make({{"allow", {"allowed.test"}}});
    // A hand-made query for allowed.test/A, sent to the sandbox's DNS and to some other server:
    // both end at deskboxd's filter.
    const std::string code =
        "import socket,struct,sys\n"
        "q=struct.pack('>HHHHHH',0x1234,0x0100,1,0,0,0)+b'\\x07allowed\\x04test\\x00'+struct.pack('"
        ">HH',1,1)\n"
        "for server in ('10.0.2.3','192.0.2.53'):\n"
        "  u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); u.settimeout(3); "
        "u.sendto(q,(server,53))\n"
        "  a,src=u.recvfrom(512); "
        "print('udp',server,src[0],a[:2]==q[:2],a[-4:]==socket.inet_aton(sys.argv[1]))\n"
        "  t=socket.create_connection((server,53),3); t.sendall(struct.pack('>H',len(q))+q)\n"
        "  n=struct.unpack('>H',t.recv(2))[0]; a=b''\n"
        "  while len(a)<n: a+=t.recv(n-len(a))\n"
        "  print('tcp',server,a[-4:]==socket.inet_aton(sys.argv[1]))\n";
    auto r =
        run_inside(net->container_netns_path(), {"python3", "-c", code, internet_->web_address()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("udp 10.0.2.3 10.0.2.3 True True"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("udp 192.0.2.53 192.0.2.53 True True"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tcp 10.0.2.3 True"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tcp 192.0.2.53 True"), std::string::npos) << r.out;
}

TEST_F(SandboxNetworkTest, AnAllowedDestinationThatRefusesFailsFast) {
    auto net = make(true);
    expect_refused(curl(*net, {"http://" + internet_->web_address() + ":81/"}), "a closed port");
    EXPECT_NE(audit_text().find("the destination did not accept"), std::string::npos)
        << audit_text();
}

TEST_F(SandboxNetworkTest, EgressRateLimitHoldsUploads) {
    // 800 kbit/s = 100 kB/s. Unlimited, an upload here moves hundreds of MB/s. The sink's count
    // is sampled twice while the upload runs; between the samples at most the rate times the
    // measured window plus the bucket (one second of rate) may arrive, with room for one more.
    // A slow machine only lowers what arrives, so this fails only if the limit does not hold.
    auto net = make(true, 800);
    SpawnOptions upload;
    upload.argv = {"python3", "-c",
                   "import socket,sys,time\n"
                   "s=socket.create_connection((sys.argv[1],9001),3); end=time.time()+6\n"
                   "chunk=b'u'*65536\n"
                   "while time.time()<end: s.send(chunk)\n",
                   internet_->web_address()};
    auto ns = NetworkNamespace::open(net->container_netns_path());
    upload.netns_fd = ns.fd();
    upload.stdout_to_null = upload.stderr_to_null = true;
    auto uploading = ChildProcess::spawn(upload);
    std::this_thread::sleep_for(1500ms);
    auto t0 = std::chrono::steady_clock::now();
    auto b0 = internet_->sink_bytes();
    std::this_thread::sleep_for(1500ms);
    auto b1 = internet_->sink_bytes();
    double window = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uploading.terminate(100ms);
    EXPECT_GT(b1, b0) << "nothing arrived: the upload did not run";
    EXPECT_LE(static_cast<double>(b1 - b0), 100'000.0 * window + 2 * 100'000.0)
        << "moved " << (b1 - b0) << " bytes in " << window << " s under a 100 kB/s limit";
    EXPECT_EQ(net->describe()["egress_kbps"], 800);
}

TEST_F(SandboxNetworkTest, NothingOutlivesTheSandboxNetwork) {
    auto interfaces_before = host_interfaces();
    auto ruleset_before = test::host_nft_ruleset();
    std::vector<ino_t> namespaces;
    {
        auto net = make({{"allow", {"allowed.test"}}});
        expect_reached(curl(*net, {"http://allowed.test/"}), internet_->web_address());
        // A connection still open when the network goes.
        SpawnOptions hold;
        hold.argv = {"python3", "-c",
                     "import socket,sys,time\ns=socket.create_connection((sys.argv[1],9000),3)\n"
                     "time.sleep(30)\n",
                     internet_->web_address()};
        auto ns = NetworkNamespace::open(net->container_netns_path());
        hold.netns_fd = ns.fd();
        auto holder = ChildProcess::spawn(hold);
        std::this_thread::sleep_for(300ms);
        namespaces = net->namespace_inodes();
        ASSERT_EQ(namespaces.size(), 2u);
        auto live = live_network_namespaces();
        for (auto inode : namespaces) EXPECT_TRUE(live.count(inode));
        holder.terminate(100ms);
    }
    auto live = live_network_namespaces();
    for (auto inode : namespaces)
        EXPECT_FALSE(live.count(inode)) << "namespace " << inode << " lives on";
    EXPECT_EQ(host_interfaces(), interfaces_before);
    EXPECT_EQ(test::host_nft_ruleset(), ruleset_before);
}

}  // namespace
}  // namespace deskbox::network
