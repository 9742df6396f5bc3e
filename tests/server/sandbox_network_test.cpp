// The host side of sandbox networks (server/network) on the real kernel, without a runtime:
// SandboxNetworks of the container kind, a test internet in a namespace of the test's own
// (tests/support/test_internet.hpp), and real clients (curl, python3) run inside the sandbox's
// namespace, the one runc joins.
#include "tests/server/sandbox_network_fixture.hpp"

namespace deskbox::network {
namespace {

using test::host_interfaces;
using test::live_network_namespaces;

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
