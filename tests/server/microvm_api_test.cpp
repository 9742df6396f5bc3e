// deskboxd end to end with the microvm runtime: real QEMU (TCG here) booting the `minimal`
// template's image, through the same HTTP API as containers; snapshots (pause with
// "snapshot": true) that survive a server restart; creates restored from a template snapshot.
#include <algorithm>
#include <cstdlib>
#include <ctime>

#include <opencv2/imgcodecs.hpp>

#include "tests/server/deskboxd_fixture.hpp"
#include "tests/support/host_state.hpp"
#include "tests/support/test_internet.hpp"
#include "tests/support/test_paths.hpp"

namespace deskbox {
namespace {

using namespace test;

bool microvm_image_built() {
    auto image = run_process({"python3", deskbox::test_paths::source("images/build_microvm.py"),
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
        auto started =
            s.post(base + "/commands", {{"cmd",
                                         "i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; "
                                         "mv /tmp/count.new /tmp/count; sleep 0.2; "
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

// A named snapshot of a microVM is its memory and disk: sandboxes started from it, and the
// copies of a fork, go on with the source's running processes and windows, each with its own
// name, tokens and disk; a snapshot of such a sandbox stands alone (its base layers folded in),
// and deleting a snapshot leaves the sandboxes started from it whole.
TEST(MicrovmApi, NamedSnapshotsAndForksCarryRunningProcessesOn) {
    REQUIRE_MICROVM();
    Server s;
    auto created = s.post("/v1/sandboxes", {{"runtime", "microvm"}, {"timeout_s", 900}});
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    const std::string source = created.js()["id"];
    ASSERT_EQ(s.post("/v1/sandboxes/" + source + "/commands",
                     {{"cmd",
                       "i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new "
                       "/tmp/count; sleep 0.2; done"},
                      {"background", true}})
                  .status,
              200u);
    ASSERT_EQ(s.post("/v1/sandboxes/" + source + "/commands",
                     {{"cmd", "xterm -T carried-window -e sleep 100000"}, {"background", true}})
                  .status,
              200u);
    ASSERT_TRUE(eventually(
        [&] { return windows_of(s, source).find("carried-window") != std::string::npos; }, 120s));
    run(s, source, "echo on-disk > /home/user/disk.txt && sync");
    ASSERT_TRUE(eventually([&] { return counter(s, source) > 2; }, 60s));

    auto made = s.post("/v1/sandboxes/" + source + "/snapshots", {{"name", "vm-base"}});
    ASSERT_EQ(made.status, 201u) << made.body << s.log();
    const long at_snapshot = counter(s, source);
    EXPECT_EQ(made.js()["kind"], "memory");
    EXPECT_EQ(made.js()["runtime"], "microvm");
    EXPECT_GT(made.js()["size_bytes"].get<long long>(), 1 << 20);
    EXPECT_EQ(s.get("/v1/sandboxes/" + source).js()["state"], "running") << "the source goes on";
    EXPECT_TRUE(eventually([&] { return counter(s, source) > at_snapshot; }, 60s));

    auto from = s.post("/v1/sandboxes", {{"snapshot", "vm-base"}});
    ASSERT_EQ(from.status, 201u) << from.body << s.log();
    const std::string restored = from.js()["id"];
    EXPECT_EQ(from.js()["from_snapshot"], "vm-base");
    EXPECT_NE(from.js()["control_token"], created.js()["control_token"]);
    EXPECT_EQ(run(s, restored, "hostname"), restored + "\n");
    EXPECT_EQ(run(s, restored, "cat /home/user/disk.txt"), "on-disk\n");
    const long first = counter(s, restored);
    EXPECT_GT(first, 2) << "the counter started over";
    EXPECT_TRUE(eventually([&] { return counter(s, restored) > first; }, 60s)) << "not counting";
    EXPECT_NE(windows_of(s, restored).find("carried-window"), std::string::npos);
    // Apart from its source: its writes are its own.
    run(s, restored, "echo changed > /home/user/disk.txt && sync");
    EXPECT_EQ(run(s, source, "cat /home/user/disk.txt"), "on-disk\n");
    // A memory copy fixes the machine's size.
    auto resized =
        s.post("/v1/sandboxes", {{"snapshot", "vm-base"}, {"limits", {{"memory_mb", 1024}}}});
    EXPECT_EQ(resized.status, 400u) << resized.body;

    // A snapshot of the restored sandbox, and the first one deleted: what starts from the
    // second has both generations' writes and needs nothing of the first.
    ASSERT_EQ(s.post("/v1/sandboxes/" + restored + "/snapshots", {{"name", "vm-second"}}).status,
              201u);
    EXPECT_EQ(s.del("/v1/snapshots/vm-base").status, 200u);
    auto second = s.post("/v1/sandboxes", {{"snapshot", "vm-second"}});
    ASSERT_EQ(second.status, 201u) << second.body << s.log();
    const std::string grandchild = second.js()["id"];
    EXPECT_EQ(run(s, grandchild, "cat /home/user/disk.txt"), "changed\n");
    EXPECT_GT(counter(s, grandchild), first);
    // The restored sandbox still saves and resumes with its first snapshot gone.
    ASSERT_EQ(s.post("/v1/sandboxes/" + restored + "/pause", {{"snapshot", true}}).status, 200u);
    auto resumed = s.post("/v1/sandboxes/" + restored + "/resume", json::object());
    ASSERT_EQ(resumed.status, 200u) << resumed.body << s.log();
    EXPECT_EQ(run(s, restored, "cat /home/user/disk.txt"), "changed\n");
    for (const auto& id : {restored, grandchild})
        EXPECT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);

    // A fork: two copies of the running source at once.
    auto forked = s.post("/v1/sandboxes/" + source + "/fork", {{"count", 2}});
    ASSERT_EQ(forked.status, 201u) << forked.body << s.log();
    const json answer = forked.js();
    EXPECT_EQ(answer["kind"], "memory");
    ASSERT_EQ(answer["sandboxes"].size(), 2u);
    for (const auto& copy : answer["sandboxes"]) {
        const std::string id = copy["id"];
        EXPECT_EQ(run(s, id, "hostname"), id + "\n");
        EXPECT_GT(counter(s, id), at_snapshot);
        EXPECT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
        EXPECT_TRUE(no_qemu_for(id));
    }
    EXPECT_EQ(s.get("/v1/sandboxes/" + source).js()["state"], "running");
    EXPECT_EQ(s.del("/v1/sandboxes/" + source).status, 200u);
    EXPECT_EQ(s.del("/v1/snapshots/vm-second").status, 200u);
    EXPECT_TRUE(std::filesystem::is_empty(s.state() / "snapshots")) << "nothing left";
    EXPECT_TRUE(no_qemu_for(source));
}

// Saved to disk and restored twenty times, then paused by its timeout and woken by requests
// (auto_resume): every file written before each save (fsync'd or not) and the running counter
// come back each time.
TEST(MicrovmApi, RepeatedSavesAndTimeoutWakesLoseNothing) {
    REQUIRE_MICROVM();
    Server s;
    auto created = s.post("/v1/sandboxes",
                          {{"runtime", "microvm"}, {"timeout_s", 900}, {"auto_resume", true}});
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    const std::string id = created.js()["id"];
    const std::string base = "/v1/sandboxes/" + id;
    ASSERT_EQ(s.post(base + "/commands", {{"cmd",
                                           "i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; "
                                           "mv /tmp/count.new /tmp/count; sleep 0.2; done"},
                                          {"background", true}})
                  .status,
              200u);
    ASSERT_TRUE(eventually([&] { return counter(s, id) > 0; }, 60s));
    long last = 0;
    std::string sums;
    for (int cycle = 0; cycle < 20; ++cycle) {
        sums = write_cycle_files(s, id, cycle);
        auto paused = s.post(base + "/pause", {{"snapshot", true}});
        ASSERT_EQ(paused.status, 200u) << cycle << paused.body << s.log();
        auto resumed = s.post(base + "/resume", json::object());
        ASSERT_EQ(resumed.status, 200u) << cycle << resumed.body << s.log();
        EXPECT_EQ(cycle_sums(s, id), sums) << cycle;
        const long now = counter(s, id);
        EXPECT_GE(now, last) << "the counter went back at cycle " << cycle;
        last = now;
    }
    // The timeout saves it to disk; the next command restores it first.
    for (int wake = 0; wake < 2; ++wake) {
        ASSERT_EQ(s.post(base + "/timeout", {{"timeout_s", 1}}).status, 200u);
        // Paused at once, saved (the "snapshot" field) once the memory is on disk.
        json described;
        ASSERT_TRUE(eventually(
            [&] {
                described = s.get(base).js();
                return described["state"] == "paused" && described.contains("snapshot");
            },
            60s))
            << "a microVM's timeout saves it to disk: " << described.dump();
        EXPECT_EQ(described["paused_reason"], "timeout");
        EXPECT_TRUE(no_qemu_for(id));
        EXPECT_EQ(cycle_sums(s, id), sums) << wake;
        const long now = counter(s, id);
        EXPECT_GE(now, last) << wake;
        last = now;
    }
    EXPECT_EQ(s.del(base).status, 200u);
    EXPECT_TRUE(no_qemu_for(id));
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

std::size_t qemus_under(const std::filesystem::path& state) {
    std::string pids = run_process({"pgrep", "-f", "qemu-system-x86_64.*" + state.string()}).out;
    return static_cast<std::size_t>(std::count(pids.begin(), pids.end(), '\n'));
}

bool qemu_under(const std::filesystem::path& state) {
    return qemus_under(state) != 0;
}

TEST(MicrovmApi, PoolHandsOutReadySandboxesAndRefills) {
    REQUIRE_MICROVM();
    TempDir shared("deskboxd-pool");
    ::chmod(shared.path().c_str(), 0711);
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
        EXPECT_EQ(s.del("/v1/sandboxes/" + own.js()["id"].get<std::string>()).status, 200u);
        EXPECT_EQ(qemus_under(state), 2u) << "the handed-out one and the pool's";
        s.kill_hard();
        // The next server (without a pool) adopts the handed-out VM; the pool's, whose tokens
        // nobody holds, is removed.
        Server again({}, state);
        auto adopted = again.get("/v1/sandboxes/" + id);
        ASSERT_EQ(adopted.status, 200u) << adopted.body << again.log();
        EXPECT_EQ(adopted.js()["metadata"]["who"], "pool-test");
        EXPECT_NE(again.log().find("made for the pool and never handed out"), std::string::npos)
            << again.log();
        EXPECT_EQ(again.get("/v1/sandboxes").js()["sandboxes"].size(), 1u);
        EXPECT_EQ(qemus_under(state), 1u);
        EXPECT_EQ(again.del("/v1/sandboxes/" + id).status, 200u);
    }  // stopping the server ends what is left
    EXPECT_FALSE(qemu_under(state)) << "a pooled microVM outlived its server";
    std::size_t dirs = 0;
    for (auto& e : std::filesystem::directory_iterator(state / "sandboxes"))
        dirs += e.is_directory();
    EXPECT_EQ(dirs, 0u);
}

TEST(MicrovmApi, PoolOptionIsChecked) {
    for (std::string bad : {"minimal", "=2", "minimal=x", "minimal=-1", "minimal=65"}) {
        auto r = run_process({deskbox::test_paths::kDeskboxd, "--microvm-pool", bad},
                             std::chrono::seconds(20));
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

pid_t qemu_of(const std::filesystem::path& state, const std::string& id) {
    std::ifstream in(state / "sandboxes" / id / "qemu.pid");
    pid_t pid = -1;
    in >> pid;
    return pid;
}

// QEMU holds a tap device (a tun file whose fdinfo names an interface "tap...").
bool holds_a_tap(pid_t qemu) {
    std::error_code ec;
    for (const auto& fd :
         std::filesystem::directory_iterator("/proc/" + std::to_string(qemu) + "/fdinfo", ec)) {
        std::ifstream info(fd.path());
        std::string text((std::istreambuf_iterator<char>(info)), {});
        if (text.find("iff:\ttap") != std::string::npos) return true;
    }
    return false;
}

std::string file_text(const std::filesystem::path& file) {
    std::ifstream in(file);
    return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A deskboxd that crashes (SIGKILL) or is upgraded (SIGTERM, --on-exit keep) leaves its
// microVMs running; the next one adopts them: the same QEMU, tokens, desktop and processes,
// its agent and VNC again, and the router namespace QEMU's tap kept alive, with the policy
// still enforced. A paused VM comes back paused. Deleting it then leaves nothing.
TEST(MicrovmApi, RestartedServersAdoptRunningMicrovmsWithTheirNetwork) {
    REQUIRE_MICROVM();
    TestInternet internet(
        std::map<std::string, std::string>{{"allowed.test", "web"}, {"other.test", "other"}});
    const std::vector<std::string> args = {"--dns-upstream", internet.dns_address(),
                                           "--public-range", internet.web_address(),
                                           "--public-range", internet.other_address()};
    auto keep = args;
    keep.insert(keep.end(), {"--on-exit", "keep"});
    auto interfaces = host_interfaces();
    auto ruleset = host_nft_ruleset();
    TempDir shared("deskbox-microvm-adopt");
    ::chmod(shared.path().c_str(), 0711);
    const auto state = shared.path() / "state";
    std::string id;
    json before;
    pid_t qemu = -1;
    std::set<ino_t> routers;
    {
        Server first(keep, state);
        auto created = first.post("/v1/sandboxes", {{"runtime", "microvm"},
                                                    {"network", {{"allow", {"allowed.test"}}}},
                                                    {"timeout_s", 900}});
        ASSERT_EQ(created.status, 201u) << created.body << first.log();
        before = created.js();
        id = before["id"];
        EXPECT_EQ(run(first, id, "echo kept > /tmp/mark"), "");
        start(first, id, "sleep 100000");
        ASSERT_TRUE(eventually([&] { return !run(first, id, "pgrep -x sleep").empty(); }, 30s));
        qemu = qemu_of(state, id);
        ASSERT_GT(qemu, 0);
        ASSERT_TRUE(holds_a_tap(qemu)) << "QEMU has no tap";
        routers = namespaces_held_by(first.pid());
        ASSERT_EQ(routers.size(), 1u);
        first.kill_hard();  // a crash: nothing is told
    }
    const std::string base = "/v1/sandboxes/" + id;
    const std::string sleeper = [&] {
        Server second(keep, state);
        EXPECT_NE(second.log().find("adopted running sandbox " + id), std::string::npos)
            << second.log();
        auto got = second.get(base);
        EXPECT_EQ(got.status, 200u) << got.body << second.log();
        EXPECT_EQ(got.js()["state"], "running") << got.body;
        EXPECT_EQ(got.js()["control_token"], before["control_token"]);
        EXPECT_EQ(got.js()["expires_at"], before["expires_at"]);
        EXPECT_TRUE(got.js().contains("vnc")) << got.body;
        EXPECT_EQ(qemu_of(state, id), qemu) << "the same VM, not a new one";
        EXPECT_EQ(run(second, id, "cat /tmp/mark"), "kept\n");
        std::string pids = run(second, id, "pgrep -x sleep");
        EXPECT_FALSE(pids.empty());
        EXPECT_EQ(namespaces_held_by(second.pid()), routers) << "the router QEMU's tap kept";
        auto [ok, page] = curl_in(second, id, "http://allowed.test/");
        EXPECT_EQ(ok, 0) << page << second.log();
        EXPECT_EQ(curl_in(second, id, "http://other.test/").first, 6) << "the policy holds";
        auto shot = second.get(base + "/screenshot?format=png");
        EXPECT_EQ(shot.status, 200u);
        EXPECT_EQ(shot.headers["Content-Type"], "image/png");
        EXPECT_EQ(second.post(base + "/pause", json::object()).status, 200u);
        return pids;
    }();  // SIGTERM with --on-exit keep: an upgrade, the VM paused
    EXPECT_FALSE(no_qemu_for(id)) << "QEMU did not outlive the upgrade";
    {
        Server third(args, state);  // --on-exit kill: what is left ends with it
        EXPECT_NE(third.log().find("adopted running sandbox " + id), std::string::npos)
            << third.log();
        EXPECT_EQ(qemu_of(state, id), qemu);
        EXPECT_EQ(third.get(base).js()["state"], "paused");
        ASSERT_EQ(third.post(base + "/resume", json::object()).status, 200u) << third.log();
        EXPECT_EQ(run(third, id, "pgrep -x sleep"), sleeper);
        EXPECT_EQ(curl_in(third, id, "http://allowed.test/").first, 0);
        // Saved and restored after an adoption: a new tap in the adopted router.
        ASSERT_EQ(third.post(base + "/pause", {{"snapshot", true}}).status, 200u) << third.log();
        ASSERT_EQ(third.post(base + "/resume", json::object()).status, 200u) << third.log();
        EXPECT_NE(qemu_of(state, id), qemu);
        EXPECT_TRUE(
            eventually([&] { return curl_in(third, id, "http://allowed.test/").first == 0; }, 60s));
        EXPECT_EQ(third.del(base).status, 200u);
        EXPECT_TRUE(no_qemu_for(id));
        EXPECT_TRUE(namespaces_held_by(third.pid(), state).empty());
        auto live = live_network_namespaces();
        for (auto inode : routers) EXPECT_FALSE(live.count(inode)) << "router " << inode;
        auto audit = file_text(state / "audit" / (id + ".jsonl"));
        EXPECT_NE(audit.find("\"kind\":\"adopt\""), std::string::npos) << audit;
    }
    EXPECT_FALSE(std::filesystem::exists(state / "sandboxes" / id));
    EXPECT_EQ(host_interfaces(), interfaces);
    EXPECT_EQ(host_nft_ruleset(), ruleset);
}

// A microVM that cannot be driven any more (here its QMP socket is gone) is not adopted: its
// QEMU is killed, its files removed, and its audit log says why.
TEST(MicrovmApi, AMicrovmThatCannotBeDrivenIsRemovedWithAnAuditLine) {
    REQUIRE_MICROVM();
    TempDir shared("deskbox-microvm-broken");
    ::chmod(shared.path().c_str(), 0711);
    const auto state = shared.path() / "state";
    std::string id;
    {
        Server first({}, state);
        auto created = first.post("/v1/sandboxes", {{"runtime", "microvm"}, {"network", true}});
        ASSERT_EQ(created.status, 201u) << created.body << first.log();
        id = created.js()["id"];
        first.kill_hard();
    }
    std::filesystem::remove(state / "sandboxes" / id / "qmp.sock");
    Server second({}, state);
    EXPECT_NE(second.log().find("cannot adopt microvm " + id), std::string::npos) << second.log();
    EXPECT_EQ(second.get("/v1/sandboxes/" + id).status, 404u);
    EXPECT_TRUE(no_qemu_for(id));
    EXPECT_FALSE(std::filesystem::exists(state / "sandboxes" / id));
    auto audit = file_text(state / "audit" / (id + ".jsonl"));
    EXPECT_NE(audit.find("\"kind\":\"cleanup\""), std::string::npos) << audit;
    EXPECT_NE(audit.find("qmp.sock"), std::string::npos) << audit;
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

// A volume in a microVM is a disk the VM has whole: what a container wrote is there, what the
// VM writes survives a save to disk and the VM, nobody else uses the volume meanwhile, a copy
// of the VM is refused, and afterwards the host mounts it again only if the server allows it
// (after e2fsck); a read-only disk cannot be written.
TEST(MicrovmApi, AVolumeIsADiskTheMicrovmHasWhole) {
    REQUIRE_MICROVM();
    TempDir state("deskboxd-microvm-volumes");
    auto volume = [](bool read_only) {
        return json::array({{{"name", "vmdata"}, {"path", "/data"}, {"read_only", read_only}}});
    };
    auto code_of = [](const Answer& a) { return a.js()["error"].value("code", ""); };
    {
        Server s({}, state.path());
        ASSERT_EQ(s.post("/v1/volumes", {{"name", "vmdata"}, {"size_mb", 64}}).status, 201u);
        auto container = s.post("/v1/sandboxes", {{"volumes", volume(false)}, {"ready", false}});
        ASSERT_EQ(container.status, 201u) << container.body;
        const std::string cid = container.js()["id"];
        run(s, cid, "echo from-container > /data/a");
        ASSERT_EQ(s.del("/v1/sandboxes/" + cid).status, 200u);

        auto vm = s.post("/v1/sandboxes",
                         {{"runtime", "microvm"}, {"network", false}, {"volumes", volume(false)}});
        ASSERT_EQ(vm.status, 201u) << vm.body << s.log();
        const std::string id = vm.js()["id"];
        const std::string base = "/v1/sandboxes/" + id;
        EXPECT_EQ(run(s, id, "cat /data/a"), "from-container\n");
        EXPECT_EQ(run(s, id, "echo from-vm > /data/b && sync && stat -c %U /data/b"), "user\n");
        // Nobody else meanwhile, and no copy of a VM that has it mounted.
        auto other = s.post("/v1/sandboxes", {{"volumes", volume(true)}, {"ready", false}});
        EXPECT_EQ(other.status, 409u) << other.body;
        EXPECT_EQ(code_of(other), "volume_in_use");
        EXPECT_NE(other.body.find(id), std::string::npos) << other.body;
        const json info = s.get("/v1/volumes/vmdata").js();
        ASSERT_EQ(info["mounts"].size(), 1u) << info.dump();
        EXPECT_EQ(info["mounts"][0]["as_disk"], true);
        auto fork = s.post(base + "/fork", {{"count", 1}});
        EXPECT_EQ(fork.status, 409u) << fork.body;
        EXPECT_EQ(code_of(fork), "volumes_attached");
        // Saved to disk and restored: the disk is there again.
        ASSERT_EQ(s.post(base + "/pause", {{"snapshot", true}}).status, 200u) << s.log();
        ASSERT_EQ(s.post(base + "/resume", json::object()).status, 200u) << s.log();
        EXPECT_EQ(run(s, id, "cat /data/b && echo after-resume > /data/c && sync"), "from-vm\n");
        ASSERT_EQ(s.del(base).status, 200u);
        EXPECT_TRUE(no_qemu_for(id));

        // By default the host does not mount what a guest wrote: microVMs only.
        auto refused = s.post("/v1/sandboxes", {{"volumes", volume(false)}, {"ready", false}});
        EXPECT_EQ(refused.status, 409u) << refused.body;
        EXPECT_EQ(code_of(refused), "volume_guest_written");
        EXPECT_EQ(s.get("/v1/volumes/vmdata/files?path=/b").status, 409u);
        auto reader =
            s.post("/v1/sandboxes",
                   {{"runtime", "microvm"}, {"network", false}, {"volumes", volume(true)}});
        ASSERT_EQ(reader.status, 201u) << reader.body << s.log();
        const std::string rid = reader.js()["id"];
        EXPECT_EQ(run(s, rid, "cat /data/b /data/c"), "from-vm\nafter-resume\n");
        EXPECT_EQ(run(s, rid, "touch /data/x 2>/dev/null || echo refused"), "refused\n");
        ASSERT_EQ(s.del("/v1/sandboxes/" + rid).status, 200u);
        EXPECT_TRUE(s.get("/v1/sandboxes").js()["sandboxes"].empty());
    }
    // A server that allows it mounts the volume on the host again, once e2fsck passes.
    Server s({"--mount-guest-written-volumes", "true"}, state.path());
    auto files = s.get("/v1/volumes/vmdata/files?path=/c");
    EXPECT_EQ(files.status, 200u) << files.body;
    EXPECT_EQ(files.body, "after-resume\n");
    EXPECT_EQ(s.del("/v1/volumes/vmdata").status, 200u);
}

}  // namespace
}  // namespace deskbox
