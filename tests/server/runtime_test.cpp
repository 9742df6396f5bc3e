// The container runtime against real runc, overlayfs and cgroups (needs root).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include <sstream>

#include "server/runtime/container/cgroups.hpp"
#include "server/runtime/container/mounts.hpp"
#include "server/runtime/container/oci_bundle.hpp"
#include "server/runtime/container/runtime.hpp"
#include "server/runtime/runtime_util.hpp"
#include "tests/server/runtime_test_support.hpp"
#include "tests/support/fd_limit.hpp"
#include "tests/support/test_paths.hpp"

namespace deskbox::runtime {
namespace {

namespace fs = std::filesystem;
using deskbox::testing::eventually;
using deskbox::testing::read_file;
using namespace std::chrono_literals;

const fs::path kHelper = deskbox::test_paths::kRuntimeTestHelper;
const std::string kGuestHelper = "/opt/deskbox/bin/runtime_test_helper";

std::string trimmed(std::optional<std::string> s) {
    std::string v = s.value_or("<missing>");
    while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
    return v;
}

// check_tool: a host tool's failure (exit, signal, timeout) as a RuntimeError saying why.
std::string check_tool_error(const RunResult& result) {
    try {
        check_tool(result, "tool");
    } catch (const RuntimeError& e) {
        return e.what();
    }
    return "";
}

TEST(RuntimeUtil, CheckToolSaysWhyAToolFailed) {
    EXPECT_EQ(check_tool_error(run_process({"true"})), "");
    EXPECT_EQ(check_tool_error(run_process({"sh", "-c", "echo out; echo err >&2; exit 3"})),
              "tool failed: err\nout");
    EXPECT_EQ(check_tool_error(run_process({"sh", "-c", "kill -9 $$"})), "tool failed: ");
    RunResult late;
    late.timed_out = true;
    late.err = "partial";
    EXPECT_EQ(check_tool_error(late), "tool failed: timed out");
}

class ContainerRuntimeTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        rootfs_ = std::make_unique<deskbox::testing::TestRootfs>();
        agent_ = std::make_unique<deskbox::testing::TestAgentDir>(kHelper);
    }
    static void TearDownTestSuite() {
        agent_.reset();
        rootfs_.reset();
    }

    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "the container runtime needs root";
        options_.cgroup_parent = "deskbox-test-" + std::to_string(::getpid());
        runtime_ = std::make_unique<ContainerRuntime>(options_);
    }

    void TearDown() override {
        runtime_.reset();
        // Nothing of any test may survive it: no leftover under the state root, and the
        // per-process cgroup parent must be empty (rmdir fails otherwise).
        if (::geteuid() != 0) return;
        ContainerRuntime checker(options_);
        EXPECT_TRUE(checker.list_leftovers(state_.path()).empty());
        for (const auto& dir : existing_cgroup_dirs("/" + options_.cgroup_parent))
            EXPECT_EQ(::rmdir(dir.c_str()), 0) << dir << " not empty";
    }

    SandboxSpec spec(std::vector<std::string> entry) {
        SandboxSpec s;
        s.id = "t" + std::to_string(::getpid()) + "-" + std::to_string(++counter_);
        s.template_rootfs = rootfs_->path();
        s.agent_dir = agent_->path();
        s.entry = std::move(entry);
        s.state_root = state_.path();
        s.hostname = "box-" + std::to_string(counter_);
        s.limits = {256, 0.5, 128};
        return s;
    }
    static std::vector<std::string> sh(const std::string& script) {
        return {"/bin/sh", "-c", script};
    }
    // A file the entry wrote to its home, read on the host from the overlay upper dir.
    fs::path home_file(const ContainerSandbox& box, const std::string& name) {
        return box.paths().upper / "home/user" / name;
    }
    // Files the entry writes are moved into place whole (written to .tmp, then mv): a file
    // that exists has its content.
    bool wait_for_file(const fs::path& file) {
        return eventually([&] { return fs::exists(file); });
    }

    static inline std::unique_ptr<deskbox::testing::TestRootfs> rootfs_;
    static inline std::unique_ptr<deskbox::testing::TestAgentDir> agent_;
    TempDir state_{"deskbox-state"};
    ContainerRuntimeOptions options_;
    std::unique_ptr<ContainerRuntime> runtime_;
    int counter_ = 0;
};

TEST(ConsoleExcerpt, KeepsThePanicLineThatALongTraceWouldPushOut) {
    std::string console =
        "[ 1.0] booting\r\n[ 9.1] Kernel panic - not syncing: Attempted to kill "
        "init! exitcode=0x00008900\r\n";
    for (int i = 0; i < 60; ++i) console += "[ 9.2]  ? frame_" + std::to_string(i) + "+0x1/0x2\n";
    console += "[ 9.3] Kernel Offset: 0x1c00000\n\n";
    std::string excerpt = deskbox::runtime::console_excerpt(console, 40);
    EXPECT_EQ(excerpt.rfind("[ 9.1] Kernel panic - not syncing: Attempted to kill init! "
                            "exitcode=0x00008900\n[...]\n",
                            0),
              0u)
        << excerpt;
    EXPECT_EQ(excerpt.find('\r'), std::string::npos);
    EXPECT_NE(excerpt.find("Kernel Offset: 0x1c00000"), std::string::npos);
    EXPECT_EQ(excerpt.find("frame_20+"), std::string::npos) << "only the last 40 lines follow";
    EXPECT_NE(excerpt.find("frame_21+"), std::string::npos) << excerpt;
    // A tail that holds the panic line, or a console without one, is just the tail.
    std::string short_console = "a\nKernel panic - not syncing: x\nb\n";
    EXPECT_EQ(deskbox::runtime::console_excerpt(short_console, 40),
              "a\nKernel panic - not syncing: x\nb");
    EXPECT_EQ(deskbox::runtime::console_excerpt("one\ntwo\nthree\n", 2), "two\nthree");
}

