// Per-sandbox user namespaces on the real kernel: the id-range check against account files,
// pinned namespaces (a user namespace with the range and a network namespace it owns) and an
// idmapped read-only mount. Needs root.
#include "server/runtime/container/user_namespace.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "common/temp_dir.hpp"
#include "server/runtime/container/mounts.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {
namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& path, const std::string& text) {
    std::ofstream(path) << text;
}

std::string read_line(const fs::path& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

TEST(HostIdRange, RefusesARangeThatAnAccountOrSubordinateRangeUses) {
    TempDir etc("deskbox-etc");
    write_file(etc.path() / "passwd", "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/h:/bin/sh\n");
    write_file(etc.path() / "group", "root:x:0:\n");
    EXPECT_EQ(host_id_range_problem({1u << 30, 16}, etc.path()), "");
    auto low = host_id_range_problem({1000, 1}, etc.path());
    EXPECT_NE(low.find("passwd:2"), std::string::npos) << low;
    // useradd gives people subordinate ranges from 100000: one ending inside ours is refused.
    write_file(etc.path() / "subuid", "alice:1073676288:65537\n");
    auto sub = host_id_range_problem({1u << 30, 16}, etc.path());
    EXPECT_NE(sub.find("subuid:1"), std::string::npos) << sub;
    EXPECT_NE(host_id_range_problem({0xFFFF0000u, 2}, etc.path()), "");
    EXPECT_NE(host_id_range_problem({1u << 30, 0}, etc.path()), "");
}

TEST(HostIdRange, TheDefaultRangeIsFreeOnThisHost) {
    EXPECT_EQ(host_id_range_problem(HostIdRange{}), "");
}

TEST(StateDirPath, OurDirsOpenForTraversalAndAClosedDirAboveIsNamed) {
    TempDir top("deskbox-closed");  // mkdtemp: 0700, as a home dir
    const fs::path state = top.path() / "state";
    try {
        open_the_way_to_sandboxes(state);
        ADD_FAILURE() << "a 0700 directory above the state dir was accepted";
    } catch (const RuntimeError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(top.path().string() + " (mode 0700)"), std::string::npos) << what;
        EXPECT_NE(what.find("--userns false"), std::string::npos) << what;
    }
    fs::permissions(top.path(), fs::perms::others_exec, fs::perm_options::add);
    fs::permissions(state, fs::perms::owner_all, fs::perm_options::replace);
    open_the_way_to_sandboxes(state);
    EXPECT_EQ(fs::status(state).permissions(), fs::perms(0701));
    EXPECT_EQ(fs::status(state / "sandboxes").permissions(), fs::perms(0711));  // none listed
}

class SandboxNamespacesTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    }
    TempDir dir_{"deskbox-userns"};
    HostIdSlots slots_{HostIdRange{1u << 30, 16}};
};

TEST(HostIdSlots, LeasesTheLowestFreeSlotAndGivesItBack) {
    HostIdSlots slots({1u << 30, 2});
    auto a = slots.acquire();
    EXPECT_EQ(a.host_base(), 1u << 30);
    {
        auto b = slots.acquire();
        EXPECT_EQ(b.host_base(), (1u << 30) + kIdsPerSandbox);
        EXPECT_THROW(slots.acquire(), RuntimeError);
        EXPECT_THROW(slots.claim(1u << 30), RuntimeError);  // a holds it
    }
    EXPECT_EQ(slots.acquire().host_base(), (1u << 30) + kIdsPerSandbox);       // b gave it back
    EXPECT_THROW(slots.claim((1u << 30) + 1), RuntimeError);                   // not a slot's base
    EXPECT_THROW(slots.claim((1u << 30) + 2 * kIdsPerSandbox), RuntimeError);  // past the end
    EXPECT_EQ(slots.claim((1u << 30) + kIdsPerSandbox).host_base(), (1u << 30) + kIdsPerSandbox);
}

