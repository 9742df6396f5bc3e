// deskboxd's warm container pool (--container-pool) end to end with real runc containers of the
// `minimal` template and a test internet of the test's own: a create that fits takes a pooled
// sandbox, whose identity is its own and whose network policy is the create's; one that does not
// fit gets a container of its own; the pool refills; pooled sandboxes hold places of
// --max-sandboxes and give them up to creates; nothing is left after the server stops, nor after
// a crashed server's successor cleans up. Needs root and the built template.
#include <sys/stat.h>

#include <fstream>
#include <set>

#include "server/runtime/container/runtime.hpp"
#include "tests/server/internet_fixture.hpp"
#include "tests/support/host_state.hpp"

namespace deskbox {
namespace {

using namespace test;

class ContainerPool : public InternetSandboxes {
  protected:
    ContainerPool() : InternetSandboxes({{"allowed.test", "web"}, {"other.test", "other"}}) {}

    static int pooled(Server& s) {
        const std::string metrics = s.get("/metrics").body;
        const std::string key = "deskbox_sandboxes{state=\"pooled\"} ";
        auto at = metrics.find(key);
        return at == std::string::npos ? -1 : std::stoi(metrics.substr(at + key.size()));
    }
    // The sandboxes whose files exist under the state dir (registered or pooled).
    static std::set<std::string> sandbox_dirs(const std::filesystem::path& state) {
        std::set<std::string> ids;
        std::error_code ec;
        for (auto& entry : std::filesystem::directory_iterator(state / "sandboxes", ec))
            if (entry.is_directory()) ids.insert(entry.path().filename().string());
        return ids;
    }
    // curl's exit code inside the sandbox (0: fetched).
    static int curl(Server& s, const std::string& id, const std::string& url) {
        std::string out = run(s, id, "curl -sS --max-time 8 -o /dev/null " + url + "; echo $?");
        return out.empty() ? -1 : std::stoi(out);
    }
    // Mounts under the state dir (overlays, capped disks, id-mapped layers, pinned namespaces).
    static std::vector<std::string> mounts_under(const std::filesystem::path& state) {
        std::ifstream in("/proc/self/mountinfo");
        std::vector<std::string> found;
        for (std::string line; std::getline(in, line);)
            if (line.find(" " + state.string() + "/") != std::string::npos) found.push_back(line);
        return found;
    }
    // The sandbox cgroups deskboxd made for this state dir (memory controller).
    static std::size_t cgroups_under(const std::filesystem::path& state) {
        const auto dir = std::filesystem::path("/sys/fs/cgroup/memory") /
                         runtime::ContainerRuntime::cgroup_parent_for(state);
        std::size_t n = 0;
        std::error_code ec;
        for (auto& entry : std::filesystem::directory_iterator(dir, ec)) n += entry.is_directory();
        return n;
    }
};

TEST_F(ContainerPool, AClaimGetsItsOwnIdentityAndTheCreatesNetworkPolicyAndThePoolRefills) {
    Server s(server_flags({"--container-pool", "minimal=2"}));
    ASSERT_TRUE(eventually([&] { return pooled(s) == 2; }, 180s)) << s.log();
    auto listed = s.get("/v1/sandboxes");
    ASSERT_EQ(listed.status, 200u) << s.log();
    EXPECT_EQ(listed.js()["sandboxes"].size(), 0u) << "pooled ones are not listed";
    const auto waiting = sandbox_dirs(s.state());
    ASSERT_EQ(waiting.size(), 2u);

    auto a = s.post("/v1/sandboxes", {{"network", {{"allow", {"allowed.test"}}}},
                                      {"metadata", {{"who", "a"}}},
                                      {"timeout_s", 120}});
    ASSERT_EQ(a.status, 201u) << a.body << s.log();
    auto b = s.post("/v1/sandboxes", json::object());
    ASSERT_EQ(b.status, 201u) << b.body << s.log();
    const std::string ia = a.js()["id"], ib = b.js()["id"];
    EXPECT_TRUE(waiting.count(ia) && waiting.count(ib)) << "both were taken from the pool";
    EXPECT_EQ(a.js()["metadata"]["who"], "a") << "the request's, not the pool's";
    EXPECT_EQ(a.js()["state"], "running");

    // Identity: each its own name, machine-id and tokens.
    EXPECT_EQ(run(s, ia, "hostname"), ia + "\n");
    EXPECT_EQ(run(s, ib, "hostname"), ib + "\n");
    const std::string machine_a = run(s, ia, "cat /etc/machine-id");
    const std::string machine_b = run(s, ib, "cat /etc/machine-id");
    EXPECT_EQ(machine_a.size(), 33u) << machine_a;
    EXPECT_NE(machine_a, machine_b);
    for (const char* token : {"view_token", "control_token"}) {
        EXPECT_EQ(a.js()[token].get<std::string>().size(), 32u) << token;
        EXPECT_NE(a.js()[token], b.js()[token]) << token;
    }
    // minimal says "glx": false: its Xvfb runs without GLX and never maps Mesa's driver.
    EXPECT_NE(run(s, ia, "tr '\\0' ' ' < /proc/$(pgrep -x Xvfb)/cmdline").find("-extension GLX"),
              std::string::npos);
    EXPECT_EQ(run(s, ia, "grep -c dri.so /proc/$(pgrep -x Xvfb)/maps"), "0\n");
    // The network: a's allow list holds; b, which asked for nothing, has the server's default
    // (the internet), not the nothing the pool waited with.
    EXPECT_EQ(s.get("/v1/sandboxes/" + ia).js()["network"]["policy"]["mode"], "allowlist");
    EXPECT_EQ(curl(s, ia, "http://allowed.test/"), 0);
    EXPECT_NE(curl(s, ia, "http://" + internet_->other_address() + "/"), 0)
        << "a host a's policy denies was reached";
    EXPECT_EQ(curl(s, ib, "http://" + internet_->other_address() + "/"), 0);
    EXPECT_EQ(s.get("/v1/sandboxes/" + ib).js()["network"]["policy"]["mode"], "internet");

    // A create that does not fit the pool (another resolution, or env) gets its own.
    auto own = s.post("/v1/sandboxes", {{"resolution", {800, 600}}});
    ASSERT_EQ(own.status, 201u) << own.body;
    EXPECT_FALSE(waiting.count(own.js()["id"].get<std::string>()));
    EXPECT_EQ(own.js()["resolution"], json::array({800, 600}));
    auto with_env = s.post("/v1/sandboxes", {{"env", {{"POOL_TEST", "1"}}}});
    ASSERT_EQ(with_env.status, 201u) << with_env.body;
    EXPECT_FALSE(waiting.count(with_env.js()["id"].get<std::string>()));
    EXPECT_EQ(run(s, with_env.js()["id"], "echo $POOL_TEST"), "1\n");

    EXPECT_TRUE(eventually([&] { return pooled(s) == 2; }, 180s)) << "the pool refills" << s.log();
    auto c = s.post("/v1/sandboxes", json::object());
    ASSERT_EQ(c.status, 201u) << c.body;
    EXPECT_FALSE(waiting.count(c.js()["id"].get<std::string>()));
    EXPECT_TRUE(sandbox_dirs(s.state()).count(c.js()["id"].get<std::string>()));
    EXPECT_NE(run(s, c.js()["id"], "cat /etc/machine-id"), machine_a);
}

TEST_F(ContainerPool, PooledSandboxesHoldPlacesAndGiveThemUpToCreates) {
    Server s(server_flags({"--container-pool", "minimal=2", "--max-sandboxes", "2"}));
    ASSERT_TRUE(eventually([&] { return pooled(s) == 2; }, 180s)) << s.log();
    // The server is full of pooled sandboxes: a create that does not fit them takes the place
    // of one.
    auto own = s.post("/v1/sandboxes", {{"resolution", {800, 600}}});
    ASSERT_EQ(own.status, 201u) << own.body << s.log();
    EXPECT_EQ(pooled(s), 1);
    EXPECT_NE(s.log().find("ended to make room for a create"), std::string::npos) << s.log();
    auto taken = s.post("/v1/sandboxes", json::object());
    ASSERT_EQ(taken.status, 201u) << taken.body;
    EXPECT_EQ(pooled(s), 0);
    // Two run: a third is refused, and the pool does not refill beyond the limit.
    auto refused = s.post("/v1/sandboxes", json::object());
    EXPECT_EQ(refused.status, 429u) << refused.body;
    EXPECT_EQ(refused.js()["error"]["code"], "too_many_sandboxes") << refused.body;
    EXPECT_EQ(sandbox_dirs(s.state()).size(), 2u);
    EXPECT_EQ(s.del("/v1/sandboxes/" + own.js()["id"].get<std::string>()).status, 200u);
    EXPECT_TRUE(eventually([&] { return pooled(s) == 1; }, 180s)) << "the freed place" << s.log();
    EXPECT_EQ(sandbox_dirs(s.state()).size(), 2u);
}

TEST_F(ContainerPool, NothingIsLeftAfterAStopOrAfterACrashedServersSuccessorCleansUp) {
    TempDir shared("deskboxd-container-pool");
    ::chmod(shared.path().c_str(), 0711);
    const auto state = shared.path() / "state";
    const auto interfaces = host_interfaces();
    std::string claimed;
    {
        Server s(server_flags({"--container-pool", "minimal=2"}), state);
        ASSERT_TRUE(eventually([&] { return pooled(s) == 2; }, 180s)) << s.log();
        auto a = s.post("/v1/sandboxes", {{"metadata", {{"who", "kept"}}}});
        ASSERT_EQ(a.status, 201u) << a.body;
        claimed = a.js()["id"];
        ASSERT_TRUE(eventually([&] { return pooled(s) == 2; }, 180s)) << s.log();
        EXPECT_EQ(cgroups_under(state), 3u);
        s.kill_hard();  // a crash: the containers run on
    }
    {
        // The successor (without a pool) adopts the handed-out sandbox; the pool's, whose
        // tokens nobody holds, are removed.
        Server again(server_flags(), state);
        auto adopted = again.get("/v1/sandboxes/" + claimed);
        ASSERT_EQ(adopted.status, 200u) << adopted.body << again.log();
        EXPECT_EQ(adopted.js()["metadata"]["who"], "kept");
        EXPECT_NE(again.log().find("made for the pool and never handed out"), std::string::npos)
            << again.log();
        EXPECT_EQ(sandbox_dirs(state), std::set<std::string>{claimed});
        EXPECT_EQ(cgroups_under(state), 1u);
    }
    {
        // A server with a pool, stopped: its pooled sandboxes end with it.
        Server third(server_flags({"--container-pool", "minimal=2"}), state);
        ASSERT_TRUE(eventually([&] { return pooled(third) == 2; }, 180s)) << third.log();
    }
    EXPECT_TRUE(sandbox_dirs(state).empty());
    EXPECT_TRUE(mounts_under(state).empty()) << mounts_under(state).front();
    EXPECT_EQ(cgroups_under(state), 0u);
    EXPECT_TRUE(run_process({"pgrep", "-f", "runc.*" + state.string()}).out.empty());
    EXPECT_EQ(host_interfaces(), interfaces);
}

}  // namespace
}  // namespace deskbox
