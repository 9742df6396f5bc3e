#include "guest-desktop/agent/channel_endpoint.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace deskbox::agent {
namespace {

sockaddr_un unix_address(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path)
        throw std::system_error(ENAMETOOLONG, std::generic_category(), "socket path " + path);
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    return addr;
}

}  // namespace

ChannelEndpoint::ChannelEndpoint(ChannelSpec spec) : spec_(std::move(spec)), wake_(Pipe::create()) {
    if (spec_.kind != ChannelSpec::Kind::unix_listen) return;
    listener_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!listener_) throw std::system_error(errno, std::generic_category(), "socket");
    auto addr = unix_address(spec_.path);
    ::unlink(spec_.path.c_str());  // a stale socket from an earlier run
    // Only our own uid may connect: the socket is the keys to the desktop.
    mode_t old = ::umask(077);
    int rc = ::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::umask(old);
    if (rc != 0) throw std::system_error(errno, std::generic_category(), "bind " + spec_.path);
    if (::listen(listener_.get(), 4) != 0)
        throw std::system_error(errno, std::generic_category(), "listen " + spec_.path);
}

ChannelEndpoint::~ChannelEndpoint() {
    if (spec_.kind == ChannelSpec::Kind::unix_listen && listener_) ::unlink(spec_.path.c_str());
}

void ChannelEndpoint::interrupt() {
    interrupted_ = true;
    char c = 1;
    (void)!::write(wake_.write.get(), &c, 1);
}

bool ChannelEndpoint::wait_readable(int fd, int timeout_ms) {
    pollfd fds[2] = {{wake_.read.get(), POLLIN, 0}, {fd, POLLIN, 0}};
    int ready = ::poll(fds, fd >= 0 ? 2 : 1, timeout_ms);
    return ready > 0 && fd >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR));
}

std::unique_ptr<protocol::Channel> ChannelEndpoint::next() {
    while (!interrupted_) {
        switch (spec_.kind) {
            case ChannelSpec::Kind::stdio: {
                if (stdio_used_) return nullptr;
                stdio_used_ = true;
                // The channel owns copies, so stdout can't be written by anything else by accident.
                int in = ::fcntl(0, F_DUPFD_CLOEXEC, 3);
                int out = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
                UniqueFd devnull(::open("/dev/null", O_RDWR | O_CLOEXEC));
                ::dup2(devnull.get(), 0);
                ::dup2(devnull.get(), 1);
                return std::make_unique<protocol::Channel>(in, out);
            }
            case ChannelSpec::Kind::unix_listen: {
                if (!wait_readable(listener_.get(), -1)) continue;
                int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
                if (fd < 0) continue;
                return std::make_unique<protocol::Channel>(fd, fd);
            }
            case ChannelSpec::Kind::unix_connect: {
                UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
                auto addr = unix_address(spec_.path);
                if (fd &&
                    ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
                    int raw = fd.release();
                    return std::make_unique<protocol::Channel>(raw, raw);
                }
                wait_readable(-1, 100);
                continue;
            }
            case ChannelSpec::Kind::device: {
                int fd = ::open(spec_.path.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY);
                if (fd >= 0) return std::make_unique<protocol::Channel>(fd, fd);
                // The port appears once the virtio driver binds; retry until interrupted.
                wait_readable(-1, 100);
                continue;
            }
        }
    }
    return nullptr;
}

}  // namespace deskbox::agent
