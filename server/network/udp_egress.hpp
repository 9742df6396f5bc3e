// The UDP side of a sandbox's egress. A transparent socket in the router namespace gets the
// first datagram of every flow with the address it was sent to; an allowed flow then gets two
// sockets of its own: one in the router namespace bound to that remote address and connected
// to the sandbox (later datagrams of the flow land on it directly, and replies leave from the
// right address and port), and one in the host's namespace connected to the remote. Flows end
// after a minute without traffic; a sandbox has a bounded number of them.
#pragma once

#include <boost/asio/ip/udp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <map>
#include <memory>
#include <string>

#include "common/unique_fd.hpp"
#include "server/network/egress_context.hpp"

namespace deskbox::network {

class UdpFlow;

class UdpEgressListener : public Closeable, public std::enable_shared_from_this<UdpEgressListener> {
  public:
    UdpEgressListener(std::shared_ptr<EgressContext> ctx, UniqueFd socket);
    ~UdpEgressListener() override;
    void start();
    void close() override;
    // Ends every flow: the next datagram of each is decided again, by the new policy.
    void recheck_policy() override;

    using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;
    Strand& strand() { return strand_; }
    void forget(const std::string& key);  // a flow ended (on the strand)

  private:
    void wait();
    void read_all();
    void first_datagram(const boost::asio::ip::udp::endpoint& source,
                        const boost::asio::ip::udp::endpoint& destination, std::string payload);

    std::shared_ptr<EgressContext> ctx_;
    Strand strand_;
    boost::asio::ip::udp::socket socket_;
    std::map<std::string, std::shared_ptr<UdpFlow>> flows_;
    std::uint64_t ticket_ = 0;
};

class UdpFlow : public std::enable_shared_from_this<UdpFlow> {
  public:
    UdpFlow(std::shared_ptr<EgressContext> ctx, std::weak_ptr<UdpEgressListener> listener,
            std::string key, std::string label, boost::asio::ip::udp::socket to_sandbox,
            boost::asio::ip::udp::socket to_remote);
    void start(std::string first_payload);
    void close();  // on the listener's strand
    std::chrono::steady_clock::time_point last_active() const { return last_active_; }

  private:
    void pump(boost::asio::ip::udp::socket& from, boost::asio::ip::udp::socket& to, bool outbound);
    void arm_idle();
    void end();

    std::shared_ptr<EgressContext> ctx_;
    std::weak_ptr<UdpEgressListener> listener_;
    std::string key_, label_;
    boost::asio::ip::udp::socket to_sandbox_, to_remote_;
    boost::asio::steady_timer idle_;
    std::uint64_t bytes_out_ = 0, bytes_in_ = 0;
    std::chrono::steady_clock::time_point last_active_ = std::chrono::steady_clock::now();
    bool ended_ = false;
};

}  // namespace deskbox::network
