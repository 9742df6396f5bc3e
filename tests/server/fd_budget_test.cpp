// Code in a sandbox must never crash deskboxd through its file descriptors (issue 26, item 1):
// a relay that cannot get its pipes refuses the flow instead of throwing on an I/O thread; each
// sandbox's connections are capped at its share of RLIMIT_NOFILE (the fd budget); no library
// call that select()s (libnftables did) sees an fd of 1024 or more; the HTTP acceptor backs off
// when out of fds and caps open and idle connections. Real parts throughout: sandbox networks on
// the real kernel with a test internet, a real deskboxd with runc containers, real sockets.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <fstream>

#include "server/daemon/server_config.hpp"
#include "server/network/egress_context.hpp"
#include "server/network/sandbox_network.hpp"
#include "server/network/splice_relay.hpp"
#include "tests/server/deskboxd_fixture.hpp"
#include "tests/support/fd_limit.hpp"
#include "tests/support/test_internet.hpp"

namespace deskbox {
namespace {

using namespace test;
using namespace std::chrono_literals;

std::size_t open_fds() {
    std::size_t n = 0;
    for ([[maybe_unused]] auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
    return n;
}

// Descriptors held open (copies of /dev/null): past a number, or until the limit is reached.
class FdFiller {
  public:
    void fill_past(int fd_number) {
        while (true) {
            int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
            ASSERT_GE(fd, 0) << std::strerror(errno);
            fds_.emplace_back(fd);
            if (fd > fd_number) return;
        }
    }
    // Every fd the limit allows; returns how many were taken.
    std::size_t fill_all() {
        std::size_t n = 0;
        while (true) {
            int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (fd < 0) return n;
            fds_.emplace_back(fd);
            ++n;
        }
    }
    void release(std::size_t n) {
        for (; n > 0 && !fds_.empty(); --n) fds_.pop_back();
    }

  private:
    std::vector<UniqueFd> fds_;
};

// A gauge or counter without labels from deskboxd's /metrics; ~0 if missing.
std::uint64_t metric_value(Server& s, const std::string& name) {
    auto text = s.get("/metrics").body;
    auto at = text.find("\n" + name + " ");
    if (at == std::string::npos) return ~0ull;
    return std::stoull(text.substr(at + name.size() + 2));
}

std::size_t fds_of(pid_t pid) {
    std::size_t n = 0;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
        ++n;
    return n;
}

// Opens `n` TCP connections to HOST:PORT one after another, holds them `hold` seconds, then says
// how many connected and how many were still open (not reset, not closed) at the end.
const char* const kFloodScript = R"PY(
import socket, sys, time
host, port, n, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
socks = []
for i in range(n):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((host, port))
        socks.append(s)
    except Exception:
        s.close()
time.sleep(hold)
alive = 0
for s in socks:
    s.setblocking(False)
    try:
        s.recv(1)
    except BlockingIOError:
        alive += 1
    except Exception:
        pass
print("connected", len(socks), "alive", alive, flush=True)
)PY";

// ------------------------------------------------------------------ the budget's arithmetic

TEST(FdBudget, TheLimitIsSharedBetweenSandboxesAndTooLittleRefusesToStart) {
    server::ServerConfig config;  // defaults: 20 sandboxes, 1024 HTTP connections
    auto b = server::plan_fd_budget(20000, config);
    // 256 + 2 * 1024 + 20 * 64 kept back; the rest in 8-fd units (a TCP connection's 6 and a UDP
    // flow's 2) over 20 sandboxes.
    EXPECT_EQ(b.reserve, 3584u);
    EXPECT_EQ(b.per_sandbox, (20000u - 3584u) / 160u);
    EXPECT_EQ(config.manager.network.max_connections, b.per_sandbox);
    EXPECT_EQ(config.manager.network.max_udp_flows, b.per_sandbox);
    EXPECT_TRUE(b.warning.empty());

    server::ServerConfig big;
    EXPECT_EQ(server::plan_fd_budget(1 << 20, big).per_sandbox, 1024u);  // at most the old default
    EXPECT_EQ(big.manager.network.max_udp_flows, 256u);

    // A hard limit of 4096: HTTP gets an eighth (512), each sandbox 9, and a warning says so.
    server::ServerConfig tight;
    auto t = server::plan_fd_budget(4096, tight);
    EXPECT_EQ(tight.http.max_connections, 512u);
    EXPECT_EQ(t.per_sandbox, (4096u - 256u - 1024u - 1280u) / 160u);
    EXPECT_NE(t.warning.find("raise the hard limit"), std::string::npos) << t.warning;

    server::ServerConfig small;
    try {
        server::plan_fd_budget(1024, small);
        ADD_FAILURE() << "a soft limit of 1024 with 20 sandboxes must not start";
    } catch (const std::invalid_argument& e) {
        std::string what = e.what();
        EXPECT_NE(what.find("--max-sandboxes"), std::string::npos) << what;
        EXPECT_NE(what.find("LimitNOFILE"), std::string::npos) << what;
    }

    server::ServerConfig forced = server::parse_server_config({"--egress-max-connections", "500"});
    auto f = server::plan_fd_budget(1024, forced);
    EXPECT_EQ(f.per_sandbox, 500u);
    EXPECT_TRUE(f.overridden);
    EXPECT_NE(f.warning.find("over the fd budget"), std::string::npos) << f.warning;

    server::ServerConfig flags = server::parse_server_config(
        {"--max-http-connections", "64", "--max-idle-http-connections", "8"});
    EXPECT_EQ(flags.http.max_connections, 64u);
    EXPECT_EQ(flags.http.max_idle_connections, 8u);
    EXPECT_THROW(server::parse_server_config({"--egress-max-connections", "0"}),
                 std::invalid_argument);
}

// ------------------------------------------------------------------ the relay out of fds

TEST(SpliceRelayOutOfFds, CreatingOneFailsWithAnErrorAndLeavesTheSocketsToTheCaller) {
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    boost::asio::ip::tcp::socket a(io), b(io);
    a.connect(acceptor.local_endpoint());
    acceptor.accept(b);
    std::error_code error;
    {
        FdLimit limit(open_fds() + 64);
        FdFiller filler;
        filler.fill_all();
        filler.release(2);  // one pipe, not two
        auto relay = network::SpliceRelay::create(a, b, {}, error);
        EXPECT_FALSE(relay);
    }
    EXPECT_EQ(error, std::errc::too_many_files_open) << error.message();
    EXPECT_TRUE(a.is_open());
    EXPECT_TRUE(b.is_open());
    auto relay = network::SpliceRelay::create(a, b, {}, error);
    EXPECT_TRUE(relay) << error.message();
    EXPECT_FALSE(a.is_open());  // moved into the relay
}

// ------------------------------------------------------------------ sandbox networks

class FdNetwork : public ::testing::Test {
  protected:
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
        internet_ = std::make_unique<TestInternet>(std::map<std::string, std::string>{});
    }
    std::unique_ptr<network::NetworkService> service(std::size_t max_connections = 1024) {
        network::NetworkOptions o;
        o.dns_upstream = internet_->dns_address();
        o.public_ranges = {*network::parse_ip_range(internet_->web_address())};
        o.max_connections = max_connections;
        return std::make_unique<network::NetworkService>(o);
    }
    std::shared_ptr<network::SandboxNetwork> make(network::NetworkService& s, const std::string& id,
                                                  const std::string& existing_netns = {}) {
        network::SandboxNetwork::Options o;
        o.sandbox_id = id;
        o.policy = network::NetworkPolicy::open();
        o.kind = network::SandboxNetwork::Kind::container;
        o.existing_netns = existing_netns;
        o.audit = [this](const std::string& kind, const nlohmann::json& detail) {
            std::lock_guard lock(audit_mutex_);
            audit_ += kind + " " + detail.dump() + "\n";
        };
        return s.create(o);
    }
    RunResult inside(const network::SandboxNetwork& net, std::vector<std::string> argv,
                     std::chrono::milliseconds timeout = 30s) {
        auto ns = network::NetworkNamespace::open(net.container_netns_path());
        SpawnOptions o;
        o.argv = std::move(argv);
        o.netns_fd = ns.fd();
        return run_process(o, timeout);
    }
    void expect_reaches_web(const network::SandboxNetwork& net) {
        auto r = inside(net, {"curl", "-sS", "--max-time", "8", "--noproxy", "*",
                              "http://" + internet_->web_address() + "/"});
        EXPECT_EQ(r.status.exit_code, 0) << r.err;
        EXPECT_NE(r.out.find("deskbox test host"), std::string::npos) << r.out;
    }
    std::string audit() {
        std::lock_guard lock(audit_mutex_);
        return audit_;
    }

