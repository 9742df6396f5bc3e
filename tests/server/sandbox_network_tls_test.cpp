// HTTPS credential rules (tcp_egress_tls.cpp, tls_interception.cpp): TLS to a rule's domain
// ends at the proxy, which sets the rules' headers and opens its own, verified TLS to the
// server; every other name keeps its TLS end to end. Real curl and python3 in the sandbox's
// namespace against the test internet's HTTPS hosts, whose certificates come from a test CA
// the proxy is told to trust (:443) or from nobody (:8443, self-signed).
#include "tests/server/sandbox_network_fixture.hpp"
#include "tests/support/eventually.hpp"

namespace deskbox::network {
namespace {

class SandboxNetworkTlsTest : public SandboxNetworkTest {
  protected:
    // curl that verifies certificates against `ca_file` only (no -k), printing the body, then
    // a line with the HTTP version and status.
    Ran verified_curl(const SandboxNetwork& net, const std::string& ca_file,
                      const std::vector<std::string>& args) {
        std::vector<std::string> argv = {
            "curl", "-sS",      "--max-time", "8",  "--noproxy",
            "*",    "--cacert", ca_file,      "-w", "\n%{http_version} %{http_code}\n"};
        argv.insert(argv.end(), args.begin(), args.end());
        return run_inside(net.container_netns_path(), argv);
    }
    std::string egress_ca() const { return options_.egress_ca->certificate_path().string(); }
    std::shared_ptr<SandboxNetwork> with_token_rule(const std::string& path = "/headers") {
        {
            std::lock_guard lock(audit_mutex_);
            secrets_["tok"] = "Bearer from-the-store";
        }
        json rules = json::array({{{"domain", "allowed.test"},
                                   {"path", path},
                                   {"headers", {{"Authorization", "secret:tok"}}}}});
        return make({{"allow", {"allowed.test", "other.test"}}, {"rules", rules}});
    }
    void wait_for_audit(const std::string& text) {
        for (int i = 0; i < 100 && audit_text().find(text) == std::string::npos; ++i)
            std::this_thread::sleep_for(20ms);
    }
};

TEST_F(SandboxNetworkTlsTest, HttpsToARuleDomainArrivesWithTheSecretTheSandboxNeverHad) {
    auto net = with_token_rule();
    // The sandbox trusts deskboxd's CA (as every sandbox does); the server's own test CA is
    // not needed: the proxy answers with a certificate for the name from deskboxd's CA.
    auto r =
        verified_curl(*net, egress_ca(),
                      {"-v", "-H", "Authorization: Bearer fake", "https://allowed.test/headers"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("Authorization: Bearer from-the-store"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("Bearer fake"), std::string::npos) << "replaced: " << r.out;
    EXPECT_NE(r.err.find("deskbox egress CA"), std::string::npos) << "issuer: " << r.err;
    EXPECT_NE(r.out.find("\n1.1 200"), std::string::npos) << r.out;
    // The server got it over TLS, for its own name.
    bool seen = false;
    for (const auto& line : internet_->requests_seen())
        if (line.find("sni=allowed.test") != std::string::npos &&
            line.find("Authorization: Bearer from-the-store") != std::string::npos)
            seen = true;
    EXPECT_TRUE(seen);
    // Asking for HTTP/2 gets HTTP/1.1: the proxy reads requests as HTTP/1 only.
    r = verified_curl(*net, egress_ca(), {"--http2", "https://allowed.test/headers"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("\n1.1 200"), std::string::npos) << r.out;
    // Python's default context (with the CA) works the same.
    r = python(*net,
               "import ssl, urllib.request\n"
               "ctx = ssl.create_default_context(cafile='" +
                   egress_ca() +
                   "')\n"
                   "print(urllib.request.urlopen('https://allowed.test/headers', context=ctx,"
                   " timeout=8).read().decode())");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("Authorization: Bearer from-the-store"), std::string::npos) << r.out;
    wait_for_audit("\"tls\":\"terminated\"");
    const std::string audit = audit_text();
    EXPECT_NE(audit.find("\"tls\":\"terminated\""), std::string::npos) << audit;
    EXPECT_NE(audit.find("\"injected_headers\":[\"Authorization\"]"), std::string::npos) << audit;
    EXPECT_EQ(audit.find("from-the-store"), std::string::npos) << audit;
}

TEST_F(SandboxNetworkTlsTest, ADomainWithoutARuleKeepsItsTlsEndToEnd) {
    auto net = with_token_rule();
    // other.test has no rule: the sandbox sees the server's own certificate (the test CA's),
    // which deskboxd's CA does not verify.
    auto r = verified_curl(*net, internet_->ca_file(), {"https://other.test/headers"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("\n1.1 200"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("from-the-store"), std::string::npos) << r.out;
    r = verified_curl(*net, egress_ca(), {"https://other.test/headers"});
    EXPECT_NE(r.exit_code, 0) << "deskboxd's CA must not have signed it: " << r.out;
    // HTTP/2 passes end to end there.
    r = verified_curl(*net, internet_->ca_file(), {"--http2", "https://other.test/"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    // A rule domain's name sent to another address (the sandbox's own choice) is not ended
    // either: it keeps its TLS and gets nothing.
    r = verified_curl(*net, internet_->ca_file(),
                      {"--resolve", "allowed.test:443:" + internet_->other_address(),
                       "https://allowed.test/headers"});
    EXPECT_EQ(r.out.find("from-the-store"), std::string::npos) << r.out;
}

TEST_F(SandboxNetworkTlsTest, AServerWhoseCertificateFailsIsRefusedWithTheReason) {
    auto net = with_token_rule();
    // :8443 serves a self-signed certificate: the proxy refuses to send the secret there and
    // tells the sandbox why, over the TLS it ended.
    auto r = verified_curl(*net, egress_ca(), {"https://allowed.test:8443/headers"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("\n1.1 502"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("certificate is not trusted"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("Authorization"), std::string::npos) << r.out;
    wait_for_audit("certificate is not trusted");
    const std::string audit = audit_text();
    EXPECT_NE(audit.find("\"decision\":\"blocked\""), std::string::npos) << audit;
    EXPECT_NE(audit.find("self-signed certificate"), std::string::npos) << audit;
    EXPECT_EQ(net->totals().blocked, 1u);
}

TEST_F(SandboxNetworkTlsTest, ARequestForAnotherHostOnAnEndedConnectionIsCut) {
    auto net = with_token_rule();
    // One connection (curl reuses it): the first request is for the TLS name; the second
    // names other.test in its Host, which would front for it through our connection.
    auto r = verified_curl(*net, egress_ca(),
                           {"https://allowed.test/headers", "--next", "--cacert", egress_ca(), "-H",
                            "Host: other.test", "https://allowed.test/headers"});
    EXPECT_NE(r.out.find("Authorization: Bearer from-the-store"), std::string::npos) << r.out;
    EXPECT_NE(r.exit_code, 0) << "the second request must fail: " << r.out;
    for (const auto& line : internet_->requests_seen())
        EXPECT_EQ(line.find("host=other.test"), std::string::npos) << line;
    wait_for_audit("is not the name the TLS connection was opened to");
    EXPECT_NE(audit_text().find("request 2: Host other.test is not the name the TLS connection"),
              std::string::npos)
        << audit_text();
    // curl tries a request whose reused connection died once more on a new one: cut again
    // (counted as the proxy finishes with it, maybe after curl has gone).
    EXPECT_TRUE(test::eventually([&] { return net->totals().allowed == net->totals().cut; }, 5s))
        << audit_text();
    EXPECT_GE(net->totals().cut, 1u);
}

}  // namespace
}  // namespace deskbox::network
