// The escape and abuse suite: what a hostile or broken program inside a sandbox tries, each
// against a real deskboxd and real runc containers of the `minimal` template. Every test
// checks the harm is contained and that the victim sandbox, a bystander sandbox and deskboxd
// still answer afterwards.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/server/deskboxd_fixture.hpp"

namespace deskbox {
namespace {

using namespace test;

class Abuse : public ::testing::Test {
  protected:
    void SetUp() override {
        REQUIRE_TEMPLATE();
        server_ = std::make_unique<Server>();
        victim_ = create({{"limits", {{"pids", 96}, {"memory_mb", 256}, {"disk_mb", 128}}}});
        bystander_ = create(json::object());
        ASSERT_FALSE(victim_.empty() || bystander_.empty());
    }
    std::string create(json body) {
        body["template"] = "minimal";
        auto a = s().post("/v1/sandboxes", body);
        EXPECT_EQ(a.status, 201u) << a.body << s().log();
        return a.js().value("id", "");
    }
    Server& s() { return *server_; }
    Answer command(const std::string& id, const std::string& cmd, double timeout_s = 30) {
        return s().post("/v1/sandboxes/" + id + "/commands",
                        {{"cmd", cmd}, {"timeout_s", timeout_s}});
    }
    // The sandbox answers a command, a screenshot and an action; deskboxd its health check.
    void expect_answering(const std::string& id) {
        auto echo = command(id, "echo alive");
        EXPECT_EQ(echo.status, 200u) << echo.body;
        EXPECT_EQ(echo.js().value("stdout", ""), "alive\n") << echo.body;
        auto shot = s().get("/v1/sandboxes/" + id + "/screenshot");
        EXPECT_EQ(shot.status, 200u) << shot.body;
        auto move =
            s().post("/v1/sandboxes/" + id + "/actions", {{"type", "move"}, {"x", 10}, {"y", 10}});
        EXPECT_EQ(move.status, 200u) << move.body;
        EXPECT_EQ(s().get("/healthz").status, 200u);
    }
    void expect_everyone_answering() {
        expect_answering(victim_);
        expect_answering(bystander_);
    }