    std::unique_ptr<TestInternet> internet_;
    std::mutex audit_mutex_;
    std::string audit_;
};

// ~80 sandboxes took deskboxd past fd 1024, and libnftables' select() on its netlink socket
// then aborted it (glibc's FD_SETSIZE check), at create and again at adoption after a restart.
TEST_F(FdNetwork, RouterRulesLoadAndAdoptWithDescriptorsPast1024) {
    FdLimit limit(8192);
    FdFiller filler;
    filler.fill_past(1100);
    auto svc = service();
    auto net = make(*svc, "sb-past-1024");
    // The router's sockets themselves are past 1024 too, and the rules work.
    expect_reaches_web(*net);

    // A restart: the sandbox's namespace outlives the server that built its router; the next
    // one builds a new router (and loads the rules again) around it.
    auto inner = network::NetworkNamespace::open(net->container_netns_path());
    net.reset();
    auto adopted = make(*svc, "sb-past-1024", inner.path());
    expect_reaches_web(*adopted);
}

// Past its cap a sandbox's new connection is reset at once and counted over_cap; what it holds
// stays, and so does a neighbour.
TEST_F(FdNetwork, ConnectionsPastTheCapAreResetAndCounted) {
    auto svc = service(20);
    auto net = make(*svc, "sb-flood");
    auto neighbour = make(*svc, "sb-neighbour");
    auto r =
        inside(*net, {"python3", "-c", kFloodScript, internet_->web_address(), "9002", "60", "1"});
    ASSERT_EQ(r.status.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("alive 20\n"), std::string::npos) << r.out;
    auto t = net->totals();
    EXPECT_EQ(t.refused_over_cap, 40u);
    EXPECT_EQ(t.allowed, 20u);
    EXPECT_EQ(t.refused_no_fds, 0u);
    auto described = net->describe()["egress"]["connections"];
    EXPECT_EQ(described["refused"]["over_cap"], 40) << described.dump();
    EXPECT_NE(audit().find("\"refused\":\"over_cap\""), std::string::npos) << audit();
    expect_reaches_web(*neighbour);
}

// deskboxd out of fds when a relay needs its pipes: that flow is refused and counted (no_fds),
// not an exception on an I/O thread that ends the process.
TEST_F(FdNetwork, AFlowThatFindsNoFdsIsRefusedAndTheProcessGoesOn) {
    auto svc = service();
    auto net = make(*svc, "sb-no-fds");
    // The client is started first (its pipes need fds) and connects when told to.
    auto ns = network::NetworkNamespace::open(net->container_netns_path());
    SpawnOptions o;
    o.argv = {"python3", "-c",
              "import socket, sys\n"
              "sys.stdin.readline()\n"
              // The reset may come before connect returns (the handshake is the kernel's, and
              // the proxy resets what it accepted at once): at connect or at the read, a reset.
              "try:\n"
              "    s = socket.create_connection((sys.argv[1], 9002), timeout=10)\n"
              "    print('read', len(s.recv(1)), flush=True)\n"
              "except Exception as e:\n"
              "    print('error', type(e).__name__, flush=True)\n",
              internet_->web_address()};
    o.netns_fd = ns.fd();
    o.pipe_stdin = true;
    o.pipe_stdout = true;
    auto client = ChildProcess::spawn(o);
    std::string said;
    {
        FdLimit limit(open_fds() + 256);
        FdFiller filler;
        filler.fill_all();
        // Two: the accepted connection and the upstream socket, none for the relay's pipes.
        filler.release(2);
        ASSERT_EQ(::write(client.stdin_fd().get(), "go\n", 3), 3);
        char c;
        while (::read(client.stdout_fd().get(), &c, 1) == 1 && c != '\n') said += c;
        for (int i = 0; i < 100 && net->totals().refused_no_fds == 0; ++i)
            std::this_thread::sleep_for(50ms);  // the count follows the reset on another thread
    }
    client.wait(10s);
    EXPECT_EQ(said, "error ConnectionResetError");
    EXPECT_EQ(net->totals().refused_no_fds, 1u);
    EXPECT_NE(audit().find("\"refused\":\"no_fds\""), std::string::npos) << audit();
    expect_reaches_web(*net);  // and the next one, with fds again, goes through
}

// ------------------------------------------------------------------ a real deskboxd

class HostileDeskboxd : public ::testing::Test {
  protected:
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "needs root";
        REQUIRE_TEMPLATE();
        internet_ = std::make_unique<TestInternet>(
            std::map<std::string, std::string>{{"allowed.test", "web"}});
    }
    // deskboxd started under RLIMIT_NOFILE `limit` (soft and hard: it cannot raise it; this
    // process keeps its own).
    std::unique_ptr<Server> start(rlim_t limit, std::vector<std::string> extra) {
        std::vector<std::string> flags = {"--dns-upstream", internet_->dns_address(),
                                          "--public-range", internet_->web_address()};
        flags.insert(flags.end(), extra.begin(), extra.end());
        return std::make_unique<Server>(flags, std::filesystem::path(), limit);
    }
    std::string create(Server& s) {
        auto a = s.post("/v1/sandboxes", {{"network", true}});
        EXPECT_EQ(a.status, 201u) << a.body << s.log();
        return a.js().value("id", "");
    }
    // The flood in the background inside sandbox `id`; its summary goes to /tmp/flood.out.
    void flood(Server& s, const std::string& id, int n, int hold_s) {
        std::string cmd = std::string("python3 -c '") + kFloodScript + "' " +
                          internet_->web_address() + " 9002 " + std::to_string(n) + " " +
                          std::to_string(hold_s) + " > /tmp/flood.out 2>&1";
        auto a = s.post("/v1/sandboxes/" + id + "/commands", {{"cmd", cmd}, {"background", true}});
        ASSERT_EQ(a.status, 200u) << a.body;
    }
    // The sandbox's egress connection counters; an object without them (the failure shows the
    // answer) when inspect did not give them.
    json egress(Server& s, const std::string& id) {
        auto a = s.get("/v1/sandboxes/" + id);
        json inspect = a.js();
        if (a.status == 200 && inspect.is_object()) {
            auto path = json::json_pointer("/network/egress/connections");
            if (inspect.contains(path)) return inspect.at(path);
        }
        ADD_FAILURE() << "inspect answered " << a.status << ": " << a.body;
        return {{"allowed", 0}, {"open", -1}, {"refused", {{"over_cap", 0}, {"no_fds", 0}}}};
    }
    // Waits (bounded) until `done` says the sandbox's connections have all been decided.
    template <typename Done>
    json wait_for(Server& s, const std::string& id, Done done) {
        json c;
        for (int i = 0; i < 600; ++i) {
            c = egress(s, id);
            if (done(c)) break;
            std::this_thread::sleep_for(100ms);
        }
        return c;
    }
    bool alive(Server& s) { return ::kill(s.pid(), 0) == 0 && s.get("/healthz").status == 200; }
    // 0 when the test host answered; else what curl said (the failure names it).
    ::testing::AssertionResult curl(Server& s, const std::string& id) {
        auto out = run(s, id, "curl -sS --max-time 8 http://allowed.test/ 2>&1; echo exit=$?");
        if (out.find("deskbox test host") != std::string::npos)
            return ::testing::AssertionSuccess();
        return ::testing::AssertionFailure() << "curl in the sandbox: " << out;
    }