TEST_F(ContainerRuntimeTest, EntryRunsIsolatedOnAnOverlay) {
    auto s =
        spec(sh("echo $$ > /home/user/pid; hostname > /home/user/hostname;"
                "ls /sys/class/net > /home/user/net; id -u > /home/user/uid;"
                "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):'"
                " /proc/self/status > /home/user/status;"
                "echo written > /home/user/done.tmp; mv /home/user/done.tmp /home/user/done;"
                " exec sleep 1000"));
    auto box = runtime_->start_container(s);
    ASSERT_TRUE(wait_for_file(home_file(*box, "done"))) << box->log_tail();

    // The write landed in this sandbox's upper dir, never in the shared template.
    EXPECT_EQ(trimmed(read_file(home_file(*box, "done"))), "written");
    EXPECT_FALSE(fs::exists(rootfs_->path() / "home/user/done"));
    EXPECT_EQ(trimmed(read_file(home_file(*box, "pid"))), "1");  // own PID namespace
    EXPECT_EQ(trimmed(read_file(home_file(*box, "hostname"))), s.hostname);
    EXPECT_EQ(trimmed(read_file(home_file(*box, "net"))), "lo");  // no network but loopback
    EXPECT_EQ(trimmed(read_file(home_file(*box, "uid"))), "1000");
    auto status = read_file(home_file(*box, "status")).value_or("");
    for (const char* cap : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"})
        EXPECT_NE(status.find(std::string(cap) + ":\t0000000000000000"), std::string::npos)
            << cap << " in\n"
            << status;
    EXPECT_NE(status.find("NoNewPrivs:\t1"), std::string::npos) << status;
    EXPECT_NE(status.find("Seccomp:\t2"), std::string::npos) << status;

    // PID 1 inside is the entry, and it is the pid runc reported: it execs into sleep right
    // after writing `done`, so wait for that.
    auto cmdline_path = "/proc/" + std::to_string(box->entry_pid()) + "/cmdline";
    EXPECT_TRUE(eventually([&] {
        return read_file(cmdline_path).value_or("").rfind(std::string("sleep\0", 6), 0) == 0;
    })) << read_file(cmdline_path).value_or("<gone>");
    EXPECT_TRUE(box->alive());
    EXPECT_EQ(box->state(), SandboxState::running);
    EXPECT_FALSE(box->exit_info().has_value());
}

TEST_F(ContainerRuntimeTest, CgroupLimitsComeFromTheSpec) {
    auto s = spec({"/bin/sleep", "1000"});
    s.limits = {300, 0.25, 77};
    auto box = runtime_->start_container(s);
    auto cgroup = box->cgroup_path();
    auto memory = controller_dir("memory", cgroup);
    auto pids = controller_dir("pids", cgroup);
    auto cpu = controller_dir("cpu", cgroup);
    ASSERT_TRUE(memory && pids && cpu);
    if (fs::exists(*memory / "memory.limit_in_bytes")) {  // cgroup v1
        EXPECT_EQ(read_first_line(*memory / "memory.limit_in_bytes"), std::to_string(300ull << 20));
        EXPECT_EQ(read_first_line(*cpu / "cpu.cfs_quota_us"), "25000");
        EXPECT_EQ(read_first_line(*cpu / "cpu.cfs_period_us"), "100000");
    } else {  // cgroup v2
        EXPECT_EQ(read_first_line(*memory / "memory.max"), std::to_string(300ull << 20));
        EXPECT_EQ(read_first_line(*cpu / "cpu.max"), "25000 100000");
    }
    EXPECT_EQ(read_first_line(*pids / "pids.max"), "77");
    auto procs = cgroup_procs(*pids);
    EXPECT_NE(std::find(procs.begin(), procs.end(), box->entry_pid()), procs.end());
}

TEST_F(ContainerRuntimeTest, SeccompDeniesDangerousCallsAndAgentDirIsReadOnly) {
    auto box = runtime_->start_container(
        spec(sh(kGuestHelper + " probe > /home/user/probe.tmp && "
                               "mv /home/user/probe.tmp /home/user/probe; exec sleep 1000")));
    ASSERT_TRUE(wait_for_file(home_file(*box, "probe"))) << box->log_tail();
    auto probe = read_file(home_file(*box, "probe")).value_or("");
    for (const char* denied :
         {"keyctl=EPERM", "add_key=EPERM", "bpf=EPERM", "perf_event_open=EPERM", "mount=EPERM",
          "setns=EPERM", "getpid=ok", "write_opt_deskbox=EROFS", "fork=ok", "clone_newuser=EPERM",
          "clone3=ENOSYS", "unshare_newuser=EPERM"})
        EXPECT_NE(probe.find(std::string(denied) + "\n"), std::string::npos) << denied << " in\n"
                                                                             << probe;
}

// A template may allow nested user namespaces (Chromium's own sandbox needs them); weaker,
// so only when its spec says so.
TEST_F(ContainerRuntimeTest, NestedUserNamespacesOnlyWhenTheSpecAllows) {
    auto s = spec(sh(kGuestHelper + " probe > /home/user/probe.tmp && "
                                    "mv /home/user/probe.tmp /home/user/probe; exec sleep 1000"));
    s.nested_user_namespaces = true;
    auto box = runtime_->start_container(s);
    ASSERT_TRUE(wait_for_file(home_file(*box, "probe"))) << box->log_tail();
    auto probe = read_file(home_file(*box, "probe")).value_or("");
    for (const char* line : {"fork=ok", "clone_newuser=ok", "clone3=ok", "unshare_newuser=ok",
                             "mount=EPERM", "keyctl=EPERM"})
        EXPECT_NE(probe.find(std::string(line) + "\n"), std::string::npos) << line << " in\n"
                                                                           << probe;
}

// Loop devices whose backing file lies under `dir` (one per mounted capped disk).
std::vector<std::string> loop_devices_under(const fs::path& dir) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/sys/block", ec)) {
        auto backing = read_file(e.path() / "loop" / "backing_file");
        if (backing && backing->rfind(dir.string(), 0) == 0) out.push_back(e.path().filename());
    }
    return out;
}

