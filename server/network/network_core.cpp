#include "server/network/network_core.hpp"

#include "common/io_loop.hpp"
#include "server/network/tls_interception.hpp"

#include <ifaddrs.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace deskbox::network {
namespace {

namespace net = boost::asio;
using udp = net::ip::udp;
using tcp = net::ip::tcp;

bool truncated(const std::string& answer) {
    return answer.size() >= 3 && (static_cast<unsigned char>(answer[2]) & 0x02);
}

// Query over TCP: two-byte length, then the message, both ways.
class TcpDnsExchange : public std::enable_shared_from_this<TcpDnsExchange> {
  public:
    TcpDnsExchange(net::io_context& io, const udp::endpoint& upstream, std::string query,
                   std::chrono::milliseconds timeout, NetworkCore::DnsDone done)
        : strand_(net::make_strand(io)),
          socket_(strand_),
          timer_(strand_),
          upstream_(upstream.address(), upstream.port()),
          done_(std::move(done)),
          timeout_(timeout) {
        out_.push_back(static_cast<char>(query.size() >> 8));
        out_.push_back(static_cast<char>(query.size() & 0xff));
        out_ += query;
    }
    void start() {
        auto self = shared_from_this();
        timer_.expires_after(timeout_);
        timer_.async_wait([self](boost::system::error_code ec) {
            if (!ec) self->finish(false, "the DNS upstream did not answer over TCP in time");
        });
        socket_.async_connect(upstream_, [self](boost::system::error_code ec) {
            if (ec) return self->finish(false, "DNS upstream over TCP: " + ec.message());
            net::async_write(self->socket_, net::buffer(self->out_),
                             [self](boost::system::error_code ec, std::size_t) {
                                 if (ec) return self->finish(false, ec.message());
                                 self->read_length();
                             });
        });
    }

  private:
    void read_length() {
        auto self = shared_from_this();
        net::async_read(
            socket_, net::buffer(length_), [self](boost::system::error_code ec, std::size_t) {
                if (ec) return self->finish(false, "DNS upstream over TCP: " + ec.message());
                std::size_t n = (static_cast<unsigned char>(self->length_[0]) << 8) |
                                static_cast<unsigned char>(self->length_[1]);
                self->in_.resize(n);
                net::async_read(self->socket_, net::buffer(self->in_),
                                [self](boost::system::error_code ec, std::size_t) {
                                    if (ec) return self->finish(false, ec.message());
                                    self->finish(true, std::move(self->in_));
                                });
            });
    }
    void finish(bool ok, std::string answer) {
        if (finished_) return;
        finished_ = true;
        boost::system::error_code ignored;
        timer_.cancel();
        socket_.close(ignored);
        done_(ok, std::move(answer));
    }

    net::strand<net::io_context::executor_type> strand_;  // the timer and the socket race
    tcp::socket socket_;
    net::steady_timer timer_;
    tcp::endpoint upstream_;
    NetworkCore::DnsDone done_;
    std::chrono::milliseconds timeout_;
    std::string out_, in_;
    std::array<char, 2> length_{};
    bool finished_ = false;
};

class UdpDnsExchange : public std::enable_shared_from_this<UdpDnsExchange> {
  public:
    UdpDnsExchange(NetworkCore& core, std::string query, NetworkCore::DnsDone done)
        : core_(core),
          strand_(net::make_strand(core.io())),
          socket_(strand_),
          timer_(strand_),
          query_(std::move(query)),
          done_(std::move(done)) {}
    void start() {
        auto self = shared_from_this();
        boost::system::error_code ec;
        // A socket of its own per query: a random source port, and answers from anyone but
        // the upstream never reach it (connected).
        socket_.open(core_.dns_upstream().protocol(), ec);
        if (!ec) socket_.connect(core_.dns_upstream(), ec);
        if (ec) return finish(false, "DNS upstream " + ec.message());
        timer_.expires_after(core_.options().dns_timeout);
        timer_.async_wait([self](boost::system::error_code ec) {
            if (!ec) self->finish(false, "the DNS upstream did not answer in time");
        });
        socket_.async_send(net::buffer(query_), [self](boost::system::error_code ec, std::size_t) {
            if (ec) return self->finish(false, "DNS upstream: " + ec.message());
            self->receive();
        });
    }

  private:
    void receive() {
        auto self = shared_from_this();
        buffer_.resize(65535);
        socket_.async_receive(
            net::buffer(buffer_), [self](boost::system::error_code ec, std::size_t n) {
                if (ec) return self->finish(false, "DNS upstream: " + ec.message());
                self->buffer_.resize(n);
                if (truncated(self->buffer_)) {
                    // Too big for UDP: ask again over TCP, within what is left of the time.
                    self->finished_ = true;
                    self->timer_.cancel();
                    boost::system::error_code ignored;
                    self->socket_.close(ignored);
                    std::make_shared<TcpDnsExchange>(
                        self->core_.io(), self->core_.dns_upstream(), std::move(self->query_),
                        self->core_.options().dns_timeout, std::move(self->done_))
                        ->start();
                    return;
                }
                self->finish(true, std::move(self->buffer_));
            });
    }
    void finish(bool ok, std::string answer) {
        if (finished_) return;
        finished_ = true;
        boost::system::error_code ignored;
        timer_.cancel();
        socket_.close(ignored);
        done_(ok, std::move(answer));
    }