    std::unique_ptr<TestInternet> internet_;
};

// The attack of issue 26: a sandbox opening connections to an accepting host until deskboxd's
// fds ran out (pipe2 EMFILE thrown on an I/O thread: terminate). Now each sandbox holds at most
// its share of the budget: 1536 fds for 2 sandboxes and 128 HTTP connections give 56 each.
TEST_F(HostileDeskboxd, AConnectionFloodIsCappedAndDeskboxdAndTheNeighbourGoOn) {
    auto s = start(1536, {"--max-sandboxes", "2", "--max-http-connections", "128"});
    EXPECT_NE(s->log().find("each of 2 sandboxes may hold 56 egress connections"),
              std::string::npos)
        << s->log();
    std::string attacker = create(*s), neighbour = create(*s);
    ASSERT_FALSE(attacker.empty());
    ASSERT_FALSE(neighbour.empty());
    flood(*s, attacker, 300, 20);
    auto c = wait_for(*s, attacker, [](const json& c) {
        return c["allowed"].get<int>() + c["refused"]["over_cap"].get<int>() >= 300;
    });
    EXPECT_EQ(c["allowed"], 56) << c.dump();
    EXPECT_EQ(c["refused"]["over_cap"], 300 - 56) << c.dump();
    EXPECT_EQ(c["refused"]["no_fds"], 0) << c.dump();
    EXPECT_LE(c["open"].get<int>(), 56) << c.dump();
    EXPECT_TRUE(alive(*s)) << s->log();
    EXPECT_TRUE(curl(*s, neighbour)) << "the neighbour lost its network";
    EXPECT_LT(metric_value(*s, "deskboxd_open_fds"), 1536u);
    auto metrics = s->get("/metrics").body;
    EXPECT_NE(metrics.find("deskbox_egress_refused_total{sandbox=\"" + attacker +
                           "\",reason=\"over_cap\"} 244"),
              std::string::npos)
        << metrics;
    std::ifstream audit(s->state() / "audit" / (attacker + ".jsonl"));
    std::string lines((std::istreambuf_iterator<char>(audit)), {});
    EXPECT_NE(lines.find("\"refused\":\"over_cap\""), std::string::npos);
    EXPECT_EQ(s->log().find("terminate called"), std::string::npos) << s->log();
}

