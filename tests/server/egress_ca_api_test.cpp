// Issue 31: every sandbox trusts deskboxd's egress CA (<state>/egress-ca) and the operator's
// (--egress-ca-cert) from its first process on. Through deskboxd with real runc containers: a CA
// and a server certificate of the test's own (openssl), a TLS server inside the sandbox on
// loopback, and the sandbox's own clients (curl, Python, Firefox in `desktop`) verifying it without
// being told anything; the environment; a fork (the install runs again on a layer that has it)
// adding nothing twice; and a server without the option trusting only its own CA (where the same
// clients fail, so the checks above can fail).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "common/pem.hpp"
#include "tests/server/deskboxd_fixture.hpp"
#include "tests/support/test_ca.hpp"

namespace deskbox {
namespace {

using namespace test;
namespace fs = std::filesystem;

constexpr const char* kBundle = "/etc/ssl/certs/ca-certificates.crt";

// A TLS server of a page titled by its last argument, logging each request's path to stderr.
constexpr const char* kTlsServer = R"(import http.server, ssl, sys
port, cert, key, title = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("<html><head><title>%s</title></head><body>%s</body></html>" % (title, title)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, fmt, *args):
        sys.stderr.write("request %s\n" % self.path)
        sys.stderr.flush()
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Page)
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
)";

std::string read_text(const fs::path& file) {
    std::ifstream in(file);
    return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::size_t occurrences(const std::string& haystack, const std::string& needle) {
    std::size_t count = 0;
    for (auto at = haystack.find(needle); at != std::string::npos;
         at = haystack.find(needle, at + 1))
        ++count;
    return count;
}

class EgressCa : public ::testing::Test {
  protected:
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "needs root";
        if (!template_built()) GTEST_SKIP() << "template 'minimal' not built";
        ca_ = make_test_ca(dir_.path());
        fs::create_directories(dir_.path() / "other");
        other_ = make_test_ca(dir_.path() / "other", "a CA nobody trusts");
        pem_ = pem_certificates(ca_.ca_text()).at(0);
    }

    // The command's whole answer (exit_code, stdout, stderr).
    static json exec(Server& s, const std::string& id, const std::string& cmd) {
        auto answer = s.post("/v1/sandboxes/" + id + "/commands", {{"cmd", cmd}});
        EXPECT_EQ(answer.status, 200u) << answer.body;
        return answer.js();
    }
    static std::string guest_file(Server& s, const std::string& id, const std::string& path) {
        auto answer = s.get("/v1/sandboxes/" + id + "/files?path=" + path);
        return answer.status == 200 ? answer.body : "";
    }
    static bool guest_has(Server& s, const std::string& id, const std::string& path) {
        return s.get("/v1/sandboxes/" + id + "/files?path=" + path).status == 200;
    }

    // A TLS server on 127.0.0.1:`port` in the sandbox with a certificate of `ca`, as the user;
    // returns once it answers (curl -k: only that it is up, not whom it trusts).
    void serve(Server& s, const std::string& id, int port, const TestCa& ca,
               const std::string& title) {
        const std::string dir = "/home/user/tls" + std::to_string(port) + "/";
        const std::string base = "/v1/sandboxes/" + id + "/files?path=" + dir;
        ASSERT_EQ(s.call(http::verb::put, base + "server.pem", read_text(ca.server_pem)).status,
                  200u);
        ASSERT_EQ(s.call(http::verb::put, base + "server.key", read_text(ca.server_key)).status,
                  200u);
        ASSERT_EQ(s.call(http::verb::put, base + "serve.py", kTlsServer).status, 200u);
        start(s, id,
              "cd " + dir + " && exec python3 serve.py " + std::to_string(port) +
                  " server.pem server.key '" + title + "' 2>requests.log");
        const std::string probe =
            "curl -sk -o /dev/null -w %{http_code} https://localhost:" + std::to_string(port) +
            "/probe";
        ASSERT_TRUE(eventually([&] { return run(s, id, probe) == "200"; }, 30s))
            << "the TLS server in the sandbox did not come up";
    }

    // What the sandbox's clients make of the server on `port`, with the environment they get.
    json fetch(Server& s, const std::string& id, int port) {
        const std::string p = std::to_string(port);
        json out;
        out["curl"] = exec(s, id, "curl -sS https://localhost:" + p + "/");
        // The system bundle alone, without the variables that name it.
        out["curl_bundle"] = exec(
            s, id, "env -u CURL_CA_BUNDLE -u SSL_CERT_FILE curl -sS https://localhost:" + p + "/");
        // Python's default context (OpenSSL's default paths); "localhost" comes from the
        // /etc/hosts every sandbox gets, with a network or without.
        out["python"] = exec(s, id,
                             "env -u SSL_CERT_FILE -u REQUESTS_CA_BUNDLE python3 -c 'import "
                             "urllib.request; print(urllib.request.urlopen(\"https://"
                             "localhost:" +
                                 p + "/\").read().decode())'");
        return out;
    }

    TempDir dir_{"deskbox-egress-ca-api"};
    TestCa ca_, other_;
    std::string pem_;
};