    std::unique_ptr<Server> server_;
    std::string victim_, bystander_;
};

TEST_F(Abuse, ForkBombMeetsTheProcessLimitAndProcessesKillBringsTheSandboxBack) {
    // Each copy waits for its children, and bash retries a failed fork (dash gives up and
    // exits, and the bomb collapses), so it holds every slot it gets.
    auto bomb = s().post(
        "/v1/sandboxes/" + victim_ + "/commands",
        {{"argv", {"bash", "-c", "bomb() { bomb & bomb & wait; }; bomb"}}, {"background", true}});
    ASSERT_EQ(bomb.status, 200u) << bomb.body;
    // Commands cannot start once the bomb fills limits.pids: a clear 409 naming it.
    Answer refused;
    EXPECT_TRUE(eventually([&] {
        refused = command(victim_, "true", 5);
        return refused.status == 409u;
    })) << refused.status
        << " " << refused.body;
    EXPECT_EQ(refused.js()["error"]["code"], "sandbox_exhausted") << refused.body;
    EXPECT_EQ(refused.js()["error"]["field"], "limits.pids") << refused.body;
    EXPECT_NE(refused.js()["error"]["message"].get<std::string>().find("processes/kill"),
              std::string::npos);
    // The desktop still shows; the bystander does not notice.
    EXPECT_EQ(s().get("/v1/sandboxes/" + victim_ + "/screenshot").status, 200u);
    expect_answering(bystander_);

    // The bomb holds nearly every slot (the agent's few threads and the session the rest).
    auto before = s().get("/v1/sandboxes/" + victim_).js();
    EXPECT_GE(before["usage"].value("pids", 0), 90) << before.dump();
    auto killed = s().post("/v1/sandboxes/" + victim_ + "/processes/kill", json::object());
    ASSERT_EQ(killed.status, 200u) << killed.body;
    EXPECT_GT(killed.js().value("killed", 0), 20) << killed.body << " before: " << before.dump();
    expect_everyone_answering();
    // Nothing of the bomb is left: only the session's own processes run.
    auto ps = command(victim_, "ps -e -o comm= | grep -c '^bash$' || true");
    EXPECT_EQ(ps.js().value("stdout", ""), "0\n") << ps.body;
    auto inspect = s().get("/v1/sandboxes/" + victim_).js();
    EXPECT_LT(inspect["usage"].value("pids", 1000), 90) << inspect.dump();
}

TEST_F(Abuse, MemoryBombIsKilledByTheMemoryLimitAndTheSandboxGoesOn) {
    // tail keeps everything until a newline that never comes: it grows until the limit.
    auto bomb = command(victim_, "head -c 2000000000 /dev/zero | tail; echo exit=$?", 60);
    ASSERT_EQ(bomb.status, 200u) << bomb.body;
    EXPECT_NE(bomb.js().value("stdout", "").find("exit=137"), std::string::npos) << bomb.body;
    auto inspect = s().get("/v1/sandboxes/" + victim_).js();
    EXPECT_GE(inspect["usage"].value("oom_kills", 0), 1) << inspect.dump();
    expect_everyone_answering();
}

// Issue 26 item 7: /tmp and /dev/shm are charged to the memory cgroup; filled to their caps
// and followed by a memory bomb, they must leave the desktop (Xvfb, agent) alive.
TEST_F(Abuse, FillingTmpAndShmThenAMemoryBombLeavesTheDesktopAlive) {
    auto fill = command(victim_,
                        "dd if=/dev/zero of=/tmp/fill bs=1M count=100000 2>/dev/null; "
                        "dd if=/dev/zero of=/dev/shm/fill bs=1M count=100000 2>/dev/null; "
                        "head -c 2000000000 /dev/zero | tail; echo done",
                        120);
    ASSERT_EQ(fill.status, 200u) << fill.body;
    expect_everyone_answering();
    EXPECT_EQ(s().get("/v1/sandboxes/" + victim_ + "/screenshot").status, 200u);
    auto inspect = s().get("/v1/sandboxes/" + victim_).js();
    EXPECT_NE(inspect.value("state", ""), "error") << inspect.dump();
    EXPECT_EQ(command(victim_, "rm /tmp/fill /dev/shm/fill && echo gone").js().value("stdout", ""),
              "gone\n");
}

TEST_F(Abuse, FillingTheDiskGivesEnospcInsideAndTouchesNothingElse) {
    auto fill = command(victim_, "dd if=/dev/zero of=$HOME/fill bs=1M count=400 2>&1; df -m /", 60);
    ASSERT_EQ(fill.status, 200u) << fill.body;
    EXPECT_NE(fill.js().value("stdout", "").find("No space left on device"), std::string::npos)
        << fill.body;
    auto inspect = s().get("/v1/sandboxes/" + victim_).js();
    EXPECT_GE(inspect["usage"].value("disk_mb", 0), 100) << inspect.dump();
    auto metrics = s().get("/metrics").body;
    EXPECT_NE(metrics.find("deskbox_sandbox_disk_bytes{sandbox=\"" + victim_ + "\"}"),
              std::string::npos);
    // Full, and still answering (the agent writes nothing to the disk to do so).
    expect_everyone_answering();
    EXPECT_EQ(command(victim_, "rm $HOME/fill && echo gone").js().value("stdout", ""), "gone\n");
}

TEST_F(Abuse, NestedUserNamespacesAreRefused) {
    auto a = command(victim_, "unshare -Ur id 2>&1; echo exit=$?");
    ASSERT_EQ(a.status, 200u) << a.body;
    auto out = a.js().value("stdout", "");
    EXPECT_NE(out.find("Operation not permitted"), std::string::npos) << out;
    EXPECT_EQ(out.find("uid=0"), std::string::npos) << out;
    expect_everyone_answering();
}

// The guest's ids are a range of host ids of its own, which no host account uses: root inside
// is nobody outside, and two sandboxes are strangers to each other.
TEST_F(Abuse, EachSandboxIsNobodyOnTheHostInARangeOfItsOwn) {
    auto host_base = [&](const std::string& id) -> long long {
        auto a = command(id, "cat /proc/self/uid_map /proc/self/gid_map");
        std::istringstream in(a.js().value("stdout", ""));
        long long inside = -1, uid_base = -1, count = 0, gid_inside = -1, gid_base = -2;
        in >> inside >> uid_base >> count >> gid_inside >> gid_base;
        EXPECT_EQ(inside, 0) << a.body;
        EXPECT_EQ(count, 65536) << a.body;
        EXPECT_EQ(gid_base, uid_base) << a.body;
        EXPECT_GE(uid_base, 1ll << 30) << a.body;  // the default range starts at 2^30
        EXPECT_EQ((uid_base - (1ll << 30)) % 65536, 0) << a.body;
        return uid_base;
    };
    const long long victim_base = host_base(victim_), bystander_base = host_base(bystander_);
    EXPECT_NE(victim_base, bystander_base);
    // Inside, ids are the usual ones: the template's files are root's, commands run as user.
    auto ids = command(victim_, "id -u; stat -c %u:%g /usr/bin/env; echo mine > /home/user/mine");
    EXPECT_EQ(ids.js().value("stdout", ""), "1000\n0:0\n") << ids.body;
    // On the host, what the guest wrote belongs to the range's 1000, not to host uid 1000.
    struct stat st {};
    const auto written =
        s().state() / "sandboxes" / victim_ / "disk" / "upper" / "home" / "user" / "mine";
    ASSERT_EQ(::stat(written.c_str(), &st), 0) << written;
    EXPECT_EQ(st.st_uid, uid_t(victim_base + 1000));
    EXPECT_EQ(st.st_gid, gid_t(victim_base + 1000));
    expect_everyone_answering();
}

TEST_F(Abuse, SysAndProcSysAreReadOnly) {
    auto a = command(victim_,
                     "echo 1 > /proc/sys/kernel/sysrq 2>&1; echo sysctl=$?; "
                     "echo 1 > /sys/kernel/mm/ksm/run 2>&1; echo sys=$?; "
                     "echo c > /proc/sysrq-trigger 2>&1; echo sysrq=$?");
    ASSERT_EQ(a.status, 200u) << a.body;
    auto out = a.js().value("stdout", "");
    for (const char* line : {"sysctl=0", "sys=0", "sysrq=0"})
        EXPECT_EQ(out.find(line), std::string::npos) << line << " in " << out;
    expect_everyone_answering();
}

TEST_F(Abuse, TheHostApiAndOtherSandboxesAreOutOfReach) {
    // deskboxd listens on the host's loopback: the sandbox's loopback is its own.
    auto port = std::to_string(s().port());
    auto a = command(victim_, "curl -sS -m 3 http://127.0.0.1:" + port +
                                  "/healthz 2>&1; "
                                  "echo exit=$?");
    EXPECT_EQ(a.js().value("stdout", "").find("\"status\""), std::string::npos) << a.body;
    // Another sandbox's files, processes and X display are not visible.
    command(bystander_, "echo secret > /tmp/bystander-secret");
    auto look = command(victim_,
                        "ls /tmp/bystander-secret 2>&1; ls /tmp/.X11-unix; "
                        "ps -e -o pid= | wc -l");
    auto out = look.js().value("stdout", "");
    EXPECT_NE(out.find("No such file"), std::string::npos) << out;
    EXPECT_NE(out.find("X0"), std::string::npos) << out;  // its own display only
    expect_everyone_answering();
}

TEST_F(Abuse, TheAgentCannotBeTracedOrReadBySandboxPrograms) {
    // The agent runs as the sandbox user but is not dumpable: ptrace and /proc access
    // (PTRACE_MODE_READ) are refused to every other process of that user.
    auto a = command(victim_,
                     "for p in $(pgrep -x deskbox-agent); do "
                     "  cat /proc/$p/environ > /dev/null 2>&1 && echo readable=$p; "
                     "  ls /proc/$p/fd > /dev/null 2>&1 && echo fds=$p; "
                     "done; echo checked=$(pgrep -xc deskbox-agent)");
    ASSERT_EQ(a.status, 200u) << a.body;
    auto out = a.js().value("stdout", "");
    EXPECT_EQ(out.find("readable="), std::string::npos) << out;
    EXPECT_EQ(out.find("fds="), std::string::npos) << out;
    EXPECT_EQ(out.find("checked=0"), std::string::npos) << out;  // it looked at something
    expect_everyone_answering();
}

}  // namespace
}  // namespace deskbox