// With the cap forced past the budget, the sandbox does run deskboxd out of fds: flows are
// refused (no_fds) or wait in the kernel's backlog, and deskboxd lives and recovers when the
// flood ends.
TEST_F(HostileDeskboxd, OutOfFdsDeskboxdRefusesFlowsAndRecovers) {
    // The test host never answers a close: the flood's flows are reset 2 s after it let go.
    auto s = start(700, {"--max-sandboxes", "1", "--max-http-connections", "64",
                         "--egress-max-connections", "2000", "--egress-half-closed-idle-s", "2"});
    EXPECT_NE(s->log().find("warning: --egress-max-connections 2000 is over the fd budget"),
              std::string::npos)
        << s->log();
    std::string id = create(*s);
    ASSERT_FALSE(id.empty());
    flood(*s, id, 300, 8);
    // The summary appears once the flood let go of its connections.
    std::string summary;
    for (int i = 0; i < 300 && summary.find("alive") == std::string::npos; ++i) {
        std::this_thread::sleep_for(100ms);
        if (::kill(s->pid(), 0) != 0) break;
        summary = run(*s, id, "cat /tmp/flood.out 2>/dev/null");
    }
    ASSERT_EQ(::kill(s->pid(), 0), 0) << "deskboxd died:\n" << s->log();
    EXPECT_NE(summary.find("alive"), std::string::npos) << summary;
    EXPECT_TRUE(alive(*s)) << s->log();
    auto c = wait_for(*s, id, [](const json& c) { return c["open"].get<int>() == 0; });
    std::printf("flood past the budget: %s; %s\n", c.dump().c_str(), summary.c_str());
    EXPECT_EQ(c["open"], 0) << "flows the client closed still held: " << c.dump();
    EXPECT_TRUE(curl(*s, id)) << "no network after the flood\n" << s->log();
    EXPECT_EQ(s->log().find("terminate called"), std::string::npos) << s->log();
}

