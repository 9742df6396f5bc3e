// Issue 26 item 2: the guest owns the directory holding agent.sock, so deskboxd must never
// follow a symlink planted there. These tests put a real listening socket elsewhere, point
// agent.sock at it, and check connect_unix_retry refuses without the listener seeing a
// connection, while a real socket in place still connects.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include "common/unique_fd.hpp"
#include "server/runtime/runtime.hpp"

namespace fs = std::filesystem;
using deskbox::UniqueFd;

namespace {

struct TempDir {
    fs::path path;
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "deskbox-symlink-XXXXXX").string();
        path = ::mkdtemp(tmpl.data());
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

UniqueFd listen_at(const fs::path& p) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, p.c_str(), sizeof addr.sun_path - 1);
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd.get(), 4), 0);
    return fd;
}

bool has_pending_connection(const UniqueFd& listener) {
    pollfd p{listener.get(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
}

}  // namespace

TEST(AgentSocketSymlink, SymlinkToHostSocketIsRefusedAndNeverConnected) {
    TempDir host, guest_run;
    auto target = host.path / "host.sock";
    auto listener = listen_at(target);
    fs::create_symlink(target, guest_run.path / "agent.sock");
    EXPECT_THROW(deskbox::runtime::connect_unix_retry(
                     guest_run.path / "agent.sock",
                     std::chrono::steady_clock::now() + std::chrono::milliseconds(200), {}),
                 deskbox::runtime::RuntimeError);
    EXPECT_FALSE(has_pending_connection(listener));
}

TEST(AgentSocketSymlink, RealSocketStillConnects) {
    TempDir guest_run;
    auto listener = listen_at(guest_run.path / "agent.sock");
    auto fd = deskbox::runtime::connect_unix_retry(
        guest_run.path / "agent.sock", std::chrono::steady_clock::now() + std::chrono::seconds(2),
        {});
    EXPECT_TRUE(fd);
    EXPECT_TRUE(has_pending_connection(listener));
}

TEST(AgentSocketSymlink, LongPathStillConnects) {
    TempDir guest_run;
    auto deep = guest_run.path / std::string(60, 'a') / std::string(60, 'b');
    fs::create_directories(deep);
    auto listener_path = guest_run.path / "l.sock";
    auto listener = listen_at(listener_path);
    fs::rename(listener_path, deep / "agent.sock");
    auto fd = deskbox::runtime::connect_unix_retry(
        deep / "agent.sock", std::chrono::steady_clock::now() + std::chrono::seconds(2), {});
    EXPECT_TRUE(fd);
}
