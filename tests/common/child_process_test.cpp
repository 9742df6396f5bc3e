#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>

#include <gtest/gtest.h>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "tests/support/xvfb.hpp"

namespace deskbox {
namespace {

std::string read_all(int fd) {
    std::string out;
    char buf[256];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, n);
    return out;
}

TEST(ChildProcess, RunCollectsOutputAndExitCode) {
    auto r = run_process({"/bin/sh", "-c", "printf out; printf err >&2; exit 3"});
    EXPECT_EQ(r.out, "out");
    EXPECT_EQ(r.err, "err");
    EXPECT_EQ(r.status.exit_code, 3);
    EXPECT_FALSE(r.timed_out);
}

TEST(ChildProcess, StdinIsFed) {
    auto r = run_process({"cat"}, std::chrono::seconds(5), std::string(1 << 20, 'x'));
    EXPECT_EQ(r.out.size(), 1u << 20);
}

TEST(ChildProcess, MissingProgramThrows) {
    SpawnOptions o;
    o.argv = {"/nonexistent/program"};
    EXPECT_THROW(ChildProcess::spawn(o), std::system_error);
}

TEST(ChildProcess, TimeoutKillsWholeGroup) {
    TempDir dir;
    auto marker = dir.path() / "grandchild.pid";
    auto r = run_process({"/bin/sh", "-c", "sleep 30 & echo $! > " + marker.string() + "; wait"},
                         std::chrono::milliseconds(300));
    EXPECT_TRUE(r.timed_out);
    std::ifstream in(marker);
    pid_t grandchild = 0;
    in >> grandchild;
    ASSERT_GT(grandchild, 0);
    // The grandchild was in the group and got SIGKILL; it may linger briefly as a zombie of init.
    for (int i = 0; i < 100 && ::kill(grandchild, 0) == 0; ++i) ::usleep(10'000);
    std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
    std::string line;
    std::getline(stat, line);
    EXPECT_TRUE(line.empty() || line.find(") Z") != std::string::npos) << line;
}

TEST(ChildProcess, ParentDeathSignalEndsTheChildWhenItsSpawningThreadEnds) {
    ChildProcess child;
    std::thread([&] {
        SpawnOptions o;
        o.argv = {"sleep", "30"};
        o.parent_death_signal = SIGTERM;
        child = ChildProcess::spawn(o);
    }).join();
    auto status = child.wait(std::chrono::seconds(10));
    ASSERT_TRUE(status) << "the child outlived the thread that spawned it";
    EXPECT_EQ(status->signal, SIGTERM);
}

TEST(ChildProcess, DestructorKillsAndReaps) {
    pid_t pid;
    {
        SpawnOptions o;
        o.argv = {"sleep", "30"};
        auto child = ChildProcess::spawn(o);
        pid = child.pid();
        EXPECT_TRUE(child.running());
    }
    EXPECT_NE(::kill(pid, 0), 0);  // reaped: no such process
}

TEST(ChildProcess, OnlyTheFdsItIsGivenReachTheProgram) {
    // A descriptor opened without O_CLOEXEC (as Asio opens its listening socket) must not
    // live on in the child: runc and QEMU outlive a crashed server and would hold its port.
    UniqueFd leaked(::open("/dev/null", O_RDONLY));
    UniqueFd kept(::open("/dev/null", O_RDONLY));
    ASSERT_TRUE(leaked && kept);
    SpawnOptions o;
    o.argv = {"/bin/sh", "-c", "ls /proc/$$/fd"};
    o.keep_fds = {kept.get()};
    o.pipe_stdout = true;
    auto child = ChildProcess::spawn(o);
    const std::string out = read_all(child.stdout_fd().get());
    EXPECT_EQ(child.wait()->exit_code, 0);
    std::set<std::string> fds;
    std::istringstream lines(out);
    for (std::string fd; lines >> fd;) fds.insert(fd);
    EXPECT_EQ(fds.count(std::to_string(leaked.get())), 0u) << out;
    EXPECT_EQ(fds.count(std::to_string(kept.get())), 1u) << out;
    EXPECT_EQ(fds.count("0") + fds.count("1") + fds.count("2"), 3u) << out;
}

TEST(ChildProcess, EnvAndCwd) {
    TempDir dir;
    SpawnOptions o;
    o.argv = {"/bin/sh", "-c", "printf '%s:%s' \"$FOO\" \"$(pwd)\""};
    o.env = std::map<std::string, std::string>{{"PATH", "/usr/bin:/bin"}};
    o.env_overrides = {{"FOO", "bar baz"}};
    o.cwd = dir.path();
    o.pipe_stdout = true;
    auto child = ChildProcess::spawn(o);
    const std::string out = read_all(child.stdout_fd().get());
    EXPECT_EQ(child.wait()->exit_code, 0);
    EXPECT_EQ(out, "bar baz:" + std::filesystem::canonical(dir.path()).string());
}

std::string file_text(const std::filesystem::path& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ChildProcess, LogFilesAreAppendedToAndPrivate) {
    TempDir dir;
    SpawnOptions o;
    o.argv = {"/bin/sh", "-c", "printf out; printf err >&2"};
    o.stdout_file = (dir.path() / "out.log").string();
    o.stderr_file = (dir.path() / "err.log").string();
    for (int run = 0; run < 2; ++run) EXPECT_EQ(ChildProcess::spawn(o).wait()->exit_code, 0);
    EXPECT_EQ(file_text(o.stdout_file), "outout");
    EXPECT_EQ(file_text(o.stderr_file), "errerr");
    struct stat st {};
    ASSERT_EQ(::stat(o.stdout_file.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// What each of the child's standard descriptors is: a pipe before a log file before /dev/null;
// stdin is /dev/null unless piped.
TEST(ChildProcess, StdioGoesToThePipeElseTheFileElseDevNull) {
    TempDir dir;
    const auto links = dir.path() / "links";
    SpawnOptions o;
    o.argv = {"/bin/sh", "-c",
              "readlink /proc/$$/fd/0 /proc/$$/fd/2 > " + links.string() + "; printf piped"};
    o.pipe_stdout = true;
    o.stdout_file = (dir.path() / "unused.log").string();  // opened, but the pipe wins
    o.stderr_to_null = true;
    auto child = ChildProcess::spawn(o);
    EXPECT_EQ(read_all(child.stdout_fd().get()), "piped");
    EXPECT_EQ(child.wait()->exit_code, 0);
    EXPECT_EQ(file_text(links), "/dev/null\n/dev/null\n");
    EXPECT_EQ(file_text(o.stdout_file), "");
}

// A parent started with stdin, stdout and stderr closed hands out 0-2 for its pipes; the child's
// stdio must still be the right ones (each pipe end would otherwise be overwritten by another).
TEST(ChildProcess, StdioIsRightWhenTheParentHadItsOwnClosed) {
    TempDir dir;
    const auto log = dir.path() / "out.log";
    pid_t tester = ::fork();
    ASSERT_GE(tester, 0);
    if (tester == 0) {
        ::close(0);
        ::close(1);
        ::close(2);
        int code = 10;
        try {
            auto result = run_process({"/bin/sh", "-c", "cat; printf out; printf err >&2"},
                                      std::chrono::seconds(20), "in-");
            // A log file opened as fd 0: the child's stdin from /dev/null must not replace it.
            SpawnOptions o;
            o.argv = {"/bin/sh", "-c", "printf logged"};
            o.stdout_file = log.string();
            auto child = ChildProcess::spawn(o);
            const bool waited = child.wait().has_value();
            code = result.out == "in-out" && result.err == "err" && result.status.exit_code == 0
                       ? (waited ? 0 : 13)
                       : 11;
        } catch (...) {
            code = 12;
        }
        ::_exit(code);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(tester, &status, 0), tester);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "11: wrong output, 12: an exception";
    EXPECT_EQ(file_text(log), "logged");
}

TEST(TempDir, RemovedWithContents) {
    std::filesystem::path p;
    {
        TempDir dir;
        p = dir.path();
        std::ofstream(p / "f") << "x";
        std::filesystem::create_directory(p / "sub");
        EXPECT_TRUE(std::filesystem::exists(p / "f"));
    }
    EXPECT_FALSE(std::filesystem::exists(p));
}

using XvfbServerTest = testing::XvfbTest;

TEST_F(XvfbServerTest, StartsAtRequestedSize) {
    EXPECT_EQ(DisplayWidth(display(), DefaultScreen(display())), 1280);
    EXPECT_EQ(DisplayHeight(display(), DefaultScreen(display())), 800);
    EXPECT_TRUE(xvfb().running());
}

TEST(XvfbServer, TwoServersGetDifferentDisplaysAndStopCleanly) {
    pid_t pid;
    std::string log;
    {
        desktop::XvfbOptions small, larger;
        small.width = 640;
        small.height = 480;
        larger.width = 800;
        larger.height = 600;
        desktop::XvfbServer a(small);
        desktop::XvfbServer b(larger);
        EXPECT_NE(a.display_name(), b.display_name());
        auto d = b.connect();
        EXPECT_EQ(DisplayWidth(d.get(), 0), 800);
        pid = a.process().pid();
        log = a.log_file();
        EXPECT_TRUE(std::filesystem::exists(log));
    }
    EXPECT_NE(::kill(pid, 0), 0);
    EXPECT_FALSE(std::filesystem::exists(log));
}

TEST(XvfbServer, BadArgumentsReportXvfbError) {
    desktop::XvfbOptions o;
    o.extra_args = {"-this-flag-does-not-exist"};
    try {
        desktop::XvfbServer x(o);
        FAIL() << "Xvfb started with a bad flag";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("Xvfb did not start"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace deskbox
