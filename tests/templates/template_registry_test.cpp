// Templates from a registry, through a real deskboxd: a registry of the test's own in a network
// namespace it makes (tests/support/test_registry.hpp), an image pushed there from the built
// `minimal`, then an import by reference and a Dockerfile FROM it, each pinned to the digest
// pulled; registries the operator did not allow are 400s before anything is fetched, and an
// allowed one that is down fails the build saying so. Needs root, buildah, skopeo,
// docker-registry and the built `minimal`.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>

#include "common/child_process.hpp"
#include "common/unique_fd.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/test_internet.hpp"
#include "tests/support/test_registry.hpp"
#include "tests/templates/template_api.hpp"

namespace fs = std::filesystem;
using deskbox::run_process;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

using Server = deskbox::test::TemplateServer;

bool have(const char* tool) {
    return run_process({"sh", "-c", std::string("command -v ") + tool}).status.exit_code == 0;
}

std::string skip_reason() {
    if (::geteuid() != 0) return "needs root";
    for (const char* tool : {"buildah", "skopeo", "docker-registry", "curl"})
        if (!have(tool)) return std::string("needs ") + tool;
    return {};
}

// The built `minimal` committed as an image and pushed to `registry` as test/desk:1
// (uncompressed: quicker here); its manifest digest.
std::string push_desktop_image(const std::string& registry) {
    deskbox::test::TestEngine engine;
    engine.commit_rootfs(deskbox::test::minimal_rootfs(), "xterm -title pulled", "desk");
    const auto digest_file = engine.dir() / "digest";
    engine.run({"push", "--quiet", "--disable-compression", "--tls-verify=false", "--digestfile",
                digest_file.string(), "desk", "docker://" + registry + "/test/desk:1"});
    std::ifstream in(digest_file);
    std::string digest;
    in >> digest;
    return digest;
}

// The pids of `pid`'s children (every thread's).
std::set<int> children_of(int pid) {
    std::set<int> out;
    std::error_code ec;
    for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
        std::ifstream in(task.path() / "children");
        for (int child; in >> child;) out.insert(child);
    }
    return out;
}

// A listening socket on the host's `address`, port chosen by the kernel, that accepts nothing
// unless asked: whether anything connected to it.
class HostListener {
  public:
    explicit HostListener(const std::string& address) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        ::inet_pton(AF_INET, address.c_str(), &a.sin_addr);
        socklen_t length = sizeof a;
        if (!fd_ || ::bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
            ::listen(fd_.get(), 8) != 0 ||
            ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &length) != 0)
            throw std::runtime_error("cannot listen on " + address);
        port_ = ntohs(a.sin_port);
    }
    unsigned port() const { return port_; }
    bool connected() const {
        deskbox::UniqueFd peer(::accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK));
        return static_cast<bool>(peer);
    }

  private:
    deskbox::UniqueFd fd_{::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)};
    unsigned port_ = 0;
};

}  // namespace

// A registry that answers a pull with a redirect cannot lead it anywhere the operator did not
// name: not to another address (a private one here), not to the host. The pull fails clearly and
// nothing arrives there.
TEST(TemplateRegistry, ARedirectCannotLeadAPullWhereItWasNotNamed) {
    if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
    deskbox::test::TestInternet internet({});
    HostListener host(internet.host_side_address());
    const std::string registry = internet.web_address() + ":80";
    internet.redirect("/v2/away/", "http://" + internet.other_address());
    internet.redirect("/v2/home/",
                      "http://" + internet.host_side_address() + ":" + std::to_string(host.port()));
    Server s({"--template-registry-insecure", registry, "--template-pull-timeout-s", "60"});
    for (const std::string repository : {"away", "home"}) {
        const std::string image = registry + "/" + repository + "/desk:1";
        auto r = s.build({{"name", repository}, {"dockerfile", "FROM " + image + "\n"}});
        EXPECT_EQ(r["status"], "failed") << r.dump(1);
        EXPECT_EQ(r["error"]["code"], "pull_failed") << r.dump(1);
        EXPECT_NE(r["error"]["message"].get<std::string>().find("from registry " + registry),
                  std::string::npos)
            << r.dump(1);
    }
    // The registry was asked and redirected both pulls; nothing reached where it pointed.
    int redirected = 0;
    for (const auto& seen : internet.requests_seen()) {
        EXPECT_EQ(seen.find("address=" + internet.other_address()), std::string::npos) << seen;
        if (seen.find("target=/v2/away/desk/manifests/1") != std::string::npos ||
            seen.find("target=/v2/home/desk/manifests/1") != std::string::npos)
            ++redirected;
    }
    EXPECT_GE(redirected, 2);
    EXPECT_FALSE(host.connected());
}