// The writable layer has a size: past it, writes are ENOSPC inside, df there shows the cap,
// the sandbox goes on, and the kill leaves no loop device behind.
TEST_F(ContainerRuntimeTest, WritesStopAtTheDiskLimitAndTheKillLeavesNoLoopDevice) {
    auto s =
        spec(sh("dd if=/dev/zero of=/home/user/big bs=1M count=200 2>/run/deskbox/dd.err; "
                "echo $? > /run/deskbox/dd.code; df -m / | tail -1 > /run/deskbox/df; "
                "rm /home/user/big; echo after > /home/user/after; "
                "touch /run/deskbox/done; exec sleep 1000"));
    s.limits.disk_mb = 64;
    auto box = runtime_->start_container(s);
    ASSERT_TRUE(wait_for_file(box->paths().run_dir / "done")) << box->log_tail();
    EXPECT_NE(trimmed(read_file(box->paths().run_dir / "dd.code")), "0");
    EXPECT_NE(read_file(box->paths().run_dir / "dd.err").value_or("").find("No space left"),
              std::string::npos);
    // "overlay  <size> <used> <avail> ..." in MiB: the cap, not the host's disk.
    std::istringstream df(read_file(box->paths().run_dir / "df").value_or(""));
    std::string device;
    long size_mb = -1;
    df >> device >> size_mb;
    EXPECT_GT(size_mb, 40);
    EXPECT_LE(size_mb, 64);
    EXPECT_EQ(trimmed(read_file(home_file(*box, "after"))), "after");
    auto usage = box->usage();
    ASSERT_TRUE(usage.disk_max_bytes && usage.disk_bytes);
    EXPECT_LE(*usage.disk_max_bytes, 64ull << 20);
    EXPECT_LT(*usage.disk_bytes, 16ull << 20);  // big is gone again
    EXPECT_TRUE(box->alive());
    EXPECT_EQ(loop_devices_under(state_.path()).size(), 1u);
    box->kill();
    // The kernel detaches an auto-clearing loop device from a work item after the unmount.
    EXPECT_TRUE(eventually([&] { return loop_devices_under(state_.path()).empty(); }));
}

// Out of fds (deskboxd under a connection flood), reading a sandbox's usage gives figures
// not known, never an exception (inspect answered 500 when mountinfo could not be opened); the
// figures are back once fds are.
TEST_F(ContainerRuntimeTest, UsageOutOfFdsIsUnknownNotAnErrorAndComesBack) {
    auto box = runtime_->start_container(spec(sh("exec sleep 1000")));
    ResourceUsage blind;
    {
        deskbox::test::FdLimit none(0);  // no new descriptor at all, before the first read
        EXPECT_NO_THROW(blind = box->usage());
    }
    EXPECT_FALSE(blind.pids);
    auto seen = box->usage();
    ASSERT_TRUE(seen.pids && seen.memory_bytes && seen.cpu_ns);
    EXPECT_GE(*seen.pids, 1u);
    {
        deskbox::test::FdLimit none(0);  // and after it (the cgroup's directories are known)
        EXPECT_NO_THROW(blind = box->usage());
    }
    EXPECT_FALSE(blind.memory_bytes);
    EXPECT_TRUE(box->usage().memory_bytes);
    box->kill();
}