TEST_F(SandboxNamespacesTest, PinsAUserNamespaceWithTheRangeAndANetworkNamespaceItOwns) {
    const std::uint32_t base = (1u << 30) + 5 * kIdsPerSandbox;
    {
        auto ns = SandboxNamespaces::create(dir_.path() / "ns", slots_.claim(base));
        // Both are mounted nsfs files; the maker process is gone.
        for (const auto& file : {ns.user_path(), ns.net_path()})
            EXPECT_FALSE(mounts_under(file).empty()) << file;
        auto reopened = SandboxNamespaces::open(dir_.path() / "ns", {});
        reopened.release();  // the first object owns the pins
        EXPECT_GE(ns.user_fd(), 0);

        // An idmapped view of a root-owned directory with a user's file in it.
        const fs::path source = dir_.path() / "source", view = dir_.path() / "view";
        fs::create_directories(source / "home");
        ASSERT_EQ(::chown((source / "home").c_str(), 1000, 1000), 0);
        fs::create_directories(view);
        mount_idmapped(source, view, ns.user_fd());
        struct stat st {};
        ASSERT_EQ(::stat(view.c_str(), &st), 0);
        EXPECT_EQ(st.st_uid, base);
        ASSERT_EQ(::stat((view / "home").c_str(), &st), 0);
        EXPECT_EQ(st.st_uid, base + 1000);
        EXPECT_EQ(st.st_gid, base + 1000);
        // Read-only: even root cannot write through it.
        EXPECT_FALSE(std::ofstream(view / "x").good());
        unmount_all(view);
    }
    // Nothing is left mounted, and the pin files are gone.
    EXPECT_TRUE(mounts_under(dir_.path()).empty());
    EXPECT_FALSE(fs::exists(dir_.path() / "ns" / "user"));
    EXPECT_FALSE(fs::exists(dir_.path() / "ns" / "net"));
}

TEST_F(SandboxNamespacesTest, ReleasedPinsOutliveTheObjectForTheNextServer) {
    {
        auto ns = SandboxNamespaces::create(dir_.path() / "ns", slots_.acquire());
        ns.release();
    }
    // The next server claims the range its record names.
    auto adopted = SandboxNamespaces::open(dir_.path() / "ns", slots_.claim(1u << 30));
    EXPECT_EQ(adopted.host_base(), 1u << 30);
    EXPECT_GE(adopted.user_fd(), 0);
    // A file that is not a pin (a crash between two steps) is refused by name.
    write_file(dir_.path() / "user", "");
    try {
        SandboxNamespaces::open(dir_.path(), {});
        ADD_FAILURE() << "an empty file was taken for a namespace";
    } catch (const RuntimeError& e) {
        EXPECT_NE(std::string(e.what()).find("not a pinned namespace"), std::string::npos);
    }
}

TEST_F(SandboxNamespacesTest, TheUidMapIsTheRange) {
    const std::uint32_t base = (1u << 30) + 9 * kIdsPerSandbox;
    auto ns = SandboxNamespaces::create(dir_.path() / "ns", slots_.claim(base));
    // A child joins the namespace and reports its own uid_map.
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    pid_t child = ::fork();
    if (child == 0) {
        if (::setns(ns.user_fd(), CLONE_NEWUSER) != 0) ::_exit(1);
        std::string map = read_line("/proc/self/uid_map");
        (void)!::write(pipe_fds[1], map.data(), map.size());
        ::_exit(0);
    }
    ::close(pipe_fds[1]);
    char buf[256] = {};
    auto n = ::read(pipe_fds[0], buf, sizeof buf - 1);
    ::close(pipe_fds[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_GT(n, 0);
    std::istringstream fields{std::string(buf)};
    std::uint64_t inside = 1, outside = 0, count = 0;
    fields >> inside >> outside >> count;
    EXPECT_EQ(inside, 0u);
    EXPECT_EQ(outside, base);
    EXPECT_EQ(count, kIdsPerSandbox);
}

}  // namespace
}  // namespace deskbox::runtime
