#include "server/network/transparent_socket.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "server/network/netns.hpp"

namespace deskbox::network {

UniqueFd transparent_socket(int type, std::uint16_t port) {
    int fd = ::socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) throw NetworkError(std::string("socket: ") + std::strerror(errno));
    UniqueFd socket(fd);
    int one = 1;
    // IP_TRANSPARENT: take packets for any address (TPROXY) and answer from it.
    if (::setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof one) != 0)
        throw NetworkError(std::string("IP_TRANSPARENT (needs CAP_NET_ADMIN): ") +
                           std::strerror(errno));
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (type == SOCK_DGRAM) ::setsockopt(fd, SOL_IP, IP_RECVORIGDSTADDR, &one, sizeof one);
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_port = htons(port);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0)
        throw NetworkError("bind port " + std::to_string(port) + ": " + std::strerror(errno));
    if (type == SOCK_STREAM && ::listen(fd, 1024) != 0)
        throw NetworkError(std::string("listen: ") + std::strerror(errno));
    return socket;
}

std::optional<Datagram> receive_datagram(int fd) {
    while (true) {
        Datagram d;
        d.payload.resize(65535);
        alignas(cmsghdr) char control[256];
        iovec iov{d.payload.data(), d.payload.size()};
        msghdr msg{};
        msg.msg_name = &d.from;
        msg.msg_namelen = sizeof d.from;
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            return std::nullopt;  // EAGAIN: all read
        }
        d.payload.resize(static_cast<std::size_t>(n));
        for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
            if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_ORIGDSTADDR)
                std::memcpy(&d.to, CMSG_DATA(c), sizeof d.to);
        if (d.to.sin_family == AF_INET && d.from.sin_family == AF_INET) return d;
    }
}

}  // namespace deskbox::network
