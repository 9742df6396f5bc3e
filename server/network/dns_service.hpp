// The DNS server every sandbox with a network is told about (10.0.2.3), and any DNS it sends
// elsewhere on port 53: names the policy refuses get NXDOMAIN, allowed ones are asked of the
// upstream (--dns-upstream) and the answer is filtered (dns_message.hpp) before the sandbox
// sees it. Addresses handed out are remembered for the egress proxy (dns_memory.hpp).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <array>
#include <functional>
#include <memory>
#include <string>

#include "common/unique_fd.hpp"
#include "server/network/egress_context.hpp"

namespace deskbox::network {

// Answers a sandbox's query. `done(answer)` runs on an I/O thread; an empty answer: send
// nothing (the bytes were not a DNS query).
void answer_sandbox_query(const std::shared_ptr<EgressContext>& ctx, std::string query,
                          bool over_tcp, std::function<void(std::string)> done);

// Looks `name` up (A records) for the proxy's own Host/SNI check and remembers the answers the
// policy lets through. `done` runs on an I/O thread.
void lookup_for_proxy(const std::shared_ptr<EgressContext>& ctx, const std::string& name,
                      std::function<void()> done);

// UDP port 53 of a router namespace (a transparent socket: it gets queries to any address and
// answers from the address that was asked).
class DnsUdpServer : public Closeable, public std::enable_shared_from_this<DnsUdpServer> {
  public:
    static constexpr std::size_t kMaxInFlight = 256;
    DnsUdpServer(std::shared_ptr<EgressContext> ctx, UniqueFd socket);
    ~DnsUdpServer() override;
    void start();
    void close() override;

  private:
    void wait();
    void read_all();
    void reply(const boost::asio::ip::udp::endpoint& client,
               const boost::asio::ip::address_v4& asked, const std::string& answer);

    std::shared_ptr<EgressContext> ctx_;
    boost::asio::strand<boost::asio::io_context::executor_type> strand_;
    boost::asio::ip::udp::socket socket_;
    std::uint64_t ticket_ = 0;
    std::size_t in_flight_ = 0;
};

// One sandbox TCP connection to port 53: length-prefixed queries, answered in order.
class DnsTcpSession : public Closeable, public std::enable_shared_from_this<DnsTcpSession> {
  public:
    DnsTcpSession(std::shared_ptr<EgressContext> ctx, boost::asio::ip::tcp::socket socket,
                  ConnectionSlot slot);
    ~DnsTcpSession() override;
    void start();
    void close() override;

  private:
    void read_length();
    void finish();

    std::shared_ptr<EgressContext> ctx_;
    boost::asio::ip::tcp::socket socket_;
    boost::asio::steady_timer idle_;
    ConnectionSlot slot_;
    std::array<unsigned char, 2> length_{};
    std::string query_, answer_;
    std::uint64_t ticket_ = 0;
};

}  // namespace deskbox::network