TEST_F(ContainerRuntimeTest, PauseFreezesAndResumeContinues) {
    auto box =
        runtime_->start_container(spec(sh("i=0; while :; do i=$((i+1)); echo $i > /home/user/c.tmp;"
                                          " mv /home/user/c.tmp /home/user/counter; done")));
    auto counter = [&] {
        return std::stoll(read_file(home_file(*box, "counter")).value_or("0") + "0") / 10;
    };
    ASSERT_TRUE(eventually([&] { return counter() > 5; })) << box->log_tail();

    box->pause();
    EXPECT_EQ(box->state(), SandboxState::paused);
    auto freezer = controller_dir("freezer", box->cgroup_path());
    ASSERT_TRUE(freezer);
    EXPECT_EQ(read_first_line(*freezer / "freezer.state"), "FROZEN");
    long long frozen_at = counter();
    // Give a running loop ample opportunity to advance; a frozen one cannot.
    for (int i = 0; i < 20; ++i) {
        std::this_thread::sleep_for(10ms);
        EXPECT_EQ(counter(), frozen_at);
    }

    box->resume();
    EXPECT_EQ(box->state(), SandboxState::running);
    EXPECT_TRUE(eventually([&] { return counter() > frozen_at + 5; }));
}

TEST_F(ContainerRuntimeTest, KillLeavesNothingBehind) {
    auto s = spec(sh("sleep 1000 & sleep 1000 & echo up > /home/user/up; exec sleep 1000"));
    auto box = runtime_->start_container(s);
    ASSERT_TRUE(wait_for_file(home_file(*box, "up")));
    auto pids_dir = controller_dir("pids", box->cgroup_path());
    ASSERT_TRUE(pids_dir);
    std::vector<pid_t> pids;
    ASSERT_TRUE(eventually([&] { return (pids = cgroup_procs(*pids_dir)).size() >= 3; }));
    pid_t runc_pid = box->runc_pid();
    fs::path dir = box->paths().dir;

    box->kill();
    EXPECT_FALSE(box->alive());
    ASSERT_TRUE(box->exit_info());
    EXPECT_TRUE(box->exit_info()->requested);
    EXPECT_EQ(box->exit_info()->signal, SIGKILL);
    for (pid_t pid : pids) EXPECT_FALSE(fs::exists("/proc/" + std::to_string(pid))) << pid;
    EXPECT_FALSE(fs::exists("/proc/" + std::to_string(runc_pid)));  // reaped, no zombie
    EXPECT_TRUE(runtime_->residue(s.state_root, s.id).empty());
    EXPECT_TRUE(mounts_under(state_.path()).empty());
    EXPECT_TRUE(existing_cgroup_dirs(box->cgroup_path()).empty());
    EXPECT_FALSE(fs::exists(dir));
    EXPECT_NO_THROW(box->kill());  // idempotent
    EXPECT_THROW(box->pause(), RuntimeError);
}

TEST_F(ContainerRuntimeTest, TheSandboxOutlivesItsRuncMonitorAndStillDiesOnKill) {
    // The desktop is the entry's, not runc's: a crashed monitor must not turn a working sandbox
    // into an "exited" one, and the kill must still end every process and leave nothing.
    auto s = spec(sh("sleep 1000 & echo up > /home/user/up; exec sleep 1000"));
    auto box = runtime_->start_container(s);
    ASSERT_TRUE(wait_for_file(home_file(*box, "up")));
    auto pids_dir = controller_dir("pids", box->cgroup_path());
    ASSERT_TRUE(pids_dir);
    std::vector<pid_t> pids;
    ASSERT_TRUE(eventually([&] { return (pids = cgroup_procs(*pids_dir)).size() >= 2; }));
    const pid_t monitor = box->runc_pid();
    ASSERT_GT(monitor, 0);
    UniqueFd monitor_fd(pidfd_open(monitor));
    ASSERT_TRUE(monitor_fd.valid());
    ASSERT_EQ(::kill(monitor, SIGKILL), 0);
    ASSERT_TRUE(pidfd_wait_exit(monitor_fd.get(), 10s));

    EXPECT_TRUE(box->alive());
    EXPECT_EQ(box->state(), SandboxState::running);
    EXPECT_FALSE(box->exit_info());
    for (pid_t pid : pids) EXPECT_TRUE(fs::exists("/proc/" + std::to_string(pid))) << pid;

    box->kill();
    EXPECT_FALSE(box->alive());
    ASSERT_TRUE(box->exit_info());
    EXPECT_TRUE(box->exit_info()->requested);
    EXPECT_EQ(box->exit_info()->reason, "killed on request");
    for (pid_t pid : pids)
        EXPECT_TRUE(eventually([&] { return !fs::exists("/proc/" + std::to_string(pid)); })) << pid;
    EXPECT_TRUE(runtime_->residue(s.state_root, s.id).empty());
    EXPECT_TRUE(existing_cgroup_dirs(box->cgroup_path()).empty());
}