TEST_F(EgressCa, ContainerSandboxesTrustItFromTheirFirstProcessOn) {
    Server s({"--egress-ca-cert", ca_.ca_pem.string()});
    // deskboxd's own CA first, then the operator's.
    const std::string own = read_text(s.state() / "egress-ca" / "ca.pem");
    ASSERT_NE(own.find("BEGIN CERTIFICATE"), std::string::npos);
    const std::string published = read_text(s.state() / "agent" / "egress-ca.pem");
    EXPECT_EQ(published, own + pem_);
    auto created = s.post("/v1/sandboxes", {{"network", false}});
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    const std::string id = created.js()["id"];

    // The files, as the guest's root made them, before the session started.
    EXPECT_EQ(guest_file(s, id, "/opt/deskbox/egress-ca.pem"), published);
    const std::string bundle = guest_file(s, id, kBundle);
    EXPECT_EQ(occurrences(bundle, pem_), 1u);
    EXPECT_EQ(occurrences(bundle, own), 1u);
    EXPECT_GT(occurrences(bundle, "BEGIN CERTIFICATE"), 100u) << "Debian's roots are kept";
    EXPECT_EQ(guest_file(s, id, "/usr/local/share/ca-certificates/deskbox-egress.crt"), published);
    const json policies =
        json::parse(guest_file(s, id, "/etc/firefox/policies/policies.json"), nullptr, false);
    EXPECT_EQ(policies["policies"]["Certificates"]["Install"],
              json({"/usr/local/share/deskbox/egress-ca-1.pem",
                    "/usr/local/share/deskbox/egress-ca-2.pem"}))
        << policies.dump();
    EXPECT_EQ(run(s, id, "stat -c '%U %a' /etc/ssl/certs/ca-certificates.crt"), "root 644\n");

    // The environment of a command, and of the session's first app (the autostart xterm).
    const std::string expected[] = {
        "NODE_EXTRA_CA_CERTS=/opt/deskbox/egress-ca.pem",
        "DESKBOX_EGRESS_CA=/opt/deskbox/egress-ca.pem",
        "REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt",
        "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
        "CURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt",
    };
    const std::string env = run(s, id, "env");
    std::string xterm_env;
    ASSERT_TRUE(eventually(
        [&] {
            xterm_env = run(s, id, "tr '\\0' '\\n' < /proc/$(pgrep -x -o xterm)/environ");
            return !xterm_env.empty();
        },
        30s));
    for (const auto& line : expected) {
        EXPECT_NE(env.find(line + "\n"), std::string::npos) << line << " in\n" << env;
        EXPECT_NE(xterm_env.find(line + "\n"), std::string::npos) << line << " in\n" << xterm_env;
    }
    // A request's own environment still wins.
    auto mine = s.post("/v1/sandboxes/" + id + "/commands",
                       {{"cmd", "echo $SSL_CERT_FILE"}, {"env", {{"SSL_CERT_FILE", "/mine"}}}});
    EXPECT_EQ(mine.js().value("stdout", ""), "/mine\n") << mine.body;

    serve(s, id, 8443, ca_, "egress trusted");
    serve(s, id, 8444, other_, "egress untrusted");
    const json trusted = fetch(s, id, 8443);
    for (const auto& [client, answer] : trusted.items()) {
        EXPECT_EQ(answer["exit_code"], 0) << client << ": " << answer.dump();
        EXPECT_NE(answer.value("stdout", "").find("egress trusted"), std::string::npos)
            << client << ": " << answer.dump();
    }
    // The same clients do check: another CA's server is refused.
    const json refused = fetch(s, id, 8444);
    EXPECT_EQ(refused["curl"]["exit_code"], 60) << refused.dump();
    EXPECT_NE(refused["python"].value("stderr", "").find("CERTIFICATE_VERIFY_FAILED"),
              std::string::npos)
        << refused.dump();

    // A fork starts from the saved writable layer, which holds the CA: its install runs again
    // and adds nothing.
    auto forked = s.post("/v1/sandboxes/" + id + "/fork", {{"count", 1}});
    ASSERT_EQ(forked.status, 201u) << forked.body << s.log();
    const std::string copy = forked.js()["sandboxes"][0]["id"];
    EXPECT_EQ(guest_file(s, copy, kBundle), bundle);
    EXPECT_EQ(occurrences(guest_file(s, copy, kBundle), pem_), 1u);
    serve(s, copy, 8445, ca_, "egress trusted in the copy");
    EXPECT_NE(run(s, copy, "curl -sS https://localhost:8445/").find("egress trusted in the copy"),
              std::string::npos);
    EXPECT_EQ(s.del("/v1/sandboxes/" + copy).status, 200u);
    EXPECT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
}

