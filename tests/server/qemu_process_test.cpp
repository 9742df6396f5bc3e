// QemuProcess with a real process that is not our child (as an adopted QEMU is): `sleep`
// whose parent exited, so init, not this test, is its parent.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

#include "common/child_process.hpp"
#include "server/runtime/microvm/qemu_process.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {
namespace {

// `sleep 100` in a session of its own whose parent has exited (ChildProcess would kill its
// process group, and run_process reaps its children).
pid_t orphan_sleep() {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    const pid_t middle = ::fork();
    if (middle == 0) {
        ::setsid();
        const pid_t grandchild = ::fork();
        if (grandchild == 0) {
            ::close(fds[0]);
            ::close(fds[1]);
            ::execlp("sleep", "sleep", "100", static_cast<char*>(nullptr));
            ::_exit(127);
        }
        (void)!::write(fds[1], &grandchild, sizeof grandchild);
        ::_exit(0);
    }
    ::close(fds[1]);
    pid_t pid = -1;
    EXPECT_EQ(::read(fds[0], &pid, sizeof pid), static_cast<ssize_t>(sizeof pid));
    ::close(fds[0]);
    ::waitpid(middle, nullptr, 0);
    return pid;
}

TEST(QemuProcess, AnAdoptedProcessIsWatchedAndStoppedThroughItsPidfd) {
    const pid_t pid = orphan_sleep();
    auto process = QemuProcess::adopt(pid);
    EXPECT_TRUE(process.adopted());
    EXPECT_EQ(process.pid(), pid);
    EXPECT_TRUE(process.running());
    EXPECT_FALSE(process.wait(std::chrono::milliseconds(50))) << "it still runs";
    process.signal(SIGKILL);
    EXPECT_TRUE(process.wait(std::chrono::seconds(10)));
    EXPECT_FALSE(process.running());
    EXPECT_FALSE(process.status()) << "only a parent learns how a process ended";
    EXPECT_THROW(QemuProcess::adopt(pid), RuntimeError) << "a gone pid cannot be adopted";
}

TEST(QemuProcess, AReleasedProcessRunsOnAndAChildKeepsItsStatus) {
    const pid_t pid = orphan_sleep();
    {
        auto process = QemuProcess::adopt(pid);
        process.release();
        EXPECT_FALSE(process.adopted());
        EXPECT_FALSE(process.running());
    }
    EXPECT_EQ(::kill(pid, 0), 0) << "release must not stop it";
    ::kill(pid, SIGKILL);

    SpawnOptions options;
    options.argv = {"sh", "-c", "exit 3"};
    auto child = QemuProcess::spawn(options);
    EXPECT_FALSE(child.adopted());
    EXPECT_TRUE(child.wait(std::chrono::seconds(10)));
    ASSERT_TRUE(child.status());
    EXPECT_EQ(child.status()->exit_code, 3);
}

}  // namespace
}  // namespace deskbox::runtime