// A deskboxd holding more than 1024 fds (here: 1100 idle API connections standing in for ~80
// sandboxes) still creates a sandbox (its router's nft rules: libnftables select()ed and
// aborted the process), gives it a network, and serves its VNC (libvncserver select()s: its
// client socket is moved below 1024).
TEST_F(HostileDeskboxd, ASandboxIsCreatedNetworkedAndViewedPast1024Fds) {
    auto s =
        start(20000, {"--max-http-connections", "2000", "--max-idle-http-connections", "2000"});
    FdLimit mine(8192);
    net::io_context io;
    std::vector<tcp::socket> idle;
    for (int i = 0; i < 1100; ++i) {
        idle.emplace_back(io);
        idle.back().connect(
            {net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(s->port())});
    }
    for (int i = 0; i < 200 && fds_of(s->pid()) < 1100; ++i) std::this_thread::sleep_for(50ms);
    ASSERT_GE(fds_of(s->pid()), 1100u);
    std::string id = create(*s);
    ASSERT_FALSE(id.empty()) << s->log();
    EXPECT_TRUE(curl(*s, id)) << s->log();
    auto inspect = s->get("/v1/sandboxes/" + id).js();
    ASSERT_TRUE(inspect.contains("vnc")) << inspect.dump();
    tcp::socket vnc(io);
    vnc.connect({net::ip::make_address("127.0.0.1"),
                 static_cast<unsigned short>(inspect["vnc"]["port"].get<int>())});
    std::string version(12, '\0');
    net::read(vnc, net::buffer(version));
    EXPECT_EQ(version, "RFB 003.008\n");
    net::write(vnc, net::buffer(version));
    unsigned char types = 0;  // the number of security types: libvncserver read our version
    net::read(vnc, net::buffer(&types, 1));
    EXPECT_GT(types, 0);
    EXPECT_TRUE(alive(*s)) << s->log();
}

