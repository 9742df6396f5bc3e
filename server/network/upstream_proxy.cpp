#include "server/network/upstream_proxy.hpp"

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/detail/base64.hpp>

#include <charconv>
#include <stdexcept>

namespace deskbox::network {
namespace {

namespace net = boost::asio;

constexpr std::uint8_t kSocksVersion = 5;
constexpr std::uint8_t kSocksNoAuth = 0, kSocksUserPassword = 2, kSocksNoAcceptable = 0xff;
constexpr std::uint8_t kSocksConnect = 1;
constexpr std::uint8_t kSocksIpv4 = 1, kSocksDomain = 3, kSocksIpv6 = 4;
constexpr std::size_t kMaxProxyHead = 8192;

const char* socks_reply_text(std::uint8_t code) {
    switch (code) {
        case 1:
            return "general SOCKS server failure";
        case 2:
            return "connection not allowed by ruleset";
        case 3:
            return "network unreachable";
        case 4:
            return "host unreachable";
        case 5:
            return "connection refused";
        case 6:
            return "TTL expired";
        case 7:
            return "command not supported";
        case 8:
            return "address type not supported";
        default:
            return "unknown SOCKS reply";
    }
}

std::string base64(const std::string& text) {
    std::string out(boost::beast::detail::base64::encoded_size(text.size()), '\0');
    out.resize(boost::beast::detail::base64::encode(out.data(), text.data(), text.size()));
    return out;
}

}  // namespace

std::string UpstreamProxy::describe() const {
    const std::string address = endpoint.address().is_v6()
                                    ? "[" + endpoint.address().to_string() + "]"
                                    : endpoint.address().to_string();
    return std::string(kind == Kind::socks5 ? "socks5" : "http") + "://" +
           (user.empty() ? "" : user + "@") + address + ":" + std::to_string(endpoint.port());
}

UpstreamProxy parse_upstream_proxy(const std::string& url) {
    UpstreamProxy proxy;
    std::string rest;
    for (const auto& [scheme, kind] : {std::pair{"socks5://", UpstreamProxy::Kind::socks5},
                                       std::pair{"socks5h://", UpstreamProxy::Kind::socks5},
                                       std::pair{"http://", UpstreamProxy::Kind::http}})
        if (url.rfind(scheme, 0) == 0) {
            proxy.kind = kind;
            rest = url.substr(std::string_view(scheme).size());
        }
    if (rest.empty())
        throw std::invalid_argument(
            "egress proxy: expected socks5://ADDRESS:PORT or http://ADDRESS:PORT");
    if (!rest.empty() && rest.back() == '/') rest.pop_back();
    if (auto at = rest.rfind('@'); at != std::string::npos) {
        const std::string credentials = rest.substr(0, at);
        rest = rest.substr(at + 1);
        auto colon = credentials.find(':');
        proxy.user = credentials.substr(0, colon);
        if (colon != std::string::npos) proxy.password = credentials.substr(colon + 1);
        // RFC 1929 carries each in one length byte.
        if (proxy.user.empty() || proxy.user.size() > 255 || proxy.password.size() > 255)
            throw std::invalid_argument("egress proxy: user and password must be 1..255 bytes");
    }
    auto colon = rest.rfind(':');
    if (colon == std::string::npos || colon + 1 == rest.size())
        throw std::invalid_argument("egress proxy: the address needs a port");
    std::string host = rest.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);
    unsigned port = 0;
    const std::string port_text = rest.substr(colon + 1);
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc{} || end != port_text.data() + port_text.size() || port == 0 ||
        port > 65535)
        throw std::invalid_argument("egress proxy: bad port '" + port_text + "'");
    boost::system::error_code bad;
    auto address = net::ip::make_address(host, bad);
    if (bad)
        throw std::invalid_argument("egress proxy: '" + host +
                                    "' is not an IP address (give the proxy's address: it is "
                                    "not looked up for each connection)");
    proxy.endpoint = {address, static_cast<std::uint16_t>(port)};
    return proxy;
}

void ProxyTunnel::open(net::ip::tcp::socket& socket, const UpstreamProxy& proxy, std::string target,
                       std::uint16_t port, Done done) {
    auto tunnel =
        std::make_shared<ProxyTunnel>(socket, proxy, std::move(target), port, std::move(done));
    if (proxy.kind == UpstreamProxy::Kind::socks5)
        tunnel->socks_greet();
    else
        tunnel->http_connect();
}

ProxyTunnel::ProxyTunnel(net::ip::tcp::socket& socket, const UpstreamProxy& proxy,
                         std::string target, std::uint16_t port, Done done)
    : socket_(socket),
      proxy_(proxy),
      target_(std::move(target)),
      port_(port),
      done_(std::move(done)) {}

void ProxyTunnel::write_then(std::string bytes, std::function<void()> then) {
    out_ = std::move(bytes);
    net::async_write(socket_, net::buffer(out_),
                     [self = shared_from_this(), then](boost::system::error_code ec, std::size_t) {
                         if (ec) return self->fail("sending to the proxy: " + ec.message());
                         then();
                     });
}

