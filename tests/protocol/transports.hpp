// Connected channel pairs over the fd types the agent channel runs on, for the protocol tests.
#pragma once

#include <fcntl.h>
#include <pty.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <system_error>

#include "common/unique_fd.hpp"
#include "protocol/channel.hpp"

namespace deskbox::protocol::testing {

enum class Transport { socketpair, pipes, pty };

inline std::string transport_name(Transport transport) {
    switch (transport) {
        case Transport::socketpair:
            return "socketpair";
        case Transport::pipes:
            return "pipes";
        case Transport::pty:
            return "pty";
    }
    return "?";
}

// Two raw ends: each side reads read_fd and writes write_fd (the same fd for sockets and ptys).
struct RawEnds {
    UniqueFd a_read, a_write, b_read, b_write;
};

inline void check(bool ok, const char* what) {
    if (!ok) throw std::system_error(errno, std::generic_category(), what);
}

inline RawEnds raw_ends(Transport transport) {
    RawEnds ends;
    if (transport == Transport::socketpair) {
        int fds[2];
        check(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0, "socketpair");
        ends.a_read = UniqueFd(fds[0]);
        ends.a_write = UniqueFd(::dup(fds[0]));
        ends.b_read = UniqueFd(fds[1]);
        ends.b_write = UniqueFd(::dup(fds[1]));
    } else if (transport == Transport::pipes) {
        Pipe a_to_b = Pipe::create();
        Pipe b_to_a = Pipe::create();
        ends.a_read = std::move(b_to_a.read);
        ends.a_write = std::move(a_to_b.write);
        ends.b_read = std::move(a_to_b.read);
        ends.b_write = std::move(b_to_a.write);
    } else {
        // A pty is a character device like a virtio-serial port; raw mode passes bytes 8-bit clean.
        int master = -1, slave = -1;
        termios raw{};
        ::cfmakeraw(&raw);
        check(::openpty(&master, &slave, nullptr, &raw, nullptr) == 0, "openpty");
        ::fcntl(master, F_SETFD, FD_CLOEXEC);
        ::fcntl(slave, F_SETFD, FD_CLOEXEC);
        ends.a_read = UniqueFd(master);
        ends.a_write = UniqueFd(::dup(master));
        ends.b_read = UniqueFd(slave);
        ends.b_write = UniqueFd(::dup(slave));
    }
    return ends;
}

struct ChannelPair {
    std::unique_ptr<Channel> a, b;
};

inline ChannelPair channel_pair(Transport transport, Limits limits = {}) {
    RawEnds ends = raw_ends(transport);
    ChannelPair pair;
    pair.a = std::make_unique<Channel>(ends.a_read.release(), ends.a_write.release(), limits);
    pair.b = std::make_unique<Channel>(ends.b_read.release(), ends.b_write.release(), limits);
    return pair;
}

}  // namespace deskbox::protocol::testing