// Nothing is fetched from a registry the operator did not name: import and FROM are 400s that
// name the registry and the flag; a short name is not taken for a registry's image.
TEST(TemplateRegistry, UnlistedRegistriesAreRefusedBeforeAnyPull) {
    if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
    Server s({"--template-registry", "reg.example:5000"});
    auto r = s.start_build({{"name", "x"}, {"image", "198.19.0.9:5000/team/app:1"}}, "imports");
    EXPECT_EQ(r.status, 400u) << r.body;
    EXPECT_EQ(r.json()["error"]["field"], "image") << r.body;
    EXPECT_NE(r.body.find("registry '198.19.0.9:5000' is not allowed"), std::string::npos)
        << r.body;
    EXPECT_NE(r.body.find("--template-registry"), std::string::npos) << r.body;
    EXPECT_NE(r.body.find("reg.example:5000"), std::string::npos) << r.body;

    r = s.start_build(
        {{"name", "x"}, {"dockerfile", "FROM deskbox/minimal AS a\nFROM other.example/app:1\n"}});
    EXPECT_EQ(r.status, 400u) << r.body;
    EXPECT_NE(r.body.find("Dockerfile line 2: registry 'other.example' is not allowed"),
              std::string::npos)
        << r.body;

    r = s.start_build({{"name", "x"}, {"dockerfile", "FROM debian:12\n"}});
    EXPECT_EQ(r.status, 400u) << r.body;
    EXPECT_NE(r.body.find("is not here"), std::string::npos) << r.body;

    r = s.start_build({{"name", "x"}, {"image", "debian:12"}}, "imports");
    EXPECT_EQ(r.status, 400u) << r.body;
    EXPECT_NE(r.body.find("names no registry"), std::string::npos) << r.body;
    r = s.start_build({{"name", "x"}, {"image", "reg.example:5000/a:1"}, {"upload_id", "u"}},
                      "imports");
    EXPECT_EQ(r.status, 400u) << r.body;
    EXPECT_EQ(s.api->get_json("/v1/templates/builds")["builds"].size(), 0u);
}

