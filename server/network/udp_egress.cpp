#include "server/network/udp_egress.hpp"

#include <netinet/in.h>
#include <sys/socket.h>

#include <boost/asio/post.hpp>

#include <algorithm>
#include <cstring>
#include <utility>

#include "server/network/transparent_socket.hpp"

namespace deskbox::network {
namespace {

namespace net = boost::asio;
using udp = net::ip::udp;

constexpr std::size_t kMaxDatagram = 65535;

udp::endpoint endpoint_of(const sockaddr_in& a) {
    return udp::endpoint(net::ip::address_v4(ntohl(a.sin_addr.s_addr)), ntohs(a.sin_port));
}

sockaddr_in sockaddr_of(const udp::endpoint& e) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(e.port());
    a.sin_addr.s_addr = htonl(e.address().to_v4().to_uint());
    return a;
}

std::string flow_key(const udp::endpoint& source, const udp::endpoint& destination) {
    return source.address().to_string() + ":" + std::to_string(source.port()) + ">" +
           destination.address().to_string() + ":" + std::to_string(destination.port());
}

}  // namespace

UdpEgressListener::UdpEgressListener(std::shared_ptr<EgressContext> ctx, UniqueFd fd)
    : ctx_(std::move(ctx)), strand_(net::make_strand(ctx_->core.io())), socket_(strand_) {
    socket_.assign(udp::v4(), fd.release());
    socket_.non_blocking(true);
}

UdpEgressListener::~UdpEgressListener() {
    ctx_->leave(ticket_);
}

void UdpEgressListener::start() {
    ticket_ = ctx_->enroll(weak_from_this());
    net::post(strand_, [self = shared_from_this()] { self->wait(); });
}

void UdpEgressListener::close() {
    net::post(strand_, [self = shared_from_this()] {
        boost::system::error_code ignored;
        self->socket_.close(ignored);
        auto flows = std::move(self->flows_);
        for (auto& [key, flow] : flows) flow->close();
        self->ctx_->leave(std::exchange(self->ticket_, 0));
    });
}

void UdpEgressListener::recheck_policy() {
    net::post(strand_, [self = shared_from_this()] {
        auto flows = std::move(self->flows_);
        for (auto& [key, flow] : flows) flow->close();
    });
}

void UdpEgressListener::forget(const std::string& key) {
    flows_.erase(key);
}

void UdpEgressListener::wait() {
    if (!socket_.is_open()) return;
    socket_.async_wait(udp::socket::wait_read,
                       [self = shared_from_this()](boost::system::error_code ec) {
                           if (ec) return;
                           self->read_all();
                           self->wait();
                       });
}

void UdpEgressListener::read_all() {
    for (int i = 0; i < 64 && socket_.is_open(); ++i) {
        auto datagram = receive_datagram(socket_.native_handle());
        if (!datagram) return;
        first_datagram(endpoint_of(datagram->from), endpoint_of(datagram->to),
                       std::move(datagram->payload));
    }
}

