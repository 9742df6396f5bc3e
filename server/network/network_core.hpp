// The parts of the network service every sandbox's egress shares (internal to server/network):
// the I/O threads, the upstream DNS server, and what the host's own addresses are.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/udp.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/network/ip_range.hpp"
#include "server/network/network_policy.hpp"
#include "server/network/upstream_proxy.hpp"

namespace deskbox::network {

class EgressCa;
class TlsInterception;

struct NetworkOptions {
    // ADDR[:PORT] of the DNS server sandboxes' lookups go to; empty: the first nameserver of
    // /etc/resolv.conf.
    std::string dns_upstream;
    std::size_t threads = 2;
    // An upstream that does not accept within this fails the sandbox's connection (reset).
    std::chrono::milliseconds connect_timeout{10000};
    // When a name decides, how long the proxy waits for a client's first bytes (TLS
    // ClientHello, HTTP request) before deciding without one.
    std::chrono::milliseconds first_bytes_timeout{2000};
    std::chrono::milliseconds dns_timeout{4000};
    std::size_t max_connections = 1024;  // open TCP connections per sandbox
    std::size_t max_udp_flows = 256;     // per sandbox; the idlest goes first
    std::chrono::seconds udp_idle{60};
    // After one side of a TCP connection closed, how long the other may stay silent before
    // both are reset (a peer that never answers a close would hold the flow's fds for good).
    std::chrono::milliseconds half_closed_idle{60000};
    // Special ranges to treat as the internet (--public-range: a lab network standing in for
    // it, as tests do with 198.18.0.0/15).
    std::vector<IpRange> public_ranges;
    // The value of secret NAME for credential rules (server/secrets/); nullopt when there is
    // none. Asked for each request a rule naming it applies to, so a new value applies at once.
    std::function<std::optional<std::string>(const std::string&)> secret_value;
    // deskboxd's private CA (egress_ca.hpp): with it, TLS to a name that credential rules
    // apply to ends at the proxy, which sets the rules' headers. Without it such connections
    // keep their TLS end to end and get no headers.
    std::shared_ptr<EgressCa> egress_ca;
    // PEM CA files servers' certificates may chain to, beside the host's trust store
    // (--egress-trust-ca: an operator's private servers; tests' own CA).
    std::vector<std::filesystem::path> egress_trust;
    // --egress-proxy: allowed TCP connections go out through it (UDP other than DNS is then
    // refused: neither proxy kind carries it here).
    std::optional<UpstreamProxy> egress_proxy;
    // --egress-proxy NAME=URL: proxies a sandbox's policy may pick by name ({"proxy": NAME}).
    std::map<std::string, UpstreamProxy> named_egress_proxies;
    // The proxy a policy's connections go through: its named one, else the default; null: none.
    const UpstreamProxy* egress_proxy_for(const NetworkPolicy& policy) const {
        if (policy.proxy()) {
            auto found = named_egress_proxies.find(*policy.proxy());
            return found == named_egress_proxies.end() ? nullptr : &found->second;
        }
        return egress_proxy ? &*egress_proxy : nullptr;
    }
};

class NetworkCore {
  public:
    explicit NetworkCore(NetworkOptions options);
    ~NetworkCore();  // stops the I/O threads
    NetworkCore(const NetworkCore&) = delete;
    NetworkCore& operator=(const NetworkCore&) = delete;

    // One of the I/O contexts, round robin: each runs on one thread of its own, so a
    // connection's handlers never hop threads (no strand locking, no cross-thread wakeups).
    boost::asio::io_context& io();
    const NetworkOptions& options() const { return options_; }
    // The proxy's TLS ends for rule names; null without a CA.
    TlsInterception* tls_interception() const { return tls_.get(); }
    const boost::asio::ip::udp::endpoint& dns_upstream() const { return upstream_; }

    // Every address of every interface of the host's namespace (deskboxd's), refreshed at most
    // once a second.
    bool is_host_address(const IpAddress& address);
    // The view policies decide with: the host's addresses and the declared public ranges.
    const HostView& host_view() const { return host_view_; }

    // One DNS exchange with the upstream (UDP, then TCP if the answer was truncated, or TCP
    // at once). `done(ok, answer)` runs on an I/O thread; ok false: timeout or error (answer
    // then says why).
    using DnsDone = std::function<void(bool ok, std::string answer)>;
    void dns_exchange(std::string query, bool over_tcp, DnsDone done);

  private:
    NetworkOptions options_;
    std::unique_ptr<TlsInterception> tls_;
    struct Loop {
        boost::asio::io_context io{1};
        boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{
            boost::asio::make_work_guard(io)};
        std::thread thread;
    };
    std::vector<std::unique_ptr<Loop>> loops_;
    std::atomic<std::size_t> next_loop_{0};
    boost::asio::ip::udp::endpoint upstream_;
    HostView host_view_;

    std::mutex host_mutex_;
    std::set<IpAddress> host_addresses_;
    std::chrono::steady_clock::time_point host_read_{};
};

// "1.2.3.4", "1.2.3.4:5353", "[2001:db8::1]:53", "2001:db8::1". Throws std::invalid_argument.
boost::asio::ip::udp::endpoint parse_dns_upstream(const std::string& text);
// The first nameserver of a resolv.conf; "127.0.0.1" if it names none.
std::string system_dns_server(const std::string& resolv_conf = "/etc/resolv.conf");

}  // namespace deskbox::network