TEST_F(ContainerRuntimeTest, AReleasedSandboxRunsOnAndIsAdoptedByTheNextRuntime) {
    // A server that exits for an upgrade releases its sandboxes; the next one adopts them:
    // same processes, same agent socket, and its kill still leaves nothing.
    auto s = spec({kGuestHelper, "echo-server", "/run/deskbox/agent.sock"});
    auto box = runtime_->start_container(s);
    ASSERT_TRUE(box->connect_agent(20s).valid()) << box->log_tail();
    const pid_t entry = box->entry_pid();
    const pid_t monitor = box->runc_pid();
    ASSERT_TRUE(box->release());
    box.reset();  // must not kill it
    ASSERT_TRUE(fs::exists("/proc/" + std::to_string(entry)));

    ContainerRuntime next(options_);
    EXPECT_EQ(next.list_leftovers(s.state_root), std::vector<std::string>{s.id});
    std::unique_ptr<ContainerSandbox> adopted;
    ASSERT_NO_THROW(adopted = next.adopt(s));
    EXPECT_TRUE(next.list_leftovers(s.state_root).empty());  // live again
    EXPECT_THROW(next.adopt(s), RuntimeError);               // and only once
    EXPECT_EQ(adopted->entry_pid(), entry);
    EXPECT_TRUE(adopted->alive());
    EXPECT_EQ(adopted->state(), SandboxState::running);
    UniqueFd conn = adopted->connect_agent(20s);
    ASSERT_TRUE(conn.valid());
    const std::string message = "still here";
    ASSERT_TRUE(write_all(conn.get(), message.data(), message.size()));
    char buf[64];
    std::string echoed;
    while (echoed.size() < message.size()) {
        ssize_t n = ::read(conn.get(), buf, sizeof buf);
        ASSERT_GT(n, 0);
        echoed.append(buf, std::size_t(n));
    }
    EXPECT_EQ(echoed, message);
    conn.reset();

    adopted->pause();
    adopted.reset();  // not released: the adopted sandbox is killed like any other
    EXPECT_FALSE(fs::exists("/proc/" + std::to_string(entry)));
    EXPECT_TRUE(next.residue(s.state_root, s.id).empty());
    int status = 0;
    EXPECT_EQ(::waitpid(monitor, &status, 0), monitor);  // the monitor ended (it was our child)
    EXPECT_THROW(next.adopt(s), RuntimeError);           // nothing left to adopt
}

TEST_F(ContainerRuntimeTest, OnlyARunningSandboxOfItsOwnIsAdopted) {
    auto s = spec(sh("exec sleep 1000"));
    EXPECT_THROW(runtime_->adopt(s), RuntimeError);  // never started
    auto box = runtime_->start_container(s);
    EXPECT_THROW(runtime_->adopt(s), RuntimeError);  // live in this runtime
    auto other = spec(sh("exec sleep 1000"));
    other.id = s.id + "x";
    EXPECT_THROW(runtime_->adopt(other), RuntimeError);
    box->kill();
    EXPECT_THROW(runtime_->adopt(s), RuntimeError);  // ended
}

TEST_F(ContainerRuntimeTest, KillWhilePausedAndKeepState) {
    auto s =
        spec(sh("echo kept > /home/user/kept.tmp; mv /home/user/kept.tmp /home/user/kept; exec "
                "sleep 1000"));
    auto box = runtime_->start_container(s);
    ASSERT_TRUE(wait_for_file(home_file(*box, "kept")));
    box->pause();
    box->kill({.keep_state = true});
    // Processes, mounts and cgroups are gone; the writes stay for a post-mortem, in the
    // unmounted disk image (debugfs reads it without mounting).
    EXPECT_TRUE(existing_cgroup_dirs(box->cgroup_path()).empty());
    EXPECT_TRUE(mounts_under(state_.path()).empty());
    auto kept = run_process(
        {"debugfs", "-R", "cat /upper/home/user/kept", box->paths().disk_image.string()});
    EXPECT_EQ(kept.out, "kept\n") << kept.err;
    // A kept directory counts as a leftover for the next start of the server.
    auto leftovers = runtime_->list_leftovers(s.state_root);
    EXPECT_EQ(leftovers, std::vector<std::string>{s.id});
    runtime_->cleanup_leftover(s.state_root, s.id);
    EXPECT_FALSE(fs::exists(box->paths().dir));
}

TEST_F(ContainerRuntimeTest, DestroyingTheInstanceTearsDown) {
    auto s = spec({"/bin/sleep", "1000"});
    pid_t entry;
    {
        auto box = runtime_->start(s);  // through the generic interface
        entry = static_cast<ContainerSandbox&>(*box).entry_pid();
        EXPECT_TRUE(box->alive());
    }
    EXPECT_FALSE(fs::exists("/proc/" + std::to_string(entry)));
    EXPECT_TRUE(runtime_->residue(s.state_root, s.id).empty());
}

TEST_F(ContainerRuntimeTest, EntryExitIsReportedWithItsCodeAndLog) {
    auto box = runtime_->start_container(spec(sh("echo to-stdout; echo to-stderr >&2; exit 3")));
    ASSERT_TRUE(eventually([&] { return !box->alive(); }));
    auto info = box->exit_info();
    ASSERT_TRUE(info);
    EXPECT_EQ(info->exit_code, 3);
    EXPECT_FALSE(info->requested);
    EXPECT_EQ(info->reason, "exited with code 3");
    EXPECT_EQ(box->state(), SandboxState::exited);
    auto log = box->log_tail();
    EXPECT_NE(log.find("to-stdout"), std::string::npos) << log;
    EXPECT_NE(log.find("to-stderr"), std::string::npos) << log;
    EXPECT_THROW(box->pause(), RuntimeError);
    box->kill();
    EXPECT_FALSE(box->exit_info()->requested);  // it ended on its own before the kill
    EXPECT_NE(box->log_tail().find("to-stdout"), std::string::npos);  // kept after teardown
}