void UdpEgressListener::first_datagram(const udp::endpoint& source,
                                       const udp::endpoint& destination, std::string payload) {
    std::string key = flow_key(source, destination);
    if (flows_.count(key)) return;  // raced its own flow socket; the flow carries on
    Destination d;
    d.address = destination.address();
    d.port = destination.port();
    auto learned = ctx_->dns_memory.name_of(d.address);
    d.learned_from_dns = learned.has_value();
    Verdict v = ctx_->policy()->decide(d, ctx_->core.host_view());
    if (v.allowed && ctx_->core.options().egress_proxy_for(*ctx_->policy()))
        v = {false, "UDP is not carried through the egress proxy (--egress-proxy)"};
    std::string label = destination_label(learned, d.address);
    if (!v.allowed) {
        ctx_->stats.udp_flow(false);
        ctx_->stats.connection(label, false, v.reason);
        ctx_->audit("egress", {{"destination", label},
                               {"address", d.address.to_string()},
                               {"port", d.port},
                               {"protocol", "udp"},
                               {"decision", "blocked"},
                               {"reason", v.reason}});
        return;
    }
    if (flows_.size() >= ctx_->core.options().max_udp_flows) {
        auto idlest =
            std::min_element(flows_.begin(), flows_.end(), [](const auto& a, const auto& b) {
                return a.second->last_active() < b.second->last_active();
            });
        auto flow = idlest->second;
        flows_.erase(idlest);
        flow->close();
    }
    try {
        // Towards the sandbox: in the router namespace, posing as the remote.
        UniqueFd inside = ctx_->router->socket(AF_INET, SOCK_DGRAM);
        int one = 1;
        ::setsockopt(inside.get(), SOL_IP, IP_TRANSPARENT, &one, sizeof one);
        ::setsockopt(inside.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in as_remote = sockaddr_of(destination), sandbox = sockaddr_of(source);
        if (::bind(inside.get(), reinterpret_cast<sockaddr*>(&as_remote), sizeof as_remote) != 0 ||
            ::connect(inside.get(), reinterpret_cast<sockaddr*>(&sandbox), sizeof sandbox) != 0)
            throw NetworkError(std::string("UDP flow socket: ") + std::strerror(errno));
        udp::socket to_sandbox(strand_);
        to_sandbox.assign(udp::v4(), inside.release());
        // Towards the remote: in the host's namespace (this thread's).
        udp::socket to_remote(strand_);
        to_remote.open(udp::v4());
        to_remote.connect(destination);
        ctx_->stats.udp_flow(true);
        ctx_->stats.connection(label, true, v.reason);
        auto flow = std::make_shared<UdpFlow>(ctx_, weak_from_this(), key, label,
                                              std::move(to_sandbox), std::move(to_remote));
        flows_[key] = flow;
        flow->start(std::move(payload));
    } catch (const std::exception& e) {
        // Out of fds (or threads, or memory) for the flow's sockets: this flow is dropped,
        // counted and audited; deskboxd goes on.
        ctx_->stats.refused(RefusedReason::no_fds);
        ctx_->audit("egress", {{"destination", label},
                               {"protocol", "udp"},
                               {"decision", "refused"},
                               {"refused", "no_fds"},
                               {"error", e.what()}});
    }
}

UdpFlow::UdpFlow(std::shared_ptr<EgressContext> ctx, std::weak_ptr<UdpEgressListener> listener,
                 std::string key, std::string label, udp::socket to_sandbox, udp::socket to_remote)
    : ctx_(std::move(ctx)),
      listener_(std::move(listener)),
      key_(std::move(key)),
      label_(std::move(label)),
      to_sandbox_(std::move(to_sandbox)),
      to_remote_(std::move(to_remote)),
      idle_(to_sandbox_.get_executor()) {}

void UdpFlow::start(std::string first_payload) {
    boost::system::error_code ignored;
    to_sandbox_.non_blocking(true, ignored);
    to_remote_.non_blocking(true, ignored);
    to_remote_.send(net::buffer(first_payload), 0, ignored);
    bytes_out_ += first_payload.size();
    ctx_->stats.bytes_live(first_payload.size(), 0);
    arm_idle();
    pump(to_sandbox_, to_remote_, true);
    pump(to_remote_, to_sandbox_, false);
}

void UdpFlow::pump(udp::socket& from, udp::socket& to, bool outbound) {
    auto self = shared_from_this();
    from.async_wait(udp::socket::wait_read, [self, &from, &to,
                                             outbound](boost::system::error_code ec) {
        if (ec || self->ended_) return;
        std::string buffer(kMaxDatagram, '\0');
        for (int i = 0; i < 64; ++i) {
            ssize_t n = ::recv(from.native_handle(), buffer.data(), buffer.size(), MSG_DONTWAIT);
            if (n < 0) break;  // EAGAIN, or an ICMP error the remote sent: nothing to pass on
            std::uint64_t size = static_cast<std::uint64_t>(n);
            if (outbound && self->ctx_->limiter && self->ctx_->limiter->take(size) < size)
                continue;  // over the egress limit: dropped, as a saturated link would
            ::send(to.native_handle(), buffer.data(), static_cast<std::size_t>(n), MSG_DONTWAIT);
            (outbound ? self->bytes_out_ : self->bytes_in_) += size;
            self->ctx_->stats.bytes_live(outbound ? size : 0, outbound ? 0 : size);
            self->last_active_ = std::chrono::steady_clock::now();
        }
        self->pump(from, to, outbound);
    });
}

void UdpFlow::arm_idle() {
    auto self = shared_from_this();
    idle_.expires_at(last_active_ + ctx_->core.options().udp_idle);
    idle_.async_wait([self](boost::system::error_code ec) {
        if (ec || self->ended_) return;
        if (std::chrono::steady_clock::now() - self->last_active_ >=
            self->ctx_->core.options().udp_idle)
            return self->end();
        self->arm_idle();
    });
}

void UdpFlow::close() {
    if (ended_) return;
    ended_ = true;
    boost::system::error_code ignored;
    idle_.cancel();
    to_sandbox_.close(ignored);
    to_remote_.close(ignored);
    ctx_->stats.transferred(label_, bytes_out_, bytes_in_);
}

void UdpFlow::end() {
    close();
    if (auto listener = listener_.lock()) listener->forget(key_);
}

}  // namespace deskbox::network
