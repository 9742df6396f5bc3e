// The template engine's user namespace on the real kernel: the range as its ids, commands run as
// its root through enter_command(), mounts that stay inside it, network namespaces it owns, and
// nothing left once the object is gone. Needs root.
#include "server/runtime/container/pinned_user_namespace.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/nsfs.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "common/unique_fd.hpp"
#include "server/runtime/container/mounts.hpp"
#include "server/runtime/container/user_namespace.hpp"

namespace deskbox::runtime {
namespace {

namespace fs = std::filesystem;

// Far above the default --userns-range's slots that tests on this machine hand out.
constexpr std::uint32_t kBase = (1u << 30) + 4000 * kIdsPerSandbox;

std::string read_all(const fs::path& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

RunResult run_inside(const PinnedUserNamespace& ns, std::vector<std::string> command) {
    auto argv = ns.enter_command();
    argv.insert(argv.end(), command.begin(), command.end());
    return run_process(argv, std::chrono::seconds(30));
}

ino_t inode_of(int fd) {
    struct stat st {};
    return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}

class PinnedUserNamespaceTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "needs root";
        // The namespace's root walks into it, and writes in `home`.
        fs::permissions(dir_.path(), fs::perms::others_exec, fs::perm_options::add);
        fs::create_directories(home());
        ASSERT_EQ(::chown(home().c_str(), kBase, kBase), 0);
    }
    fs::path home() const { return dir_.path() / "home"; }
    TempDir dir_{"deskbox-pinned-userns"};
};

TEST_F(PinnedUserNamespaceTest, CommandsRunAsItsRootWhichIsTheRangeOnTheHost) {
    auto ns = PinnedUserNamespace::create(kBase);
    EXPECT_TRUE(ns.alive());
    auto who = run_inside(ns, {"sh", "-c", "id -u; id -g; cat /proc/self/uid_map"});
    ASSERT_EQ(who.status.exit_code, 0) << who.err;
    EXPECT_EQ(who.out, "0\n0\n         0 " + std::to_string(kBase) + "      65536\n");
    auto wrote = run_inside(
        ns, {"sh", "-c", "touch \"$0\"/file && chown 1000:1000 \"$0\"/file", home().string()});
    ASSERT_EQ(wrote.status.exit_code, 0) << wrote.err;
    struct stat st {};
    ASSERT_EQ(::stat((home() / "file").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, kBase + 1000);
    EXPECT_EQ(st.st_gid, kBase + 1000);
    // Host root's files are nobody's inside: its root cannot write them.
    std::ofstream(dir_.path() / "hosts") << "x\n";
    auto refused =
        run_inside(ns, {"sh", "-c", "echo y >> \"$0\"", (dir_.path() / "hosts").string()});
    EXPECT_NE(refused.status.exit_code, 0);
    EXPECT_EQ(read_all(dir_.path() / "hosts"), "x\n");
}

TEST_F(PinnedUserNamespaceTest, MountsStayInsideAndTheHostSeesThemThroughTheHolder) {
    auto ns = PinnedUserNamespace::create(kBase);
    const fs::path point = home() / "mnt";
    fs::create_directories(point);
    ASSERT_EQ(::chown(point.c_str(), kBase, kBase), 0);
    auto mounted = run_inside(
        ns,
        {"sh", "-c", "mount -t tmpfs none \"$0\" && echo hello > \"$0\"/greeting", point.string()});
    ASSERT_EQ(mounted.status.exit_code, 0) << mounted.err;
    EXPECT_TRUE(mounts_under(dir_.path()).empty()) << "a mount reached the host's namespace";
    EXPECT_FALSE(fs::exists(point / "greeting"));
    EXPECT_EQ(read_all(ns.host_view(point.string()) + "/greeting"), "hello\n");
    // A second command sees what the first mounted: one namespace for the server's life.
    EXPECT_EQ(run_inside(ns, {"cat", (point / "greeting").string()}).out, "hello\n");
}

TEST_F(PinnedUserNamespaceTest, NetworkNamespacesItOwnsAreOpenToItsRoot) {
    auto ns = PinnedUserNamespace::create(kBase);
    auto net = ns.new_network_namespace();
    ASSERT_TRUE(net.alive());
    UniqueFd net_fd(::open(net.ns_path("net").c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(net_fd);
    UniqueFd owner(::ioctl(net_fd.get(), NS_GET_USERNS));
    UniqueFd user(::open(ns.user_path().c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(owner);
    EXPECT_EQ(inode_of(owner.get()), inode_of(user.get()));
    // The namespace's root opens it (what rootless runc does with buildah's --network ns:).
    auto joined =
        run_inside(ns, {"nsenter", "--net=" + net.ns_path("net"), "cat", "/proc/self/net/dev"});
    EXPECT_EQ(joined.status.exit_code, 0) << joined.err;
    EXPECT_NE(joined.out.find("lo:"), std::string::npos);
    EXPECT_EQ(joined.out.find("eth"), std::string::npos) << "not a new namespace: " << joined.out;
}

TEST_F(PinnedUserNamespaceTest, AnIdShiftedViewInsideWritesHostIdsAsTheyAreInside) {
    auto ns = PinnedUserNamespace::create(kBase);
    const fs::path source = dir_.path() / "store", view = home() / "view";
    fs::create_directories(source);
    fs::create_directories(view);
    std::ofstream(source / "roots") << "r\n";
    std::ofstream(source / "users") << "u\n";
    ASSERT_EQ(::chown((source / "users").c_str(), 1000, 1000), 0);
    ns.mount_idmapped_inside(source.string(), view.string());
    EXPECT_TRUE(mounts_under(dir_.path()).empty()) << "the view reached the host";
    auto inside = run_inside(
        ns, {"sh", "-c",
             "cd \"$0\" && stat -c '%u %n' roots users && echo n > new && cp -p users copy && "
             "chown 1000:1000 new && ln roots linked",
             view.string()});
    ASSERT_EQ(inside.status.exit_code, 0) << inside.err;
    EXPECT_EQ(inside.out, "0 roots\n1000 users\n");
    // On disk: the ids as they are inside, as host root would have written them.
    struct stat st {};
    ASSERT_EQ(::stat((source / "new").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 1000u);
    ASSERT_EQ(::stat((source / "copy").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 1000u);
    ASSERT_EQ(::stat((source / "roots").c_str(), &st), 0);
    EXPECT_EQ(st.st_nlink, 2u) << "hard links within the view";
    ns.unmount_inside(view.string());
    EXPECT_EQ(run_inside(ns, {"ls", "-A", view.string()}).out, "");
}

TEST_F(PinnedUserNamespaceTest, HoldersEndWithTheObjects) {
    pid_t user_holder, net_holder;
    {
        auto ns = PinnedUserNamespace::create(kBase);
        auto net = ns.new_network_namespace();
        user_holder = std::stoi(fs::path(ns.user_path()).parent_path().parent_path().filename());
        net_holder = net.pid();
        ASSERT_EQ(::kill(user_holder, 0), 0);
    }
    for (pid_t pid : {user_holder, net_holder}) {
        errno = 0;
        EXPECT_EQ(::kill(pid, 0), -1) << pid;
        EXPECT_EQ(errno, ESRCH);
    }
}

TEST_F(PinnedUserNamespaceTest, HoldersInheritNoneOfTheServersDescriptors) {
    // A socket opened without O_CLOEXEC, as Asio opens deskboxd's listening socket.
    UniqueFd socket(::socket(AF_INET, SOCK_STREAM, 0));
    ASSERT_TRUE(socket);
    auto ns = PinnedUserNamespace::create(kBase);
    auto net = ns.new_network_namespace();
    const pid_t user_holder =
        std::stoi(fs::path(ns.user_path()).parent_path().parent_path().filename());
    for (pid_t pid : {user_holder, net.pid()}) {
        std::vector<std::string> open;
        for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd"))
            if (std::stoi(fd.path().filename()) > 2)
                open.push_back(fd.path().filename().string() + " -> " +
                               fs::read_symlink(fd.path()).string());
        EXPECT_TRUE(open.empty()) << "holder " << pid << " keeps " << testing::PrintToString(open);
    }
}

}  // namespace
}  // namespace deskbox::runtime