TEST_F(ContainerRuntimeTest, AgentChannelWorksEndToEnd) {
    // A state root deeper than sun_path allows: the host must still reach the socket.
    fs::path deep = state_.path() / std::string(60, 'd') / std::string(60, 'e');
    fs::create_directories(deep);
    auto s = spec({kGuestHelper, "echo-server", "/run/deskbox/agent.sock"});
    s.state_root = deep;
    auto box = runtime_->start_container(s);
    ASSERT_GT(box->agent_socket_path().string().size(), 108u);
    UniqueFd conn = box->connect_agent(20s);
    ASSERT_TRUE(conn.valid()) << box->log_tail();
    EXPECT_TRUE(fs::is_socket(box->agent_socket_path()));
    const std::string message = "hello from the host";
    ASSERT_TRUE(write_all(conn.get(), message.data(), message.size()));
    std::string echoed;
    char buf[256];
    while (echoed.size() < message.size()) {
        ssize_t n = ::read(conn.get(), buf, sizeof buf);
        ASSERT_GT(n, 0);
        echoed.append(buf, static_cast<std::size_t>(n));
    }
    EXPECT_EQ(echoed, message);
    conn.reset();
    box->kill();
    EXPECT_TRUE(runtime_->residue(deep, s.id).empty());
}

TEST_F(ContainerRuntimeTest, ConnectAgentFailsFastWhenTheEntryDies) {
    auto box = runtime_->start_container(spec(sh("exit 7")));
    try {
        box->connect_agent(60s);
        FAIL() << "connected to a dead sandbox";
    } catch (const RuntimeError& e) {
        EXPECT_NE(std::string(e.what()).find("exited with code 7"), std::string::npos) << e.what();
    }
}

