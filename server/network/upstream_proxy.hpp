// An upstream proxy the egress proxy sends allowed TCP connections through (--egress-proxy):
// SOCKS5 (RFC 1928, with RFC 1929 user/password) or an HTTP proxy's CONNECT. The sandbox's
// policy is still decided here, in deskboxd; the proxy only carries. A connection whose name
// is known (SNI, Host, or the sandbox's own DNS answer) is asked for by name, so the proxy
// resolves it (SOCKS5 "domain name", CONNECT host:port); otherwise by address.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace deskbox::network {

struct UpstreamProxy {
    enum class Kind { socks5, http };
    Kind kind = Kind::socks5;
    boost::asio::ip::tcp::endpoint endpoint;  // an address: the proxy is not looked up per use
    std::string user, password;               // empty: no authentication

    std::string describe() const;  // "socks5://198.18.0.2:1080" (never the password)
};

// "socks5://[user:password@]ADDRESS:PORT", "socks5h://..." (the same: names always go to the
// proxy), "http://[user:password@]ADDRESS:PORT"; ADDRESS an IPv4 or [IPv6] literal. Throws
// std::invalid_argument naming what is wrong (never the password).
UpstreamProxy parse_upstream_proxy(const std::string& url);

// Opens a tunnel through `proxy` to `target` (a host name or an address literal) : `port` on
// an open, connected socket to the proxy; `done(error)` with an empty error once bytes flow to
// the target. Runs on the socket's executor; the caller bounds it in time (closing the socket
// ends it with an error).
class ProxyTunnel : public std::enable_shared_from_this<ProxyTunnel> {
  public:
    using Done = std::function<void(const std::string& error)>;
    static void open(boost::asio::ip::tcp::socket& socket, const UpstreamProxy& proxy,
                     std::string target, std::uint16_t port, Done done);

    ProxyTunnel(boost::asio::ip::tcp::socket& socket, const UpstreamProxy& proxy,
                std::string target, std::uint16_t port, Done done);

  private:
    void socks_greet();
    void socks_authenticate();
    void socks_connect();
    void socks_reply_rest(std::size_t address_bytes);
    void http_connect();
    void http_answer_head();
    void write_then(std::string bytes, std::function<void()> then);
    void read_then(std::size_t n, std::function<void()> then);
    void fail(const std::string& error);

    boost::asio::ip::tcp::socket& socket_;
    UpstreamProxy proxy_;
    std::string target_;
    std::uint16_t port_;
    Done done_;
    std::string out_;
    std::array<std::uint8_t, 512> in_{};
    std::string head_;  // an HTTP proxy's answer, up to its blank line
};

}  // namespace deskbox::network
