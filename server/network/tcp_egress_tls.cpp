// TcpEgressConnection's TLS termination, for names credential rules apply to (the rest of the
// connection is in tcp_egress.cpp).
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "server/network/tcp_egress.hpp"
#include "server/network/tls_interception.hpp"

namespace deskbox::network {

namespace {
namespace net = boost::asio;
}  // namespace

bool TcpEgressConnection::terminates_tls() const {
    // Only where the name really is (as for plain HTTP): a ClientHello naming a rule's domain
    // sent to an address of the sandbox's choosing keeps its TLS and gets nothing.
    return ctx_->core.tls_interception() && protocol_ == WireProtocol::tls && name_ &&
           ctx_->policy()->rules().names(*name_) &&
           ctx_->dns_memory.resolves_to(*name_, destination_.address());
}

void TcpEgressConnection::relay_tls() {
    terminated_tls_ = true;
    try {
        sandbox_tls_ = ctx_->core.tls_interception()->sandbox_side(*name_);
    } catch (const std::exception& e) {
        return block(std::string("no certificate for the name: ") + e.what());
    }
    tls_client_.emplace(std::move(client_), *sandbox_tls_);
    auto self = shared_from_this();
    // Both handshakes together get the connect timeout: a sandbox that opens TLS and stalls
    // holds nothing for long.
    timer_.expires_after(ctx_->core.options().connect_timeout);
    timer_.async_wait([self](boost::system::error_code ec) {
        if (ec) return;
        boost::system::error_code ignored;
        if (self->tls_client_) self->tls_client_->next_layer().cancel(ignored);
        if (self->tls_upstream_) self->tls_upstream_->next_layer().cancel(ignored);
    });
    tls_client_->async_handshake(
        net::ssl::stream_base::server, [self](boost::system::error_code ec) {
            if (self->closed_) return;
            if (ec) {
                // The sandbox did not accept our certificate (it does not trust the CA) or left.
                self->timer_.cancel();
                reset_socket(self->tls_client_->next_layer());
                return self->not_connected("the sandbox's TLS handshake failed: " + ec.message());
            }
            self->tls_to_server();
        });
}

void TcpEgressConnection::tls_to_server() {
    tls_upstream_.emplace(std::move(upstream_), ctx_->core.tls_interception()->server_side());
    if (auto why = TlsInterception::prepare_server_side(*tls_upstream_, *name_))
        return refuse_over_tls(*why);
    auto self = shared_from_this();
    tls_upstream_->async_handshake(
        net::ssl::stream_base::client, [self](boost::system::error_code ec) {
            self->timer_.cancel();
            if (self->closed_) return;
            if (ec)
                return self->refuse_over_tls(
                    TlsInterception::server_handshake_failure(*self->tls_upstream_, ec));
            self->tls_relay_ = std::make_shared<TlsHttpRelay>(
                std::move(*self->tls_client_), std::move(*self->tls_upstream_),
                [self](HttpRequestHead& head) { return self->inspect_tls_request(head); },
                [self](const HttpRelayResult& result) {
                    self->relayed(result.out, result.in, result.reset ? result.error : "",
                                  result.cut);
                    net::post(self->timer_.get_executor(), [self] { self->tls_relay_.reset(); });
                },
                self->ctx_->limiter,
                [ctx = self->ctx_](std::uint64_t out, std::uint64_t in) {
                    ctx->stats.bytes_live(out, in);
                });
            self->tls_client_.reset();
            self->tls_upstream_.reset();
            self->ctx_->stats.connection(self->label_, true, self->reason_);
            self->tls_relay_->close_half_closed_after(self->ctx_->core.options().half_closed_idle);
            self->tls_relay_->start();
            self->relay_started();
        });
}

void TcpEgressConnection::refuse_over_tls(const std::string& reason) {
    count_blocked(reason);
    if (tls_upstream_) reset_socket(tls_upstream_->next_layer());
    const std::string body = "deskbox egress: " + *name_ + ": " + reason + "\n";
    auto answer = std::make_shared<std::string>(
        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\n"
        "Connection: close\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body);
    auto self = shared_from_this();
    net::async_write(*tls_client_, net::buffer(*answer),
                     [self, answer](boost::system::error_code ec, std::size_t) {
                         if (ec || self->closed_) {
                             if (self->tls_client_) reset_socket(self->tls_client_->next_layer());
                             return;
                         }
                         self->tls_client_->async_shutdown([self](boost::system::error_code) {
                             boost::system::error_code ignored;
                             if (self->tls_client_) self->tls_client_->next_layer().close(ignored);
                         });
                     });
}

// Every request on a terminated connection goes to the server its TLS was opened to: its Host
// must be that name (another would be domain fronting through our own connection).
std::optional<std::string> TcpEgressConnection::inspect_tls_request(HttpRequestHead& head) {
    SniffResult r = sniff_http_request(HttpRelay::serialize(head));
    if (r.malformed) return "malformed http (" + r.detail + ")";
    if (!r.name || *r.name != *name_)
        return "Host " +
               (r.name              ? *r.name
                : r.literal.empty() ? "(none)"
                                    : r.literal) +
               " is not the name the TLS connection was opened to (" + *name_ + ")";
    return apply_rules(*r.name, head);
}

}  // namespace deskbox::network
