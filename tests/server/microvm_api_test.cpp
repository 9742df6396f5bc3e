// deskboxd end to end with the microvm runtime: real QEMU (TCG here) booting the `minimal`
// template's image, through the same HTTP API as containers; snapshots (pause with
// "snapshot": true) that survive a server restart; creates restored from a template snapshot.
#include <cstdlib>
#include <ctime>

#include <opencv2/imgcodecs.hpp>

#include "tests/server/deskboxd_fixture.hpp"
#include "tests/support/host_state.hpp"
#include "tests/support/test_internet.hpp"

namespace deskbox {
namespace {

using namespace test;

bool microvm_image_built() {
    auto image =
        run_process({"python3", std::string(DESKBOX_SOURCE_DIR) + "/images/build_microvm.py",
                     "--print-path", "minimal"});
    std::string dir = image.out.substr(0, image.out.find('\n'));
    return image.status.exit_code == 0 && std::filesystem::exists(dir + "/rootfs.ext4") &&
           run_process({"sh", "-c", "command -v qemu-system-x86_64"}).status.exit_code == 0;
}

#define REQUIRE_MICROVM()                                                                \
    REQUIRE_TEMPLATE();                                                                  \
    if (!microvm_image_built())                                                          \
    GTEST_SKIP() << "microvm image or QEMU missing: apt-get install qemu-system-x86 && " \
                    "images/build_microvm.py minimal"

std::string windows_of(Server& s, const std::string& id) {
    return s.get("/v1/sandboxes/" + id + "/windows").body;
}

long counter(Server& s, const std::string& id) {
    std::string out = run(s, id, "cat /tmp/count 2>/dev/null");
    return out.empty() ? -1 : std::stol(out);
}

bool no_qemu_for(const std::string& id) {
    return run_process({"pgrep", "-f", "qemu-system-x86_64.*" + id}).out.empty();
}

TEST(MicrovmApi, SandboxWorksThroughTheSameApi) {
    REQUIRE_MICROVM();
    Server s;
    auto created = s.post("/v1/sandboxes", {{"runtime", "microvm"}, {"resolution", {1024, 768}}});
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    std::string id = created.js()["id"];
    EXPECT_EQ(created.js()["runtime"], "microvm");
    const std::string base = "/v1/sandboxes/" + id;
    auto shot = s.get(base + "/screenshot?format=png");
    ASSERT_EQ(shot.status, 200u);
    cv::Mat img =
        cv::imdecode(std::vector<uchar>(shot.body.begin(), shot.body.end()), cv::IMREAD_COLOR);
    EXPECT_EQ(img.cols, 1024);
    json terminal;
    ASSERT_TRUE(eventually(
        [&] {
            json windows = s.get(base + "/windows").js();
            for (auto& w : windows["windows"])
                if (w.value("class", "").find("Term") != std::string::npos) {
                    terminal = w;
                    return true;
                }
            return false;
        },
        120s))
        << s.get(base + "/windows").body;
    const std::string text = "vm: Grêmio 日本語 😀";
    auto act =
        s.post(base + "/actions",
               {{"actions",
                 {{{"type", "click"},
                   {"x", terminal["x"].get<int>() + 40},
                   {"y", terminal["y"].get<int>() + 40}},
                  {{"type", "type"}, {"text", "printf '%s' '" + text + "' > ~/typed.txt\n"}}}}});
    ASSERT_EQ(act.status, 200u) << act.body;
    EXPECT_TRUE(eventually([&] { return run(s, id, "cat ~/typed.txt 2>/dev/null") == text; }, 60s));
    std::string bytes("\x00\x01binary\xff", 10);
    EXPECT_EQ(s.call(http::verb::put, base + "/files?path=/tmp/b.bin", bytes).status, 200u);
    EXPECT_EQ(s.get(base + "/files?path=/tmp/b.bin").body, bytes);
    EXPECT_NE(run(s, id, "uname -r").find("cloud"), std::string::npos) << "its own kernel";
    EXPECT_EQ(run(s, id, "hostname"), id + "\n") << "restored from the template snapshot, renamed";
    EXPECT_EQ(s.del(base).status, 200u);
    EXPECT_FALSE(std::filesystem::exists(s.state() / "sandboxes" / id));
    EXPECT_EQ(run_process({"pgrep", "-f", "qemu-system-x86_64.*" + id}).out, "");
}

TEST(MicrovmApi, SnapshotKeepsEveryProcessAndWindowAndSurvivesAServerRestart) {
    REQUIRE_MICROVM();
    TempDir shared("deskboxd-snapshot");
    const auto state = shared.path() / "state";
    std::string id, control_token;
    long before = 0;
    {
        Server s({}, state);
        auto created = s.post("/v1/sandboxes", {{"runtime", "microvm"}});
        ASSERT_EQ(created.status, 201u) << created.body << s.log();
        id = created.js()["id"];
        control_token = created.js()["control_token"];
        const std::string base = "/v1/sandboxes/" + id;
        auto started = s.post(base + "/commands",
                              {{"cmd",
                                "i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.2; "
                                "done"},
                               {"background", true}});
        ASSERT_EQ(started.status, 200u) << started.body;
        auto window =
            s.post(base + "/commands",
                   {{"cmd", "xterm -T snapshot-window -e sleep 100000"}, {"background", true}});
        ASSERT_EQ(window.status, 200u) << window.body;
        ASSERT_TRUE(eventually(
            [&] { return windows_of(s, id).find("snapshot-window") != std::string::npos; }, 120s))
            << windows_of(s, id);
        ASSERT_TRUE(eventually([&] { return counter(s, id) > 2; }, 60s));
        before = counter(s, id);

        auto paused = s.post(base + "/pause", {{"snapshot", true}});
        ASSERT_EQ(paused.status, 200u) << paused.body << s.log();
        EXPECT_EQ(paused.js()["state"], "paused") << paused.body;
        ASSERT_TRUE(paused.js().contains("snapshot")) << paused.body;
        EXPECT_GT(paused.js()["snapshot"]["bytes"].get<long long>(), 1 << 20);
        EXPECT_EQ(s.get(base + "/screenshot").status, 409u);
        EXPECT_TRUE(no_qemu_for(id)) << "a snapshotted sandbox has no QEMU";
        EXPECT_EQ(s.post(base + "/pause", {{"snapshot", true}}).status, 200u) << "idempotent";
        // Saved long enough that a guest clock left as saved would be visibly late.
        std::this_thread::sleep_for(5s);
    }  // the server stops; the saved sandbox stays on disk
    ASSERT_TRUE(std::filesystem::exists(state / "sandboxes" / id / "memory"));

    Server s({}, state);
    const std::string base = "/v1/sandboxes/" + id;
    auto described = s.get(base);
    ASSERT_EQ(described.status, 200u) << described.body << s.log();
    EXPECT_EQ(described.js()["state"], "paused");
    EXPECT_EQ(described.js()["control_token"], control_token) << "same sandbox, same tokens";
    EXPECT_TRUE(described.js().contains("snapshot"));
    auto resumed = s.post(base + "/resume", json::object());
    ASSERT_EQ(resumed.status, 200u) << resumed.body << s.log();
    EXPECT_EQ(resumed.js()["state"], "running");
    EXPECT_FALSE(resumed.js().contains("snapshot"));
    long after = counter(s, id);
    EXPECT_GE(after, before) << "the counter started over or is gone";
    long guest_now = std::stol(run(s, id, "date +%s"));
    EXPECT_LE(std::labs(guest_now - static_cast<long>(std::time(nullptr))), 2)
        << "the guest clock was not set after the restore";
    EXPECT_TRUE(eventually([&] { return counter(s, id) > after; }, 60s)) << "it does not count";
    EXPECT_NE(windows_of(s, id).find("snapshot-window"), std::string::npos) << windows_of(s, id);
    auto shot = s.get(base + "/screenshot?format=png");
    ASSERT_EQ(shot.status, 200u);
    cv::Mat img =
        cv::imdecode(std::vector<uchar>(shot.body.begin(), shot.body.end()), cv::IMREAD_COLOR);
    EXPECT_EQ(img.cols, 1280);
    EXPECT_EQ(s.del(base).status, 200u);
    EXPECT_FALSE(std::filesystem::exists(state / "sandboxes" / id));
    EXPECT_TRUE(no_qemu_for(id));
}

TEST(MicrovmApi, TemplateSnapshotCreatesAreIndependentAndBadSnapshotsAreRefused) {
    REQUIRE_MICROVM();
    Server s;
    auto first = s.post("/v1/sandboxes", {{"runtime", "microvm"}});
    ASSERT_EQ(first.status, 201u) << first.body << s.log();
    auto second = s.post("/v1/sandboxes", {{"runtime", "microvm"}});
    ASSERT_EQ(second.status, 201u) << second.body << s.log();
    std::string a = first.js()["id"], b = second.js()["id"];
    EXPECT_NE(first.js()["control_token"], second.js()["control_token"]);
    EXPECT_NE(first.js()["view_token"], second.js()["view_token"]);
    EXPECT_EQ(run(s, a, "hostname"), a + "\n");
    EXPECT_EQ(run(s, b, "hostname"), b + "\n");
    long host_now = static_cast<long>(std::time(nullptr));
    long guest_now = std::stol(run(s, b, "date +%s"));
    EXPECT_LT(std::labs(guest_now - host_now), 60) << "the clock was not resynced";
    EXPECT_EQ(
        s.call(http::verb::put, "/v1/sandboxes/" + a + "/files?path=/home/user/a.txt", "A").status,
        200u);
    EXPECT_EQ(run(s, b, "test -e /home/user/a.txt && echo present || echo absent"), "absent\n");
    EXPECT_EQ(run(s, a, "cat /home/user/a.txt"), "A");
    // Both restored from one template snapshot of this server's state dir.
    auto templates = s.state() / "microvm" / "templates";
    int snapshots = 0;
    for (auto& e : std::filesystem::directory_iterator(templates)) snapshots += e.is_directory();
    EXPECT_EQ(snapshots, 1);

    // Bad requests.
    EXPECT_EQ(s.post("/v1/sandboxes/" + b + "/pause", {{"snapshot", "yes"}}).status, 400u);
    EXPECT_EQ(s.post("/v1/sandboxes/" + b + "/pause", {{"bogus", true}}).status, 400u);
    EXPECT_EQ(s.post("/v1/sandboxes/" + b + "/resume", {{"snapshot", true}}).status, 400u);
    EXPECT_EQ(s.post("/v1/sandboxes", {{"runtime", "microvm"}, {"fast_start", 1}}).status, 400u);

    // A corrupted snapshot is refused; the sandbox stays paused and the server serves on.
    auto paused = s.post("/v1/sandboxes/" + b + "/pause", {{"snapshot", true}});
    ASSERT_EQ(paused.status, 200u) << paused.body;
    auto memory = s.state() / "sandboxes" / b / "memory";
    ASSERT_TRUE(std::filesystem::exists(memory));
    std::filesystem::resize_file(memory, std::filesystem::file_size(memory) / 3);
    auto refused = s.post("/v1/sandboxes/" + b + "/resume", json::object());
    EXPECT_EQ(refused.status, 422u) << refused.body;
    EXPECT_EQ(refused.js()["error"]["code"], "snapshot_unusable") << refused.body;
    EXPECT_NE(refused.body.find("memory"), std::string::npos) << refused.body;
    EXPECT_EQ(s.get("/v1/sandboxes/" + b).js()["state"], "paused");
    EXPECT_TRUE(no_qemu_for(b));
    EXPECT_EQ(s.get("/v1/sandboxes/" + a + "/screenshot").status, 200u) << "the other one works";
    EXPECT_EQ(s.del("/v1/sandboxes/" + b).status, 200u);
    EXPECT_FALSE(std::filesystem::exists(s.state() / "sandboxes" / b));
    EXPECT_EQ(s.del("/v1/sandboxes/" + a).status, 200u);
    EXPECT_TRUE(no_qemu_for(a));
    EXPECT_TRUE(no_qemu_for(b));
}

TEST(MicrovmApi, AgentDeathPanicsTheGuestAndTheSandboxSaysWhy) {
    REQUIRE_MICROVM();
    Server s;
    auto created = s.post("/v1/sandboxes", {{"runtime", "microvm"}, {"fast_start", false}});
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    std::string id = created.js()["id"];
    const std::string base = "/v1/sandboxes/" + id;
    // The command's parent is the agent (PID 1's child in the guest): with it gone, PID 1
    // exits, the kernel panics and QEMU ends (-no-reboot).
    EXPECT_EQ(run(s, id, "ps -o comm= -p $PPID"), "deskbox-agent\n");
    auto killed = s.post(base + "/commands", {{"cmd", "kill -9 $PPID"}});
    EXPECT_NE(killed.status, 200u) << "the agent answered after its own death";
    json described;
    ASSERT_TRUE(eventually(
        [&] {
            described = s.get(base).js();
            return described.value("state", "") == "error";
        },
        120s))
        << described.dump();
    std::string reason = described.value("error", "");
    EXPECT_NE(reason.find("137"), std::string::npos) << "the agent's SIGKILL status: " << reason;
    EXPECT_NE(described.value("log_tail", "").find("Kernel panic"), std::string::npos)
        << "inspect shows the console: " << described.dump();
    auto shot = s.get(base + "/screenshot");
    EXPECT_EQ(shot.status, 503u) << shot.body;
    EXPECT_EQ(shot.js()["error"]["code"], "sandbox_error") << shot.body;
    EXPECT_TRUE(no_qemu_for(id));
    EXPECT_EQ(s.del(base).status, 200u);
    EXPECT_FALSE(std::filesystem::exists(s.state() / "sandboxes" / id));
}

int pooled(Server& s) {
    std::string metrics = s.get("/metrics").body;
    const std::string key = "deskbox_sandboxes{state=\"pooled\"} ";
    auto at = metrics.find(key);
    return at == std::string::npos ? -1 : std::stoi(metrics.substr(at + key.size()));
}

bool qemu_under(const std::filesystem::path& state) {
    return !run_process({"pgrep", "-f", "qemu-system-x86_64.*" + state.string()}).out.empty();
}

TEST(MicrovmApi, PoolHandsOutReadySandboxesAndRefills) {
    REQUIRE_MICROVM();
    TempDir shared("deskboxd-pool");
    const auto state = shared.path() / "state";
    {
        Server s({"--microvm-pool", "minimal=1"}, state);
        ASSERT_TRUE(eventually([&] { return pooled(s) == 1; }, 240s)) << s.log();
        auto created = s.post(
            "/v1/sandboxes",
            {{"runtime", "microvm"}, {"timeout_s", 120}, {"metadata", {{"who", "pool-test"}}}});
        ASSERT_EQ(created.status, 201u) << created.body << s.log();
        std::string id = created.js()["id"];
        EXPECT_EQ(created.js()["state"], "running");
        EXPECT_EQ(created.js()["metadata"]["who"], "pool-test") << "the request's, not the pool's";
        EXPECT_EQ(run(s, id, "hostname"), id + "\n");
        EXPECT_EQ(s.get("/v1/sandboxes/" + id + "/screenshot").status, 200u);
        EXPECT_TRUE(eventually([&] { return pooled(s) == 1; }, 240s)) << "the pool refills";
        // A request beyond the template's defaults is made for itself, not taken.
        auto own = s.post("/v1/sandboxes", {{"runtime", "microvm"}, {"resolution", {800, 600}}});
        ASSERT_EQ(own.status, 201u) << own.body;
        EXPECT_EQ(own.js()["resolution"], json::array({800, 600}));
        EXPECT_EQ(pooled(s), 1);
        EXPECT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
        EXPECT_EQ(s.del("/v1/sandboxes/" + own.js()["id"].get<std::string>()).status, 200u);
    }  // stopping the server ends the pooled one too
    EXPECT_FALSE(qemu_under(state)) << "a pooled microVM outlived its server";
    std::size_t dirs = 0;
    for (auto& e : std::filesystem::directory_iterator(state / "sandboxes"))
        dirs += e.is_directory();
    EXPECT_EQ(dirs, 0u);
}

TEST(MicrovmApi, PoolOptionIsChecked) {
    for (std::string bad : {"minimal", "=2", "minimal=x", "minimal=-1", "minimal=65"}) {
        auto r = run_process({DESKBOXD_PATH, "--microvm-pool", bad}, std::chrono::seconds(20));
        EXPECT_EQ(r.status.exit_code, 2) << bad;
        EXPECT_NE(r.err.find("--microvm-pool"), std::string::npos) << bad << ": " << r.err;
    }
}

TEST(MicrovmApi, ContainerSandboxesRefuseSnapshotsClearly) {
    REQUIRE_TEMPLATE();
    Server s;
    auto created = s.post("/v1/sandboxes", json::object());
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    std::string id = created.js()["id"];
    auto refused = s.post("/v1/sandboxes/" + id + "/pause", {{"snapshot", true}});
    EXPECT_EQ(refused.status, 409u) << refused.body;
    EXPECT_EQ(refused.js()["error"]["code"], "snapshot_unsupported") << refused.body;
    EXPECT_EQ(refused.js()["error"]["field"], "snapshot") << refused.body;
    EXPECT_EQ(s.get("/v1/sandboxes/" + id).js()["state"], "running");
    EXPECT_EQ(s.post("/v1/sandboxes/" + id + "/pause", {{"snapshot", false}}).status, 200u);
    EXPECT_EQ(s.post("/v1/sandboxes/" + id + "/resume", json::object()).status, 200u);
    EXPECT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
}

// curl in the sandbox: its exit code (and what it printed, for failures).
std::pair<int, std::string> curl_in(Server& s, const std::string& id, const std::string& args) {
    std::string out =
        run(s, id, "curl -sS -k --max-time 10 " + args + " 2>&1; rc=$?; echo; echo exit=$rc");
    auto at = out.rfind("exit=");
    return {at == std::string::npos ? -1 : std::stoi(out.substr(at + 5)), out};
}

// The network of a microVM is the same policy path as a container's, on a tap of its own
// router: the allow list holds, the host (QEMU user networking's 10.0.2.2 was the way in) is
// out of reach, the network comes back after a snapshot restore and in template copies, and
// exposed ports reach the guest.
TEST(MicrovmApi, NetworkPolicyHoldsThroughSnapshotsAndTemplateCopies) {
    REQUIRE_MICROVM();
    TestInternet internet(
        std::map<std::string, std::string>{{"allowed.test", "web"}, {"other.test", "other"}});
    Server s({"--dns-upstream", internet.dns_address(), "--public-range", internet.web_address(),
              "--public-range", internet.other_address()});
    const json policy = {{"allow", {"allowed.test"}}};
    std::vector<std::string> ids;
    for (int i = 0; i < 2; ++i) {
        auto created = s.post("/v1/sandboxes", {{"runtime", "microvm"}, {"network", policy}});
        ASSERT_EQ(created.status, 201u) << created.body << s.log();
        ids.push_back(created.js()["id"]);
    }
    const std::string api = "http://10.0.2.2:" + std::to_string(s.port()) + "/v1/sandboxes";
    for (const auto& id : ids) {
        auto [ok, page] = curl_in(s, id, "http://allowed.test/");
        EXPECT_EQ(ok, 0) << page;
        EXPECT_NE(page.find("deskbox test host " + internet.web_address()), std::string::npos)
            << page;
        auto [api_rc, api_out] = curl_in(s, id, api);
        EXPECT_NE(api_rc, 0) << "the guest reached deskboxd's API: " << api_out;
        EXPECT_EQ(curl_in(s, id, "http://other.test/").first, 6);
        EXPECT_NE(curl_in(s, id, "http://" + internet.web_address() + "/").first, 0);
    }
    // Saved to disk and restored: a new tap, the same policy.
    const std::string base = "/v1/sandboxes/" + ids[0];
    ASSERT_EQ(s.post(base + "/pause", {{"snapshot", true}}).status, 200u);
    ASSERT_EQ(s.post(base + "/resume", json::object()).status, 200u);
    EXPECT_TRUE(
        eventually([&] { return curl_in(s, ids[0], "http://allowed.test/").first == 0; }, 60s));
    EXPECT_NE(curl_in(s, ids[0], api).first, 0);

    // An exposed port in the guest (python's server listens on every address).
    std::string control = s.get(base).js()["control_token"];
    start(s, ids[0], "cd /tmp && echo guest-page > index.html && python3 -m http.server 8000");
    ASSERT_TRUE(eventually(
        [&] {
            auto page = s.call(http::verb::get, base + "/ports/8000/index.html", {},
                               {{"Authorization", "Bearer " + control}});
            return page.status == 200u && page.body == "guest-page\n";
        },
        60s))
        << s.get(base).body;

    EXPECT_EQ(s.call(http::verb::get, base + "/ports/8000/index.html").status, 401u);
    auto view = s.call(http::verb::get, base + "/ports/8000/index.html?token=" +
                                            s.get(base).js()["view_token"].get<std::string>());
    EXPECT_EQ(view.status, 401u);

    auto held = namespaces_held_by(s.pid());
    EXPECT_EQ(held.size(), 2u) << "one router namespace per microVM";
    EXPECT_EQ(s.del("/v1/sandboxes/" + ids[0]).status, 200u);
    EXPECT_EQ(namespaces_held_by(s.pid()).size(), 1u) << s.get("/metrics").body;
    auto live = live_network_namespaces();
    std::size_t gone = 0;
    for (auto inode : held) gone += !live.count(inode);
    EXPECT_EQ(gone, 1u) << "the killed microVM's router namespace lives on";
}

// A deskboxd SIGKILLed with a networked microVM running: its QEMU holds the tap (and with it
// the router namespace) until the next deskboxd removes the leftover; then nothing is left.
TEST(MicrovmApi, NothingOfTheNetworkOutlivesAKilledServer) {
    REQUIRE_MICROVM();
    auto interfaces = host_interfaces();
    auto ruleset = host_nft_ruleset();
    TempDir state("deskbox-microvm-network-restart");
    std::set<ino_t> held;
    {
        Server s({}, state.path());
        auto created = s.post("/v1/sandboxes", {{"runtime", "microvm"}, {"network", true}});
        ASSERT_EQ(created.status, 201u) << created.body << s.log();
        held = namespaces_held_by(s.pid());
        ASSERT_EQ(held.size(), 1u);
        s.kill_hard();
    }
    {
        Server again({}, state.path());
        auto live = live_network_namespaces();
        for (auto inode : held) EXPECT_FALSE(live.count(inode)) << "router namespace " << inode;
        EXPECT_TRUE(run_process({"pgrep", "-f", "qemu-system-x86_64.*" + state.path().string()})
                        .out.empty());
    }
    EXPECT_EQ(host_interfaces(), interfaces);
    EXPECT_EQ(host_nft_ruleset(), ruleset);
}

TEST(MicrovmApi, NetworkFalseMeansNoNicAndNoPorts) {
    REQUIRE_MICROVM();
    Server s;
    auto created = s.post("/v1/sandboxes", {{"runtime", "microvm"}, {"network", false}});
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    std::string id = created.js()["id"];
    EXPECT_EQ(run(s, id, "ls /sys/class/net"), "lo\n");
    auto port =
        s.call(http::verb::get, "/v1/sandboxes/" + id + "/ports/8000/", {},
               {{"Authorization", "Bearer " + created.js()["control_token"].get<std::string>()}});
    EXPECT_EQ(port.status, 409u) << port.body;
    EXPECT_EQ(port.js()["error"]["code"], "port_unreachable");
    EXPECT_TRUE(namespaces_held_by(s.pid()).empty());
}

}  // namespace
}  // namespace deskbox
