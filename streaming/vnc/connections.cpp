// Listening, accepting and handing each connection to libvncserver, and the client records
// libvncserver creates and frees for them.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "streaming/vnc/server_impl.hpp"

namespace deskbox::streaming {

void VncServer::Impl::bind_listener() {
    sockaddr_storage address{};
    socklen_t address_size = 0;
    int family = AF_INET;
    if (auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
        inet_pton(AF_INET, options.listen_address.c_str(), &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(static_cast<std::uint16_t>(options.port));
        address_size = sizeof(sockaddr_in);
    } else if (auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
               inet_pton(AF_INET6, options.listen_address.c_str(), &v6->sin6_addr) == 1) {
        family = AF_INET6;
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(static_cast<std::uint16_t>(options.port));
        address_size = sizeof(sockaddr_in6);
    } else {
        throw ParameterError("listen_address", "expected a numeric IPv4 or IPv6 address, got \"" +
                                                   options.listen_address + "\"");
    }
    std::string where =
        (family == AF_INET6 ? "[" + options.listen_address + "]" : options.listen_address) + ":" +
        std::to_string(options.port);

    UniqueFd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) throw std::system_error(errno, std::generic_category(), "vnc: socket");
    int one = 1;
    // Lets a restarted server take its port back from TIME_WAIT; a live listener still wins.
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (family == AF_INET6) ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), address_size) != 0) {
        int error = errno;
        if (error == EADDRINUSE) throw ParameterError("port", where + " is already in use");
        if (error == EADDRNOTAVAIL)
            throw ParameterError("listen_address",
                                 options.listen_address + " is not an address of this host");
        if (error == EACCES) throw ParameterError("port", "not allowed to listen on " + where);
        throw std::system_error(error, std::generic_category(), "vnc: bind " + where);
    }
    if (::listen(fd.get(), 64) != 0)
        throw std::system_error(errno, std::generic_category(), "vnc: listen " + where);
    // Any number will do: only our poll() sees the listening socket, never libvncserver.
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &address_size) != 0)
        throw std::system_error(errno, std::generic_category(), "vnc: getsockname");
    bound_port = family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
    bound_address = options.listen_address;
    listen_fd = std::move(fd);
}

void VncServer::Impl::accept_clients() {
    for (;;) {
        int raw = ::accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (raw < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)  // out of descriptors or memory
                accept_paused_until = std::chrono::steady_clock::now() + kVncAcceptBackoff;
            return;
        }
        UniqueFd connection(raw);
        // Any number will do: libvncserver's record gets the stand-in's (hand_over).
        if (mirror_closed || clients.size() >= static_cast<std::size_t>(options.max_clients)) {
            counters.refused.fetch_add(1);
            continue;  // closed here: the client sees the connection end at once
        }
        counters.accepted.fetch_add(1);
        hand_over(std::move(connection));
    }
}

// libvncserver 0.9.14's rfbNewClient first peeks at 4 bytes of the client's socket (WebSocket
// and TLS detection, waiting up to 100 ms), and that peek spins forever when 1 to 3 bytes are
// buffered: it takes the short read for EAGAIN (a stale errno) and select() says readable
// again. A client that sent "RFB" and nothing more, or closed after it, held the server thread
// at full CPU for good, and stop() with it (found by streaming/vnc/fuzz). So rfbNewClient never
// sees the client's socket: it gets one end of a socketpair that already holds "RFB " (plain RFB,
// no wait) and writes its ProtocolVersion there. That goes on to the client, and dup3 then puts
// the client's socket in place of that end, so the client record uses the real connection from
// its first read on. WebSocket and TLS on the RFB port go away with the peek (deskboxd's own
// WebSocket proxy speaks plain RFB to this port), and so does the 100 ms wait per connection.
void VncServer::Impl::hand_over(UniqueFd connection) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) != 0) {
        accept_paused_until = std::chrono::steady_clock::now() + kVncAcceptBackoff;
        return;  // out of descriptors: the client sees the connection end
    }
    UniqueFd server_side(pair[1]);
    // libvncserver puts client sockets in select() sets: this number (which the client's
    // socket takes over below) must be under FD_SETSIZE.
    UniqueFd stand_in = vnc::below_fd_setsize(UniqueFd(pair[0]));
    constexpr char kPeek[] = "RFB ";
    if (!stand_in || ::send(server_side.get(), kPeek, 4, MSG_NOSIGNAL) != 4) {
        counters.refused.fetch_add(1);
        return;
    }
    // Registers the client and writes the ProtocolVersion, or closes the descriptor it got.
    rfbClientPtr client = rfbNewClient(screen, stand_in.release());
    if (!client) return;

    // The stand-in's buffer holds the 4 peek bytes, the other direction libvncserver's output.
    std::array<char, 64> greeting;
    ssize_t greeting_size = ::recv(server_side.get(), greeting.data(), greeting.size(), 0);
    int one = 1;
    ::setsockopt(connection.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // A fresh socket's send buffer always takes these few bytes at once.
    if (greeting_size <= 0 ||
        ::send(connection.get(), greeting.data(), static_cast<std::size_t>(greeting_size),
               MSG_NOSIGNAL) != greeting_size ||
        ::dup3(connection.get(), client->sock, O_CLOEXEC) < 0) {
        rfbCloseClient(client);  // freed by the next rfbProcessEvents
        return;
    }
    // libvncserver read its peer's name from the stand-in; give it the real one for its log.
    sockaddr_storage peer{};
    socklen_t peer_size = sizeof(peer);
    char host[NI_MAXHOST] = "";
    if (::getpeername(connection.get(), reinterpret_cast<sockaddr*>(&peer), &peer_size) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&peer), peer_size, host, sizeof(host), nullptr, 0,
                      NI_NUMERICHOST) == 0) {
        if (char* copy = ::strdup(host)) {
            std::free(client->host);
            client->host = copy;
        }
    }
}

void VncServer::Impl::disconnect_all() {
    // Closed now, freed (and on_client_gone called) by the next rfbProcessEvents.
    for (const auto& entry : clients)
        if (entry.first->sock != RFB_INVALID_SOCKET) rfbCloseClient(entry.first);
}

// ---- hooks ----

enum rfbNewClientAction VncServer::Impl::on_new_client(rfbClientPtr client) {
    Impl& self = of(client);
    auto [entry, inserted] = self.clients.try_emplace(client);
    client->clientData = &entry->second;
    client->clientGoneHook = on_client_gone;
    self.counters.clients.store(self.clients.size());
    return RFB_CLIENT_ACCEPT;
}

void VncServer::Impl::on_client_gone(rfbClientPtr client) {
    Impl& self = of(client);
    self.add_client_totals(client, self.retired_updates, self.retired_rects, self.retired_bytes);
    client->clientData = nullptr;
    self.clients.erase(client);
    self.counters.clients.store(self.clients.size());
    vnc::refill_low_fds();  // libvncserver closes its socket after this: next time
}

}  // namespace deskbox::streaming