TEST_F(EgressCa, WithoutTheOptionASandboxTrustsDeskboxdsOwnCaOnly) {
    // A server that had the option, then one without it on the same state dir.
    { Server before({"--egress-ca-cert", ca_.ca_pem.string()}, dir_.path() / "state"); }
    Server s({}, dir_.path() / "state");
    const std::string own = read_text(s.state() / "egress-ca" / "ca.pem");
    EXPECT_EQ(read_text(s.state() / "agent" / "egress-ca.pem"), own)
        << "the operator's CA the server no longer names stays in /opt/deskbox";
    auto created = s.post("/v1/sandboxes", {{"network", false}});
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    const std::string id = created.js()["id"];

    EXPECT_EQ(guest_file(s, id, "/opt/deskbox/egress-ca.pem"), own);
    const std::string bundle = guest_file(s, id, kBundle);
    EXPECT_EQ(occurrences(bundle, own), 1u);
    EXPECT_EQ(occurrences(bundle, pem_), 0u);
    EXPECT_NE(run(s, id, "env").find("SSL_CERT_FILE=" + std::string(kBundle)), std::string::npos);

    // So the clients that trusted the test CA's server above refuse it here.
    serve(s, id, 8443, ca_, "egress trusted");
    const json refused = fetch(s, id, 8443);
    EXPECT_EQ(refused["curl"]["exit_code"], 60) << refused.dump();
    EXPECT_EQ(refused["curl_bundle"]["exit_code"], 60) << refused.dump();
    EXPECT_NE(refused["python"].value("stderr", "").find("CERTIFICATE_VERIFY_FAILED"),
              std::string::npos)
        << refused.dump();
    EXPECT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
}

TEST_F(EgressCa, ARefusedCertificateFileStopsTheServerSayingWhy) {
    const fs::path both = dir_.path() / "with-key.pem";
    std::ofstream(both) << ca_.ca_text() << read_text(ca_.ca_key);
    auto result =
        run_process({test_paths::kDeskboxd, "--listen", "127.0.0.1:0", "--state-dir",
                     (dir_.path() / "refused").string(), "--egress-ca-cert", both.string()},
                    30s);
    EXPECT_NE(result.status.exit_code, 0);
    EXPECT_NE(result.err.find("--egress-ca-cert"), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("only PEM certificates"), std::string::npos) << result.err;
}

// Firefox ESR of `desktop` trusts it through its enterprise policy (it has roots of its own,
// not the system bundle's), with the template's own policies kept; another CA's page still
// gets Firefox's warning.
TEST_F(EgressCa, DesktopFirefoxTrustsItThroughItsPolicy) {
    if (!template_built("desktop")) GTEST_SKIP() << "template 'desktop' not built";
    Server s({"--egress-ca-cert", ca_.ca_pem.string()});
    auto created = s.post("/v1/sandboxes", {{"template", "desktop"}, {"network", false}});
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    const std::string id = created.js()["id"];
    const std::string base = "/v1/sandboxes/" + id;

    const json policies =
        json::parse(guest_file(s, id, "/etc/firefox/policies/policies.json"), nullptr, false);
    ASSERT_TRUE(policies.is_object()) << "policies.json is not JSON";
    EXPECT_EQ(policies["policies"]["Certificates"]["Install"],
              json({"/usr/local/share/deskbox/egress-ca-1.pem",
                    "/usr/local/share/deskbox/egress-ca-2.pem"}))
        << policies.dump();
    EXPECT_EQ(policies["policies"]["Certificates"]["ImportEnterpriseRoots"], true);
    EXPECT_EQ(policies["policies"]["DisableTelemetry"], true) << "the template's policies went";
    EXPECT_EQ(policies["policies"]["OverrideFirstRunPage"], "") << policies.dump();

    serve(s, id, 8443, ca_, "egress trusted");
    serve(s, id, 8444, other_, "egress untrusted");
    auto window_titled = [&](const std::string& wanted) {
        return eventually(
            [&] { return s.get(base + "/windows").body.find(wanted) != std::string::npos; }, 180s);
    };
    start(s, id, "firefox-esr https://localhost:8443/");
    EXPECT_TRUE(window_titled("egress trusted")) << s.get(base + "/windows").body;
    EXPECT_NE(run(s, id, "cat /home/user/tls8443/requests.log").find("request /\n"),
              std::string::npos);
    // The address bar of the open window (a second firefox-esr would not reach this one).
    open_in_firefox(s, id, "https://localhost:8444/");
    EXPECT_TRUE(window_titled("Security Risk")) << s.get(base + "/windows").body;
    EXPECT_EQ(run(s, id, "cat /home/user/tls8444/requests.log").find("request /\n"),
              std::string::npos)
        << "Firefox sent a request over a connection it should not trust";
    EXPECT_EQ(s.del(base).status, 200u);
}

}  // namespace
}  // namespace deskbox