    NetworkCore& core_;
    net::strand<net::io_context::executor_type> strand_;
    udp::socket socket_;
    net::steady_timer timer_;
    std::string query_, buffer_;
    NetworkCore::DnsDone done_;
    bool finished_ = false;
};

}  // namespace

udp::endpoint parse_dns_upstream(const std::string& text) {
    auto bad = [&](const std::string& why) {
        return std::invalid_argument("--dns-upstream '" + text + "': " + why +
                                     " (expected ADDR or ADDR:PORT, [v6]:PORT for IPv6)");
    };
    std::string host = text;
    std::string port_text;
    if (!host.empty() && host.front() == '[') {
        auto close = host.find(']');
        if (close == std::string::npos) throw bad("unterminated [");
        std::string rest = host.substr(close + 1);
        host = host.substr(1, close - 1);
        if (!rest.empty()) {
            if (rest.front() != ':') throw bad("garbage after ]");
            port_text = rest.substr(1);
        }
    } else if (std::count(host.begin(), host.end(), ':') == 1) {
        port_text = host.substr(host.find(':') + 1);
        host = host.substr(0, host.find(':'));
    }
    boost::system::error_code ec;
    auto address = net::ip::make_address(host, ec);
    if (ec) throw bad("not an IP address");
    int port = 53;
    if (!port_text.empty()) {
        auto [end, err] =
            std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
        if (err != std::errc() || end != port_text.data() + port_text.size() || port < 1 ||
            port > 65535)
            throw bad("port must be 1..65535");
    }
    return udp::endpoint(address, static_cast<unsigned short>(port));
}

std::string system_dns_server(const std::string& resolv_conf) {
    std::ifstream in(resolv_conf);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream words(line);
        std::string key, value;
        words >> key >> value;
        if (key != "nameserver" || value.empty()) continue;
        boost::system::error_code ec;
        auto address = net::ip::make_address(value, ec);
        if (ec) continue;
        return address.is_v6() ? "[" + value + "]" : value;
    }
    return "127.0.0.1";
}

NetworkCore::NetworkCore(NetworkOptions options) : options_(std::move(options)) {
    upstream_ = parse_dns_upstream(options_.dns_upstream.empty() ? system_dns_server()
                                                                 : options_.dns_upstream);
    host_view_.is_host = [this](const IpAddress& a) { return is_host_address(a); };
    host_view_.public_ranges = options_.public_ranges;
    if (options_.egress_ca)
        tls_ = std::make_unique<TlsInterception>(
            TlsInterception::Options{options_.egress_ca, options_.egress_trust});
    for (std::size_t i = 0; i < std::max<std::size_t>(options_.threads, 1); ++i) {
        loops_.push_back(std::make_unique<Loop>());
        Loop& loop = *loops_.back();
        loop.thread = std::thread([&loop] { run_io_loop(loop.io, "network"); });
    }
}

NetworkCore::~NetworkCore() {
    for (auto& loop : loops_) {
        loop->work.reset();
        loop->io.stop();
    }
    for (auto& loop : loops_) loop->thread.join();
}

boost::asio::io_context& NetworkCore::io() {
    return loops_[next_loop_++ % loops_.size()]->io;
}

bool NetworkCore::is_host_address(const IpAddress& raw) {
    IpAddress address = canonical(raw);
    std::lock_guard lock(host_mutex_);
    auto now = std::chrono::steady_clock::now();
    if (now - host_read_ > std::chrono::seconds(1)) {
        // Addresses come and go (DHCP, a VPN, a test's veth): read them again now and then.
        ifaddrs* list = nullptr;
        if (::getifaddrs(&list) == 0) {
            host_addresses_.clear();
            for (ifaddrs* i = list; i; i = i->ifa_next) {
                if (!i->ifa_addr) continue;
                if (i->ifa_addr->sa_family == AF_INET) {
                    auto* in = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
                    host_addresses_.insert(net::ip::address_v4(ntohl(in->sin_addr.s_addr)));
                } else if (i->ifa_addr->sa_family == AF_INET6) {
                    auto* in6 = reinterpret_cast<sockaddr_in6*>(i->ifa_addr);
                    net::ip::address_v6::bytes_type bytes;
                    std::copy_n(in6->sin6_addr.s6_addr, 16, bytes.begin());
                    host_addresses_.insert(canonical(net::ip::address_v6(bytes)));
                }
            }
            ::freeifaddrs(list);
            host_read_ = now;
        }
    }
    return host_addresses_.count(address) > 0;
}

void NetworkCore::dns_exchange(std::string query, bool over_tcp, DnsDone done) {
    if (over_tcp) {
        std::make_shared<TcpDnsExchange>(io(), upstream_, std::move(query), options_.dns_timeout,
                                         std::move(done))
            ->start();
        return;
    }
    std::make_shared<UdpDnsExchange>(*this, std::move(query), std::move(done))->start();
}

}  // namespace deskbox::network
