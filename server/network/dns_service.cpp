#include "server/network/dns_service.hpp"

#include <netinet/in.h>
#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>

#include <cstring>
#include <utility>

#include "common/random.hpp"
#include "server/network/dns_message.hpp"
#include "server/network/transparent_socket.hpp"

namespace deskbox::network {
namespace {

namespace net = boost::asio;
using udp = net::ip::udp;

// Unpredictable, so an off-path host cannot forge the upstream's answer.
std::uint16_t random_id() {
    return random::value<std::uint16_t>();
}

constexpr std::uint16_t kTypeSvcb = 64, kTypeHttps = 65, kTypeIxfr = 251, kTypeAxfr = 252,
                        kTypeAny = 255;

}  // namespace

void answer_sandbox_query(const std::shared_ptr<EgressContext>& ctx, std::string query,
                          bool over_tcp, std::function<void(std::string)> done) {
    auto q = parse_dns_query(query);
    if (!q) return done({});
    if (q->qclass != 1) return done(dns_answer_without_records(query, kDnsRcodeRefused));
    auto name = normalize_host_name(q->name);
    Verdict verdict = name ? ctx->policy()->name_verdict(*name) : Verdict{false, "not a host name"};
    if (!verdict.allowed) {
        ctx->stats.dns(false);
        ctx->audit("egress.dns", {{"name", q->name.substr(0, 253)},
                                  {"type", q->type},
                                  {"decision", "blocked"},
                                  {"reason", verdict.reason}});
        return done(dns_answer_without_records(query, kDnsRcodeNxdomain));
    }
    if (q->type == kDnsTypeAAAA || q->type == kTypeHttps || q->type == kTypeSvcb) {
        // No IPv6 route, and HTTPS/SVCB carry address hints: "no such record".
        ctx->stats.dns(true);
        return done(dns_answer_without_records(query, 0));
    }
    if (q->type == kTypeAny || q->type == kTypeAxfr || q->type == kTypeIxfr)
        return done(dns_answer_without_records(query, kDnsRcodeRefused));
    const std::uint16_t upstream_id = random_id();
    std::string upstream_query = query;
    upstream_query[0] = static_cast<char>(upstream_id >> 8);
    upstream_query[1] = static_cast<char>(upstream_id & 0xff);
    ctx->core.dns_exchange(
        std::move(upstream_query), over_tcp,
        [ctx, query = std::move(query), q = *q, name = *name, upstream_id, done = std::move(done)](
            bool ok, std::string answer) {
            if (!ok) {
                ctx->audit("egress.dns",
                           {{"name", name}, {"decision", "failed"}, {"reason", answer}});
                return done(dns_answer_without_records(query, kDnsRcodeServfail));
            }
            const auto& check = ctx->core.host_view();
            auto filtered =
                filter_dns_answer(answer, q, upstream_id, q.id, [&](const IpAddress& a) {
                    return ctx->policy()->answer_verdict(a, check).allowed;
                });
            if (!filtered) return done(dns_answer_without_records(query, kDnsRcodeServfail));
            for (const auto& a : filtered->kept) {
                ctx->dns_memory.remember(name, a.address, std::chrono::seconds(a.ttl));
                if (a.name != name)
                    ctx->dns_memory.remember(a.name, a.address, std::chrono::seconds(a.ttl));
            }
            if (!filtered->stripped.empty()) {
                nlohmann::json removed = nlohmann::json::array();
                std::string reason;
                for (const auto& a : filtered->stripped) {
                    removed.push_back(a.address.to_string());
                    reason = ctx->policy()->answer_verdict(a.address, check).reason;
                }
                ctx->audit("egress.dns", {{"name", name},
                                          {"decision", "addresses_removed"},
                                          {"addresses", removed},
                                          {"reason", reason}});
            }
            ctx->stats.dns(true);
            done(std::move(filtered->wire));
        });
}

void lookup_for_proxy(const std::shared_ptr<EgressContext>& ctx, const std::string& name,
                      std::function<void()> done) {
    const std::uint16_t id = random_id();
    std::string query = make_dns_query(name, kDnsTypeA, id);
    if (query.empty()) return done();
    DnsQuery q;
    q.id = id;
    q.name = name;
    q.type = kDnsTypeA;
    q.qclass = 1;
    ctx->core.dns_exchange(
        std::move(query), false, [ctx, q, done = std::move(done)](bool ok, std::string answer) {
            if (ok) {
                const auto& check = ctx->core.host_view();
                auto filtered = filter_dns_answer(answer, q, q.id, q.id, [&](const IpAddress& a) {
                    return ctx->policy()->answer_verdict(a, check).allowed;
                });
                if (filtered)
                    for (const auto& a : filtered->kept)
                        ctx->dns_memory.remember(q.name, a.address, std::chrono::seconds(a.ttl));
            }
            done();
        });
}

// ------------------------------------------------------------------ UDP

DnsUdpServer::DnsUdpServer(std::shared_ptr<EgressContext> ctx, UniqueFd fd)
    : ctx_(std::move(ctx)), strand_(net::make_strand(ctx_->core.io())), socket_(strand_) {
    socket_.assign(udp::v4(), fd.release());
    socket_.non_blocking(true);
}

DnsUdpServer::~DnsUdpServer() {
    ctx_->leave(ticket_);
}

void DnsUdpServer::start() {
    ticket_ = ctx_->enroll(weak_from_this());
    net::post(strand_, [self = shared_from_this()] { self->wait(); });
}

void DnsUdpServer::close() {
    net::post(strand_, [self = shared_from_this()] {
        boost::system::error_code ignored;
        self->socket_.close(ignored);
        // Its sockets are closed: answers still on their way no longer hold the network up.
        self->ctx_->leave(std::exchange(self->ticket_, 0));
    });
}

void DnsUdpServer::wait() {
    if (!socket_.is_open()) return;
    socket_.async_wait(udp::socket::wait_read,
                       [self = shared_from_this()](boost::system::error_code ec) {
                           if (ec) return;
                           self->read_all();
                           self->wait();
                       });
}

void DnsUdpServer::read_all() {
    for (int i = 0; i < 64 && socket_.is_open(); ++i) {
        auto datagram = receive_datagram(socket_.native_handle());
        if (!datagram) return;
        if (in_flight_ >= kMaxInFlight) continue;
        ++in_flight_;
        const auto& from = datagram->from;
        udp::endpoint client(net::ip::address_v4(ntohl(from.sin_addr.s_addr)),
                             ntohs(from.sin_port));
        net::ip::address_v4 to(ntohl(datagram->to.sin_addr.s_addr));
        answer_sandbox_query(ctx_, std::move(datagram->payload), false,
                             [self = shared_from_this(), client, to](std::string answer) {
                                 net::post(self->strand_,
                                           [self, client, to, answer = std::move(answer)] {
                                               --self->in_flight_;
                                               if (!answer.empty()) self->reply(client, to, answer);
                                           });
                             });
    }
}

void DnsUdpServer::reply(const udp::endpoint& client, const net::ip::address_v4& asked,
                         const std::string& answer) {
    if (!socket_.is_open()) return;
    // From the address the sandbox asked, whichever it was (resolvers check).
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(client.port());
    to.sin_addr.s_addr = htonl(client.address().to_v4().to_uint());
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(in_pktinfo))] = {};
    iovec iov{const_cast<char*>(answer.data()), answer.size()};
    msghdr msg{};
    msg.msg_name = &to;
    msg.msg_namelen = sizeof to;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_IP;
    c->cmsg_type = IP_PKTINFO;
    c->cmsg_len = CMSG_LEN(sizeof(in_pktinfo));
    in_pktinfo info{};
    info.ipi_spec_dst.s_addr = htonl(asked.to_uint());
    std::memcpy(CMSG_DATA(c), &info, sizeof info);
    ::sendmsg(socket_.native_handle(), &msg, MSG_DONTWAIT);
}