// The whole way: import by reference (its sandbox runs), FROM the same image (pulled once,
// reused), both pinned to the digest; an allowed registry that is down fails clearly; nothing
// of the pulls is left (their networks, processes), nor of the registry once it goes.
TEST(TemplateRegistry, ImportAndFromPullFromAnAllowedRegistryPinnedToItsDigest) {
    if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
    auto registry = std::make_unique<deskbox::test::TestRegistry>();
    const std::string digest = push_desktop_image(registry->address());
    ASSERT_EQ(digest.rfind("sha256:", 0), 0u) << digest;
    const std::string image = registry->address() + "/test/desk:1";
    const std::string pinned = registry->address() + "/test/desk@" + digest;

    Server s({"--template-registry-insecure", registry->address(), "--template-registry-insecure",
              registry->down_address(), "--template-pull-timeout-s", "300",
              "--template-pull-keep-h", "0"});
    auto imported = s.build({{"name", "pulled"}, {"image", image}}, "imports");
    ASSERT_EQ(imported["status"], "succeeded") << imported.dump(1) << s.log_of(imported);
    // After the first build: it made the engine's disk, and the engine's namespace holder was
    // made anew to see it.
    const auto children_before = children_of(s.process->pid());
    EXPECT_NE(s.log_of(imported).find(image + " is " + digest), std::string::npos);
    auto listed = s.api->get_json("/v1/templates/pulled");
    EXPECT_EQ(listed["base"], image);
    EXPECT_EQ(listed["base_digest"], pinned);
    EXPECT_EQ(listed["pulled"], json::array({pinned}));
    auto sandbox = s.api->post_json("/v1/sandboxes", {{"template", "pulled"}, {"network", false}});
    ASSERT_TRUE(sandbox.contains("id")) << sandbox.dump();
    EXPECT_EQ(s.exec(sandbox["id"], "id -un")["stdout"], "user\n");
    s.api->delete_json("/v1/sandboxes/" + sandbox["id"].get<std::string>());

    // FROM the registry's image: the base pulled for the import is reused, not fetched again.
    auto built = s.build({{"name", "fromreg"},
                          {"dockerfile", "FROM " + image + "\nRUN echo from-registry > /etc/hi\n"},
                          {"network", false}});
    ASSERT_EQ(built["status"], "succeeded") << built.dump(1) << s.log_of(built);
    EXPECT_NE(s.log_of(built).find(pinned + " is already here"), std::string::npos)
        << s.log_of(built);
    listed = s.api->get_json("/v1/templates/fromreg");
    EXPECT_EQ(listed["base_digest"], pinned);
    const auto all = s.api->get_json("/v1/templates");
    json item;
    for (const auto& i : all["items"])
        if (i.value("template", "") == "fromreg:latest") item = i;
    EXPECT_EQ(item.value("base_digest", ""), pinned) << all.dump(1);

    // Allowed, but nothing answers there: the build fails naming the registry.
    auto down = s.build(
        {{"name", "down"}, {"dockerfile", "FROM " + registry->down_address() + "/test/desk:1\n"}});
    EXPECT_EQ(down["status"], "failed") << down.dump(1);
    EXPECT_EQ(down["error"]["code"], "pull_failed") << down.dump(1);
    EXPECT_NE(down["error"]["message"].get<std::string>().find("from registry " +
                                                               registry->down_address()),
              std::string::npos)
        << down.dump(1);

    const int registry_pid = registry->pid();
    registry->stop();
    // The registry down: a tag pulled before builds from the copy here, saying so, and a
    // reference pinned to a digest that is here asks the registry nothing.
    auto offline = s.build({{"name", "offline"},
                            {"dockerfile", "FROM " + image + "\nRUN echo offline > /etc/hi\n"},
                            {"network", false}});
    ASSERT_EQ(offline["status"], "succeeded") << offline.dump(1) << s.log_of(offline);
    EXPECT_NE(s.log_of(offline).find("cannot be reached; using " + pinned), std::string::npos)
        << s.log_of(offline);
    EXPECT_EQ(s.api->get_json("/v1/templates/offline")["base_digest"], pinned);
    auto by_digest = s.build(
        {{"name", "bydigest"}, {"dockerfile", "FROM " + pinned + "\n"}, {"network", false}});
    ASSERT_EQ(by_digest["status"], "succeeded") << by_digest.dump(1) << s.log_of(by_digest);
    EXPECT_NE(s.log_of(by_digest).find(pinned + " is already here (pulled before; the registry is "
                                                "not asked)"),
              std::string::npos)
        << s.log_of(by_digest);

    // Once no template stands on it (kept 0 h here), the pulled image leaves the engine's
    // storage: the tag cannot be built without its registry any more.
    for (const char* name : {"pulled", "fromreg", "offline", "bydigest"})
        EXPECT_EQ(
            s.api->send(deskbox::client::Method::del, std::string("/v1/templates/") + name).status,
            200u)
            << name;
    auto gone = s.build({{"name", "gone"}, {"dockerfile", "FROM " + image + "\n"}});
    EXPECT_EQ(gone["status"], "failed") << gone.dump(1);
    EXPECT_EQ(gone["error"]["code"], "pull_failed") << gone.dump(1);

    // The pulls' network namespaces and processes went with them.
    deskbox::test::eventually([&] { return children_of(s.process->pid()) == children_before; },
                              30s);
    EXPECT_EQ(children_of(s.process->pid()), children_before);

    const std::string link = registry->host_side_link();
    registry.reset();
    EXPECT_FALSE(fs::exists("/sys/class/net/" + link));
    EXPECT_NE(::kill(registry_pid, 0), 0);
}