TEST_F(ContainerRuntimeTest, LeftoverOfACrashedServerIsFoundAndCleaned) {
    // The "server" is a forked child that starts a sandbox and is then SIGKILLed: no
    // destructor runs, runc keeps the container. We adopt the orphans to reap them later.
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    auto s = spec(sh("sleep 1000 & exec sleep 1000"));
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    pid_t server = ::fork();
    ASSERT_GE(server, 0);
    if (server == 0) {
        ::close(ready[0]);
        try {
            ContainerRuntime crashing(options_);
            auto box = crashing.start_container(s);
            char ok = 1;
            (void)!::write(ready[1], &ok, 1);
            while (true) ::pause();
        } catch (...) {
            ::_exit(1);
        }
    }
    ::close(ready[1]);
    char ok = 0;
    ASSERT_EQ(::read(ready[0], &ok, 1), 1) << "the crashing server could not start a sandbox";
    ::close(ready[0]);
    ::kill(server, SIGKILL);
    ASSERT_EQ(::waitpid(server, nullptr, 0), server);

    EXPECT_FALSE(runtime_->residue(s.state_root, s.id).empty());
    // Still running without its server (the background sleep may still be forking).
    auto pids_dir = controller_dir("pids", runtime_->cgroup_path(s.id));
    ASSERT_TRUE(pids_dir);
    std::vector<pid_t> procs;
    EXPECT_TRUE(eventually([&] { return (procs = cgroup_procs(*pids_dir)).size() >= 2; }));

    // A new server finds the sandbox and removes all of it.
    ContainerRuntime restarted(options_);
    EXPECT_EQ(restarted.list_leftovers(s.state_root), std::vector<std::string>{s.id});
    restarted.cleanup_leftover(s.state_root, s.id);
    EXPECT_TRUE(restarted.residue(s.state_root, s.id).empty());
    EXPECT_TRUE(restarted.list_leftovers(s.state_root).empty());
    for (pid_t pid : procs) EXPECT_FALSE(fs::exists("/proc/" + std::to_string(pid))) << pid;
    EXPECT_NO_THROW(restarted.cleanup_leftover(s.state_root, s.id));  // idempotent

    // Reap the orphaned runc monitor we adopted.
    EXPECT_TRUE(eventually([] { return ::waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD; }));
    ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST_F(ContainerRuntimeTest, LeftoverOfACrashDuringStartIsCleaned) {
    // Crash between mounting the overlay and running runc: a directory and a mount only.
    std::string id = "half-started-" + std::to_string(::getpid());
    ContainerPaths paths(state_.path(), id);
    for (const auto& dir : {paths.upper, paths.work, paths.rootfs}) fs::create_directories(dir);
    mount_overlay(rootfs_->path(), paths.upper, paths.work, paths.rootfs);
    ASSERT_EQ(mounts_under(paths.dir).size(), 1u);
    EXPECT_EQ(runtime_->list_leftovers(state_.path()), std::vector<std::string>{id});
    runtime_->cleanup_leftover(state_.path(), id);
    EXPECT_TRUE(mounts_under(state_.path()).empty());
    EXPECT_FALSE(fs::exists(paths.dir));
}

TEST_F(ContainerRuntimeTest, LiveSandboxesAreNotLeftovers) {
    auto s = spec({"/bin/sleep", "1000"});
    auto box = runtime_->start_container(s);
    EXPECT_TRUE(runtime_->list_leftovers(s.state_root).empty());
    EXPECT_THROW(runtime_->cleanup_leftover(s.state_root, s.id), RuntimeError);
    EXPECT_TRUE(box->alive());
    // ...but for another server process (a fresh runtime object) it would be one.
    ContainerRuntime other(options_);
    EXPECT_EQ(other.list_leftovers(s.state_root), std::vector<std::string>{s.id});
}

TEST_F(ContainerRuntimeTest, BadSpecsAreRejectedNamingTheField) {
    struct Case {
        const char* field;
        std::function<void(SandboxSpec&)> spoil;
    };
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<Case> cases = {
        {"id", [](SandboxSpec& s) { s.id = ""; }},
        {"id", [](SandboxSpec& s) { s.id = "../escape"; }},
        {"id", [](SandboxSpec& s) { s.id = std::string(65, 'a'); }},
        {"template_rootfs", [](SandboxSpec& s) { s.template_rootfs = "/nonexistent/rootfs"; }},
        {"template_rootfs", [](SandboxSpec& s) { s.template_rootfs = "/proc/sys"; }},
        {"agent_dir", [](SandboxSpec& s) { s.agent_dir = "/nonexistent/agent"; }},
        {"entry", [](SandboxSpec& s) { s.entry.clear(); }},
        {"env", [](SandboxSpec& s) { s.env["A=B"] = "x"; }},
        {"width", [](SandboxSpec& s) { s.width = 10; }},
        {"dpi", [](SandboxSpec& s) { s.dpi = 0; }},
        {"limits.memory_mb", [](SandboxSpec& s) { s.limits.memory_mb = 16; }},
        {"limits.cpus", [](SandboxSpec& s) { s.limits.cpus = 0; }},
        {"limits.cpus", [nan](SandboxSpec& s) { s.limits.cpus = nan; }},
        {"limits.cpus", [](SandboxSpec& s) { s.limits.cpus = -1; }},
        {"limits.pids", [](SandboxSpec& s) { s.limits.pids = 0; }},
        {"hostname", [](SandboxSpec& s) { s.hostname = "-bad"; }},
        {"hostname", [](SandboxSpec& s) { s.hostname = "has space"; }},
        {"network", [](SandboxSpec& s) { s.network = true; }},
        {"state_root", [](SandboxSpec& s) { s.state_root = "relative/dir"; }},
    };
    for (const auto& c : cases) {
        auto s = spec({"/bin/true"});
        c.spoil(s);
        try {
            runtime_->start(s);
            ADD_FAILURE() << "accepted a bad " << c.field;
        } catch (const SpecError& e) {
            EXPECT_EQ(e.field(), c.field) << e.what();
            EXPECT_NE(std::string(e.what()).find(c.field), std::string::npos) << e.what();
        }
    }
    EXPECT_FALSE(fs::exists(state_.path() / "sandboxes") &&
                 !fs::is_empty(state_.path() / "sandboxes"));
}

TEST_F(ContainerRuntimeTest, MissingRootfsMessageNamesThePath) {
    auto s = spec({"/bin/true"});
    s.template_rootfs = "/var/cache/deskbox/templates/nope/rootfs";
    try {
        runtime_->start(s);
        FAIL();
    } catch (const SpecError& e) {
        EXPECT_NE(std::string(e.what()).find("/var/cache/deskbox/templates/nope/rootfs"),
                  std::string::npos);
        EXPECT_NE(std::string(e.what()).find("not a directory"), std::string::npos);
    }
}

TEST_F(ContainerRuntimeTest, RuncFailureCarriesRuncsMessageAndLeavesNothing) {
    auto s = spec({"/no/such/program"});
    try {
        runtime_->start(s);
        FAIL() << "started a missing program";
    } catch (const RuntimeError& e) {
        EXPECT_NE(std::string(e.what()).find("/no/such/program"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(runtime_->residue(s.state_root, s.id).empty());
}

TEST_F(ContainerRuntimeTest, MissingRuncIsAClearError) {
    auto options = options_;
    options.runc = "/nonexistent/runc";
    ContainerRuntime broken(options);
    auto s = spec({"/bin/true"});
    try {
        broken.start(s);
        FAIL();
    } catch (const RuntimeError& e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent/runc"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(broken.residue(s.state_root, s.id).empty());
}

TEST_F(ContainerRuntimeTest, DuplicateIdIsRejectedAndTheFirstKeepsRunning) {
    auto s = spec({"/bin/sleep", "1000"});
    auto first = runtime_->start_container(s);
    try {
        runtime_->start(s);
        FAIL();
    } catch (const SpecError& e) {
        EXPECT_EQ(e.field(), "id");
    }
    EXPECT_TRUE(first->alive());
    EXPECT_TRUE(fs::exists(first->paths().rootfs / "bin"));  // still mounted
}

TEST_F(ContainerRuntimeTest, SpecEnvReachesTheEntryAndOverridesDefaults) {
    auto s =
        spec(sh("echo \"$GREETING|$DESKBOX_SCREEN|$DESKBOX_DPI|$HOME|$LANG\" > /home/user/env.tmp;"
                " mv /home/user/env.tmp /home/user/env; exec sleep 1000"));
    s.env = {{"GREETING", "hi there"}, {"LANG", "de_DE.UTF-8"}};
    s.width = 1024;
    s.height = 768;
    s.dpi = 120;
    auto box = runtime_->start_container(s);
    ASSERT_TRUE(wait_for_file(home_file(*box, "env")));
    EXPECT_EQ(trimmed(read_file(home_file(*box, "env"))),
              "hi there|1024x768|120|/home/user|de_DE.UTF-8");
}

// Volumes are bound last, in order, nosuid and nodev, read-only ones ro; their paths are the
// ones validate_spec allows.
TEST(OciConfig, BindsVolumesLastAndChecksTheirPaths) {
    SandboxSpec s;
    s.id = "vol";
    s.entry = {"/bin/true"};
    s.volumes = {{"/host/a", "/data", false}, {"/host/b", "/mnt/ref", true}};
    BundleLayout layout;
    layout.rootfs = "/x/rootfs";
    layout.run_dir = "/x/run";
    layout.cgroup_path = "/deskbox/vol";
    layout.volume_sources = {"/state/v/0", "/state/v/1"};
    auto config = make_oci_config(s, layout);
    const auto& mounts = config["mounts"];
    ASSERT_GE(mounts.size(), 2u);
    const auto& first = mounts[mounts.size() - 2];
    const auto& second = mounts[mounts.size() - 1];
    EXPECT_EQ(first["destination"], "/data");
    EXPECT_EQ(first["source"], "/state/v/0");
    EXPECT_EQ(first["options"], nlohmann::json({"rbind", "rprivate", "nosuid", "nodev"}));
    EXPECT_EQ(second["destination"], "/mnt/ref");
    EXPECT_EQ(second["options"].back(), "ro");
    for (const char* good : {"/data", "/workspace/x", "/home/user", "/opt/app", "/srv/a.b-c"})
        EXPECT_EQ(volume_path_problem(good), "") << good;
    for (const char* bad :
         {"", "data", "/", "/opt", "/opt/deskbox", "/opt/deskbox/bin", "/etc", "/data/", "/data//x",
          "/data/./x", "/data/../etc", "/home/other", "/data/a,b", "/data/a:b", "/data/a b"})
        EXPECT_NE(volume_path_problem(bad), "") << bad;
    s.template_rootfs = "/x/template";
    s.state_root = "/x/state";
    EXPECT_NO_THROW(validate_spec(s));
    s.volumes.push_back({"/host/c", "/data", false});
    try {
        validate_spec(s);
        ADD_FAILURE() << "a path mounted twice passed";
    } catch (const SpecError& e) {
        EXPECT_EQ(e.field(), "volumes[2].path");
    }
}

TEST(OciConfig, HasNoCapabilitiesAndTheLimits) {
    SandboxSpec s;
    s.id = "cfg";
    s.entry = {"/opt/deskbox/bin/deskbox-agent", "--listen", "unix:/run/deskbox/agent.sock"};
    s.limits = {1024, 1.5, 500};
    BundleLayout layout;
    layout.rootfs = "/x/rootfs";
    layout.run_dir = "/x/run";
    layout.cgroup_path = "/deskbox/cfg";
    auto config = make_oci_config(s, layout);
    for (const char* set : {"bounding", "effective", "permitted", "inheritable", "ambient"})
        EXPECT_TRUE(config["process"]["capabilities"][set].empty()) << set;
    EXPECT_EQ(config["process"]["noNewPrivileges"], true);
    EXPECT_EQ(config["process"]["args"], s.entry);
    EXPECT_EQ(config["linux"]["resources"]["cpu"]["quota"], 150000);
    EXPECT_EQ(config["linux"]["resources"]["memory"]["limit"], 1024ll << 20);
    EXPECT_EQ(config["linux"]["resources"]["pids"]["limit"], 500);
    EXPECT_EQ(config["linux"]["cgroupsPath"], "/deskbox/cfg");
    auto denied = config["linux"]["seccomp"]["syscalls"][0]["names"];
    for (const char* call : {"keyctl", "mount", "bpf", "kexec_load", "init_module", "reboot"})
        EXPECT_NE(std::find(denied.begin(), denied.end(), call), denied.end()) << call;
    for (const char* call : {"unshare", "clone", "ptrace", "chroot"})
        EXPECT_EQ(std::find(denied.begin(), denied.end(), call), denied.end()) << call;
}

TEST(CgroupParent, DefaultStateRootIsDeskboxAndOthersGetAStableHash) {
    EXPECT_EQ(ContainerRuntime::cgroup_parent_for("/var/lib/deskbox"), "deskbox");
    // FNV-1a of the path: sandboxes of a restarted server are found under the same parent.
    EXPECT_EQ(ContainerRuntime::cgroup_parent_for("/tmp/deskbox-state-x"),
              "deskbox-a6356e927c3fc1b3");
}

}  // namespace
}  // namespace deskbox::runtime
