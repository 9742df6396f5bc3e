// Sockets of a router namespace that take what TPROXY hands them: packets for any address,
// answered from that address (IP_TRANSPARENT), and datagrams that say where they were sent.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common/unique_fd.hpp"

namespace deskbox::network {

// A non-blocking TCP listener (SOCK_STREAM) or UDP socket (SOCK_DGRAM, with
// IP_RECVORIGDSTADDR) on 0.0.0.0:`port` of the calling thread's namespace. Throws NetworkError.
UniqueFd transparent_socket(int type, std::uint16_t port);

struct Datagram {
    std::string payload;
    sockaddr_in from{};  // the sandbox's address and port
    sockaddr_in to{};    // where it sent it (before TPROXY)
};
// The next datagram waiting on `fd` (a transparent UDP socket), or nullopt when none is.
// Datagrams without an IPv4 destination are skipped.
std::optional<Datagram> receive_datagram(int fd);

}  // namespace deskbox::network