void ProxyTunnel::read_then(std::size_t n, std::function<void()> then) {
    net::async_read(socket_, net::buffer(in_.data(), n),
                    [self = shared_from_this(), then](boost::system::error_code ec, std::size_t) {
                        if (ec) return self->fail("the proxy's answer: " + ec.message());
                        then();
                    });
}

void ProxyTunnel::fail(const std::string& error) {
    if (!done_) return;
    auto done = std::move(done_);
    done(proxy_.describe() + ": " + error);
}

void ProxyTunnel::socks_greet() {
    const bool with_password = !proxy_.user.empty();
    std::string hello = {static_cast<char>(kSocksVersion), 1,
                         static_cast<char>(with_password ? kSocksUserPassword : kSocksNoAuth)};
    write_then(std::move(hello), [this, with_password] {
        read_then(2, [this, with_password] {
            if (in_[0] != kSocksVersion) return fail("not a SOCKS5 proxy");
            if (in_[1] == kSocksNoAcceptable)
                return fail(with_password ? "refuses user/password authentication"
                                          : "requires authentication");
            if (in_[1] == kSocksUserPassword && with_password) return socks_authenticate();
            if (in_[1] != kSocksNoAuth) return fail("chose a method we did not offer");
            socks_connect();
        });
    });
}

void ProxyTunnel::socks_authenticate() {
    std::string request = {1, static_cast<char>(proxy_.user.size())};
    request += proxy_.user;
    request += static_cast<char>(proxy_.password.size());
    request += proxy_.password;
    write_then(std::move(request), [this] {
        read_then(2, [this] {
            if (in_[1] != 0) return fail("refused the user and password");
            socks_connect();
        });
    });
}

void ProxyTunnel::socks_connect() {
    std::string request = {static_cast<char>(kSocksVersion), static_cast<char>(kSocksConnect), 0};
    boost::system::error_code not_address;
    auto address = net::ip::make_address(target_, not_address);
    if (not_address) {
        if (target_.size() > 255) return fail("the name is too long for SOCKS5");
        request += static_cast<char>(kSocksDomain);
        request += static_cast<char>(target_.size());
        request += target_;
    } else if (address.is_v4()) {
        request += static_cast<char>(kSocksIpv4);
        auto bytes = address.to_v4().to_bytes();
        request.append(bytes.begin(), bytes.end());
    } else {
        request += static_cast<char>(kSocksIpv6);
        auto bytes = address.to_v6().to_bytes();
        request.append(bytes.begin(), bytes.end());
    }
    request += static_cast<char>(port_ >> 8);
    request += static_cast<char>(port_ & 0xff);
    write_then(std::move(request), [this] {
        read_then(4, [this] {
            if (in_[0] != kSocksVersion) return fail("not a SOCKS5 answer");
            if (in_[1] != 0)
                return fail("could not connect to " + target_ + ":" + std::to_string(port_) + ": " +
                            socks_reply_text(in_[1]));
            // The bound address follows; its length depends on its type.
            switch (in_[3]) {
                case kSocksIpv4:
                    return socks_reply_rest(4);
                case kSocksIpv6:
                    return socks_reply_rest(16);
                case kSocksDomain:
                    return read_then(1, [this] { socks_reply_rest(in_[0]); });
                default:
                    return fail("an answer with an unknown address type");
            }
        });
    });
}

void ProxyTunnel::socks_reply_rest(std::size_t address_bytes) {
    read_then(address_bytes + 2, [this] {
        if (!done_) return;
        auto done = std::move(done_);
        done({});
    });
}

void ProxyTunnel::http_connect() {
    boost::system::error_code not_address;
    auto address = net::ip::make_address(target_, not_address);
    const std::string authority =
        (!not_address && address.is_v6() ? "[" + target_ + "]" : target_) + ":" +
        std::to_string(port_);
    std::string request = "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n";
    if (!proxy_.user.empty())
        request +=
            "Proxy-Authorization: Basic " + base64(proxy_.user + ":" + proxy_.password) + "\r\n";
    request += "\r\n";
    write_then(std::move(request), [this] { http_answer_head(); });
}

// The answer is read a byte at a time: what follows its blank line is the target's (a server
// that speaks first) and must stay in the socket for the relay.
void ProxyTunnel::http_answer_head() {
    read_then(1, [this] {
        head_ += static_cast<char>(in_[0]);
        if (head_.size() > kMaxProxyHead) return fail("an answer head over 8 KiB");
        if (!head_.ends_with("\r\n\r\n")) return http_answer_head();
        const std::string status = head_.substr(0, head_.find("\r\n"));
        if (status.size() < 12 || status.rfind("HTTP/1.", 0) != 0 || status.substr(9, 3) != "200")
            return fail("CONNECT " + target_ + ":" + std::to_string(port_) + " answered '" +
                        status + "'");
        if (!done_) return;
        auto done = std::move(done_);
        done({});
    });
}

}  // namespace deskbox::network