// ------------------------------------------------------------------ TCP

DnsTcpSession::DnsTcpSession(std::shared_ptr<EgressContext> ctx, net::ip::tcp::socket socket,
                             ConnectionSlot slot)
    : ctx_(std::move(ctx)),
      socket_(std::move(socket)),
      idle_(socket_.get_executor()),
      slot_(std::move(slot)) {}

DnsTcpSession::~DnsTcpSession() {
    ctx_->leave(ticket_);
}

void DnsTcpSession::start() {
    ticket_ = ctx_->enroll(weak_from_this());
    net::post(socket_.get_executor(), [self = shared_from_this()] { self->read_length(); });
}

void DnsTcpSession::close() {
    net::post(socket_.get_executor(), [self = shared_from_this()] {
        self->finish();
        self->ctx_->leave(std::exchange(self->ticket_, 0));
    });
}

void DnsTcpSession::finish() {
    boost::system::error_code ignored;
    idle_.cancel();
    socket_.close(ignored);
}

void DnsTcpSession::read_length() {
    auto self = shared_from_this();
    idle_.expires_after(std::chrono::seconds(10));
    idle_.async_wait([self](boost::system::error_code ec) {
        if (!ec) self->finish();
    });
    net::async_read(
        socket_, net::buffer(length_), [self](boost::system::error_code ec, std::size_t) {
            if (ec) return self->finish();
            std::size_t n = (self->length_[0] << 8) | self->length_[1];
            if (n < 12) return self->finish();
            self->query_.assign(n, '\0');
            net::async_read(
                self->socket_, net::buffer(self->query_),
                [self](boost::system::error_code ec, std::size_t) {
                    if (ec) return self->finish();
                    answer_sandbox_query(
                        self->ctx_, std::move(self->query_), true, [self](std::string answer) {
                            net::post(self->socket_.get_executor(), [self, answer = std::move(
                                                                               answer)]() mutable {
                                if (answer.empty() || !self->socket_.is_open())
                                    return self->finish();
                                self->answer_.clear();
                                self->answer_.push_back(static_cast<char>(answer.size() >> 8));
                                self->answer_.push_back(static_cast<char>(answer.size() & 0xff));
                                self->answer_ += answer;
                                net::async_write(self->socket_, net::buffer(self->answer_),
                                                 [self](boost::system::error_code ec, std::size_t) {
                                                     if (ec) return self->finish();
                                                     self->read_length();
                                                 });
                            });
                        });
                });
        });
}

}  // namespace deskbox::network