// Idle connections (never sending a request) past the caps: the oldest are closed, a new
// client is still served, and the counters say so.
TEST(HostileHttpConnections, IdleOnesPastTheCapsAreClosedAndANewClientIsServed) {
    Server s({"--max-http-connections", "32", "--max-idle-http-connections", "8"});
    net::io_context io;
    std::vector<tcp::socket> idle;
    for (int i = 0; i < 40; ++i) {
        idle.emplace_back(io);
        idle.back().connect(
            {net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(s.port())});
    }
    // Accepted in order: once this is answered, all 40 were admitted before it.
    EXPECT_EQ(s.get("/healthz").status, 200u);
    EXPECT_GE(metric_value(s, "deskbox_http_idle_closed_total"), 32u);
    EXPECT_LE(metric_value(s, "deskbox_http_idle_connections"), 8u);
    // The oldest were closed: the first of ours sees the end.
    pollfd p{idle.front().native_handle(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 10000), 1);
    char c;
    EXPECT_EQ(::recv(p.fd, &c, 1, 0), 0);
}

// deskboxd out of fds at accept: it backs off (50 ms doubling to 1 s) instead of retrying at
// once, and serves again once fds are free.
TEST(HostileHttpConnections, AcceptBacksOffWhenOutOfFdsAndRecovers) {
    auto s = std::make_unique<Server>(
        std::vector<std::string>{"--max-sandboxes", "1", "--egress-max-connections", "16",
                                 "--max-http-connections", "4000", "--max-idle-http-connections",
                                 "4000"},
        std::filesystem::path(), 300);
    net::io_context io;
    std::vector<tcp::socket> idle;
    for (int i = 0; i < 400; ++i) {
        idle.emplace_back(io);
        boost::system::error_code ec;
        idle.back().connect(
            {net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(s->port())}, ec);
    }
    // deskboxd took what its limit allows; more wait in the backlog, and accept fails.
    for (int i = 0; i < 200 && fds_of(s->pid()) < 290; ++i) std::this_thread::sleep_for(50ms);
    EXPECT_GE(fds_of(s->pid()), 290u);
    std::this_thread::sleep_for(2s);  // how long it stays so: the backoff's few tries
    idle.clear();                     // they end; deskboxd's sessions close theirs
    EXPECT_EQ(s->get("/healthz").status, 200u) << s->log();
    auto errors = metric_value(*s, "deskbox_http_accept_errors_total");
    EXPECT_GE(errors, 1u);
    // Backing off: a handful of tries in those seconds, where a spinning acceptor makes
    // hundreds of thousands.
    EXPECT_LE(errors, 100u);
}

}  // namespace
}  // namespace deskbox
