// --egress-proxy (upstream_proxy.cpp): allowed TCP egress leaves through a SOCKS5 or HTTP
// CONNECT proxy, asked for by name; the policy still decides in deskboxd; UDP is refused. The
// proxies are the test internet's own (tests/support/test_internet.hpp), in its namespace.
#include "tests/server/sandbox_network_fixture.hpp"
#include "tests/support/eventually.hpp"

namespace deskbox::network {
namespace {

class SandboxNetworkProxyTest : public SandboxNetworkTest {
  protected:
    void use_proxy(const std::string& url) {
        options_.egress_proxy = parse_upstream_proxy(url);
        service_.reset();
        service_ = std::make_unique<NetworkService>(options_);
    }
    bool proxy_saw(const std::string& note) const {
        for (const auto& line : internet_->requests_seen())
            if (line.find(note) != std::string::npos) return true;
        return false;
    }
    std::string seen() const {
        std::string all;
        for (const auto& line : internet_->requests_seen()) all += line + "\n";
        return all;
    }
    void wait_for_audit(const std::string& text) {
        test::eventually([&] { return audit_text().find(text) != std::string::npos; }, 2s);
    }
};

TEST_F(SandboxNetworkProxyTest, AllowedEgressGoesThroughASocks5ProxyByName) {
    use_proxy("socks5://" + internet_->web_address() + ":1080");
    auto net = make({{"allow", {"allowed.test"}}});
    expect_reached(curl(*net, {"http://allowed.test/"}), internet_->web_address());
    EXPECT_TRUE(proxy_saw("proxy=socks5 target=allowed.test:80 auth=none")) << seen();
    // TLS passes through it end to end, by its SNI's name.
    expect_reached(curl(*net, {"https://allowed.test/"}), internet_->web_address());
    EXPECT_TRUE(proxy_saw("proxy=socks5 target=allowed.test:443")) << seen();
    // What the policy refuses never reaches the proxy.
    expect_refused(curl(*net, {"http://other.test/"}), "other.test");
    EXPECT_FALSE(proxy_saw("target=other.test")) << seen();
    // UDP is not carried: refused, and said why.
    auto r = python(*net,
                    "import socket\n"
                    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1)\n"
                    "s.sendto(b'ping', ('allowed.test', 7))\n"
                    "try: print(s.recv(100))\n"
                    "except OSError: print('no answer')");
    EXPECT_NE(r.out.find("no answer"), std::string::npos) << r.out << r.err;
    wait_for_audit("UDP is not carried through the egress proxy");
    EXPECT_NE(audit_text().find("UDP is not carried through the egress proxy"), std::string::npos)
        << audit_text();
}

TEST_F(SandboxNetworkProxyTest, AnHttpConnectProxyWithAPasswordCarriesHttpsCredentialRules) {
    use_proxy("http://deskbox:proxy-pass@" + internet_->web_address() + ":3128");
    {
        std::lock_guard lock(audit_mutex_);
        secrets_["tok"] = "Bearer via-the-proxy";
    }
    json rules =
        json::array({{{"domain", "allowed.test"}, {"headers", {{"Authorization", "secret:tok"}}}}});
    // The internet: the address decides; the proxy is asked for the name DNS gave it.
    auto net = make({{"rules", rules}});
    auto r = run_inside(
        net->container_netns_path(),
        {"curl", "-sS", "--max-time", "8", "--noproxy", "*", "--cacert",
         options_.egress_ca->certificate_path().string(), "https://allowed.test/headers"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("Authorization: Bearer via-the-proxy"), std::string::npos) << r.out;
    EXPECT_TRUE(proxy_saw("proxy=http target=allowed.test:443 auth=password")) << seen();
    expect_reached(curl(*net, {"http://other.test/"}), internet_->other_address());
    EXPECT_TRUE(proxy_saw("proxy=http target=other.test:80")) << seen();
}

TEST_F(SandboxNetworkProxyTest, AProxyThatRefusesOrIsDownIsAResetWithTheReason) {
    use_proxy("socks5://deskbox:wrong@" + internet_->web_address() + ":1080");
    auto net = make({{"allow", {"allowed.test"}}});
    expect_refused(curl(*net, {"http://allowed.test/"}), "a proxy refusing the password");
    wait_for_audit("refused the user and password");
    EXPECT_NE(audit_text().find("socks5://deskbox@"), std::string::npos) << audit_text();
    EXPECT_EQ(audit_text().find("wrong"), std::string::npos) << "the password: " << audit_text();
    net.reset();
    // Nothing listens on :1.
    use_proxy("socks5://" + internet_->web_address() + ":1");
    net = make({{"allow", {"allowed.test"}}});
    expect_refused(curl(*net, {"http://allowed.test/"}), "a proxy that is down");
    wait_for_audit("did not accept");
    EXPECT_NE(audit_text().find("the egress proxy socks5://"), std::string::npos) << audit_text();
}

TEST_F(SandboxNetworkProxyTest, ASandboxPicksANamedProxyAndTheOthersKeepTheDefault) {
    options_.named_egress_proxies["corp"] =
        parse_upstream_proxy("http://" + internet_->web_address() + ":3128");
    use_proxy("socks5://" + internet_->web_address() + ":1080");
    auto corp = make({{"allow", {"allowed.test"}}, {"proxy", "corp"}});
    auto plain = make({{"allow", {"other.test"}}});
    expect_reached(curl(*corp, {"http://allowed.test/"}), internet_->web_address());
    expect_reached(curl(*plain, {"http://other.test/"}), internet_->other_address());
    EXPECT_TRUE(proxy_saw("proxy=http target=allowed.test:80")) << seen();
    EXPECT_TRUE(proxy_saw("proxy=socks5 target=other.test:80")) << seen();
    EXPECT_FALSE(proxy_saw("proxy=socks5 target=allowed.test")) << seen();
    EXPECT_EQ(corp->describe()["policy"]["proxy"], "corp");
}

TEST(UpstreamProxyTest, UrlsParseAndBadOnesSayWhatIsWrong) {
    auto p = parse_upstream_proxy("socks5://u:secret@10.0.0.1:1080");
    EXPECT_EQ(p.kind, UpstreamProxy::Kind::socks5);
    EXPECT_EQ(p.user, "u");
    EXPECT_EQ(p.password, "secret");
    EXPECT_EQ(p.endpoint.port(), 1080);
    EXPECT_EQ(p.describe(), "socks5://u@10.0.0.1:1080");
    EXPECT_EQ(parse_upstream_proxy("http://[2001:db8::1]:3128/").describe(),
              "http://[2001:db8::1]:3128");
    EXPECT_EQ(parse_upstream_proxy("socks5h://127.0.0.1:9050").kind, UpstreamProxy::Kind::socks5);
    for (const std::string bad :
         {"", "ftp://1.2.3.4:21", "socks5://1.2.3.4", "socks5://1.2.3.4:0", "socks5://1.2.3.4:x",
          "socks5://proxy.example:1080", "http://:pw@1.2.3.4:8080"}) {
        try {
            parse_upstream_proxy(bad);
            ADD_FAILURE() << bad << " parsed";
        } catch (const std::invalid_argument& e) {
            EXPECT_EQ(std::string(e.what()).find("pw"), std::string::npos) << e.what();
        }
    }
}

}  // namespace
}  // namespace deskbox::network
