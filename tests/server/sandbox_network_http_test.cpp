// Plain HTTP through the egress proxy request by request (http_relay.cpp): every request on
// a kept-alive connection checked, credential rules setting headers, large uploads, and the
// half-closed timeout of both relays.
#include "tests/server/sandbox_network_fixture.hpp"

namespace deskbox::network {
namespace {

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

TEST_F(SandboxNetworkTest, AHalfClosedConnectionWhoseServerStaysSilentIsReset) {
    // The :9002 holder never reads, answers or closes. Spliced (true) or carried request by
    // request (an allow list), the client's close starts the clock.
    auto options = options_;
    options.half_closed_idle = 1s;
    service_ = std::make_unique<NetworkService>(options);
    const char* client = R"(import socket, time
s = socket.create_connection(("allowed.test", 9002), timeout=10)
s.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
s.shutdown(socket.SHUT_WR)
t = time.time()
try: s.recv(1)
except OSError: pass
print("%.1f" % (time.time() - t))
)";
    for (json policy : {json(true), json({{"allow", {"allowed.test"}}})}) {
        auto net = make(policy);
        auto r = run_inside(net->container_netns_path(), {"python3", "-c", client});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_LT(std::stod(r.out), 5.0) << policy.dump() << ": " << r.out;
        EXPECT_GE(std::stod(r.out), 0.5) << policy.dump() << ": " << r.out;
        for (int i = 0; i < 100 && audit_text().find("stayed silent") == std::string::npos; ++i)
            std::this_thread::sleep_for(20ms);
        EXPECT_NE(audit_text().find("stayed silent for 1 s"), std::string::npos) << audit_text();
        std::lock_guard lock(audit_mutex_);
        audit_.clear();
    }
    internet_->release_held();
}

}  // namespace
}  // namespace deskbox::network
