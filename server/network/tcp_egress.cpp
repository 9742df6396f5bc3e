#include "server/network/tcp_egress.hpp"

#include <netinet/in.h>
#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <utility>

#include "server/network/dns_service.hpp"

namespace deskbox::network {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

const char* protocol_name(WireProtocol p) {
    switch (p) {
        case WireProtocol::http:
            return "http";
        case WireProtocol::tls:
            return "tls";
        case WireProtocol::other:
            return "other";
    }
    return "other";
}

void set_receive_low_water(tcp::socket& socket, int bytes) {
    ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof bytes);
}

// Peeks at what the client sent so far without taking it: the upstream gets it all later.
std::string peek(tcp::socket& socket) {
    std::string buffer(kMaxSniffBytes, '\0');
    ssize_t n =
        ::recv(socket.native_handle(), buffer.data(), buffer.size(), MSG_PEEK | MSG_DONTWAIT);
    buffer.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    return buffer;
}

}  // namespace

// ------------------------------------------------------------------ listener

TcpEgressListener::TcpEgressListener(std::shared_ptr<EgressContext> ctx, UniqueFd fd)
    : ctx_(std::move(ctx)), acceptor_(net::make_strand(ctx_->core.io())) {
    acceptor_.assign(tcp::v4(), fd.release());
}

TcpEgressListener::~TcpEgressListener() {
    ctx_->leave(ticket_);
}

void TcpEgressListener::start() {
    ticket_ = ctx_->enroll(weak_from_this());
    net::post(acceptor_.get_executor(), [self = shared_from_this()] { self->accept(); });
}

void TcpEgressListener::close() {
    net::post(acceptor_.get_executor(), [self = shared_from_this()] {
        boost::system::error_code ignored;
        self->acceptor_.close(ignored);
        self->ctx_->leave(std::exchange(self->ticket_, 0));
    });
}

void TcpEgressListener::accept() {
    if (!acceptor_.is_open()) return;
    acceptor_.async_accept(
        net::make_strand(ctx_->core.io()),
        [self = shared_from_this()](boost::system::error_code ec, tcp::socket socket) {
            if (ec == net::error::operation_aborted || !self->acceptor_.is_open()) return;
            if (ec) {
                // Out of fds or memory: pause instead of spinning, then go on.
                auto timer = std::make_shared<net::steady_timer>(self->acceptor_.get_executor());
                timer->expires_after(std::chrono::milliseconds(100));
                timer->async_wait([self, timer](boost::system::error_code) { self->accept(); });
                return;
            }
            if (!self->ctx_->stopped())
                std::make_shared<TcpEgressConnection>(self->ctx_, std::move(socket))->start();
            self->accept();
        });
}

// ------------------------------------------------------------------ one connection

TcpEgressConnection::TcpEgressConnection(std::shared_ptr<EgressContext> ctx, tcp::socket client)
    : ctx_(std::move(ctx)),
      client_(std::move(client)),
      upstream_(client_.get_executor()),
      timer_(client_.get_executor()) {}

TcpEgressConnection::~TcpEgressConnection() {
    if (counted_open_) ctx_->stats.closed();
    ctx_->leave(ticket_);
}

void TcpEgressConnection::start() {
    ticket_ = ctx_->enroll(weak_from_this());
    net::post(client_.get_executor(), [self = shared_from_this()] {
        boost::system::error_code ec;
        // TPROXY delivered the connection as it was sent: its local address is where the
        // sandbox meant to go.
        self->destination_ = self->client_.local_endpoint(ec);
        if (!ec) self->source_ = self->client_.remote_endpoint(ec);
        if (ec) return self->finish_quietly();
        self->label_ = self->destination_.address().to_string();
        // Each connection holds deskboxd's fds (six once relayed): past the sandbox's share of
        // them it is reset at once, before any more are spent on it.
        const std::size_t cap = self->ctx_->core.options().max_connections;
        self->slot_ = self->ctx_->take_slot(cap);
        if (!self->slot_)
            return self->refuse(
                RefusedReason::over_cap,
                std::to_string(cap) + " connections open already (--egress-max-connections)");
        if (self->destination_.port() == 53) {
            std::make_shared<DnsTcpSession>(self->ctx_, std::move(self->client_),
                                            std::move(self->slot_))
                ->start();
            return;
        }
        self->ctx_->stats.opened();
        self->counted_open_ = true;
        self->decided_under_ = self->ctx_->policy();
        auto early = self->decided_under_->decide_by_address(self->destination_.address(),
                                                             self->ctx_->core.host_view());
        if (early && !early->allowed) return self->block(early->reason);
        if (early && !self->may_need_rules()) {
            self->reason_ = early->reason;
            return self->connect();
        }
        self->wait_for_first_bytes();
    });
}

void TcpEgressConnection::close() {
    net::post(client_.get_executor(), [self = shared_from_this()] {
        self->closed_ = true;
        self->timer_.cancel();
        if (self->relay_) self->relay_->abort();  // the relays share our strand
        if (self->http_relay_) self->http_relay_->abort();
        if (self->tls_relay_) self->tls_relay_->abort();
        reset_socket(self->client_);
        reset_socket(self->upstream_);
        if (self->tls_client_) reset_socket(self->tls_client_->next_layer());
        if (self->tls_upstream_) reset_socket(self->tls_upstream_->next_layer());
        // Its sockets are closed: a lookup still on its way no longer holds the network up.
        self->ctx_->leave(std::exchange(self->ticket_, 0));
    });
}

void TcpEgressConnection::recheck_policy() {
    net::post(client_.get_executor(), [self = shared_from_this()] {
        // Not relayed yet: a decision still to come reads the new policy, and one made under
        // the old is checked again as its relay starts (relay_started).
        if (self->closed_ || (!self->relay_ && !self->http_relay_ && !self->tls_relay_)) return;
        self->enforce_policy();
    });
}

void TcpEgressConnection::relay_started() {
    if (ctx_->policy() != decided_under_) enforce_policy();
}

void TcpEgressConnection::enforce_policy() {
    const auto policy = ctx_->policy();
    decided_under_ = policy;
    const HostView& host = ctx_->core.host_view();
    std::optional<Verdict> v;
    if (decided_) {
        v = policy->decide(*decided_, host);
    } else if (!(v = policy->decide_by_address(destination_.address(), host))) {
        // The address decided before; a name decides now.
        Destination d = destination_named(protocol_, name_);
        d.learned_from_dns = !d.name && ctx_->dns_memory.name_of(d.address);
        v = policy->decide(d, host);
    }
    if (v->allowed) return;
    cut_ = "the sandbox's network policy changed: " + v->reason;
    if (http_relay_) http_relay_->cut(*cut_);
    if (tls_relay_) tls_relay_->cut(*cut_);
    if (relay_) relay_->abort();
}

void TcpEgressConnection::wait_for_first_bytes() {
    auto self = shared_from_this();
    timer_.expires_after(ctx_->core.options().first_bytes_timeout);
    timer_.async_wait([self](boost::system::error_code ec) {
        if (ec || self->closed_) return;
        self->timed_out_ = true;
        boost::system::error_code ignored;
        self->client_.cancel(ignored);
    });
    client_.async_wait(tcp::socket::wait_read, [self](boost::system::error_code ec) {
        if (self->closed_) return;
        if (self->timed_out_) {
            // The client said nothing (a server-speaks-first protocol) or not enough.
            std::string seen = peek(self->client_);
            SniffResult r = sniff_client_start(seen);
            if (!r.complete) {
                r.complete = true;
                if (!seen.empty() && r.protocol != WireProtocol::other) {
                    r.malformed = true;
                    r.detail = "the start of the request did not finish in time";
                }
            }
            return self->decide(r);
        }
        if (ec) return self->finish_quietly();
        self->on_readable();
    });
}

void TcpEgressConnection::on_readable() {
    std::string seen = peek(client_);
    if (seen.empty()) {
        // Readable with nothing to read: the client closed (or reset) before saying anything.
        char probe;
        if (::recv(client_.native_handle(), &probe, 1, MSG_PEEK | MSG_DONTWAIT) <= 0 &&
            errno != EAGAIN)
            return finish_quietly();
    }
    peeked_ = seen.size();
    SniffResult r = sniff_client_start(seen);
    if (!r.complete) {
        // Wake when more arrives (the peeked bytes stay queued and would wake us at once).
        set_receive_low_water(client_, static_cast<int>(peeked_) + 1);
        auto self = shared_from_this();
        client_.async_wait(tcp::socket::wait_read, [self](boost::system::error_code ec) {
            if (self->closed_) return;
            if (self->timed_out_) {
                SniffResult partial = sniff_client_start(peek(self->client_));
                partial.complete = true;
                partial.malformed = partial.protocol != WireProtocol::other;
                partial.detail = "the start of the request did not finish in time";
                return self->decide(partial);
            }
            if (ec) return self->finish_quietly();
            self->on_readable();
        });
        return;
    }
    timer_.cancel();
    decide(r);
}

void TcpEgressConnection::decide(const SniffResult& r) {
    timer_.cancel();
    set_receive_low_water(client_, 1);
    protocol_ = r.protocol;
    name_ = r.name;
    if (r.malformed)
        return block(std::string("malformed ") + protocol_name(r.protocol) + " (" + r.detail + ")");
    Destination d = destination_named(r.protocol, r.name);
    if (r.name) {
        label_ = *r.name;
        if (!d.name_resolves_to_address && ctx_->policy()->name_verdict(*r.name).allowed) {
            // Not from this sandbox's own DNS answers (its cache, --resolve, a hosts file):
            // ask the upstream what the name is.
            auto self = shared_from_this();
            lookup_for_proxy(ctx_, *r.name, [self, d, r]() mutable {
                net::post(self->client_.get_executor(), [self, d, r]() mutable {
                    if (self->closed_) return;
                    d.name_resolves_to_address =
                        self->ctx_->dns_memory.resolves_to(*d.name, d.address);
                    self->decide_now(d, r);
                });
            });
            return;
        }
    } else if (auto learned = ctx_->dns_memory.name_of(d.address)) {
        d.learned_from_dns = true;
        if (r.protocol == WireProtocol::other) label_ = *learned;
    }
    decide_now(d, r);
}

void TcpEgressConnection::decide_now(Destination d, const SniffResult&) {
    decided_under_ = ctx_->policy();
    Verdict v = decided_under_->decide(d, ctx_->core.host_view());
    if (!v.allowed) return block(v.reason);
    reason_ = v.reason;
    decided_ = d;
    connect();
}

void TcpEgressConnection::block(const std::string& reason) {
    count_blocked(reason);
    timer_.cancel();
    reset_socket(client_);
}

void TcpEgressConnection::count_blocked(const std::string& reason) {
    reason_ = reason;
    ctx_->stats.connection(label_, false, reason);
    nlohmann::json detail = describe();
    detail["decision"] = "blocked";
    ctx_->audit("egress", detail);
}

void TcpEgressConnection::refuse(RefusedReason why, const std::string& reason) {
    reason_ = reason;
    ctx_->stats.refused(why);
    nlohmann::json detail = describe();
    detail["decision"] = "refused";
    detail["refused"] = refused_reason_name(why);
    ctx_->audit("egress", detail);
    timer_.cancel();
    reset_socket(client_);
    reset_socket(upstream_);
}

void TcpEgressConnection::connect() {
    auto self = shared_from_this();
    // Points into the core's options, which outlive every connection: nothing copied.
    const UpstreamProxy* proxy = ctx_->core.options().egress_proxy_for(*ctx_->policy());
    const tcp::endpoint first_hop = proxy ? proxy->endpoint : destination_;
    boost::system::error_code ec;
    upstream_.open(first_hop.protocol(), ec);
    if (ec) return refuse(RefusedReason::no_fds, "cannot open a socket: " + ec.message());
    // One bound for the connect and a proxy's tunnel together.
    timer_.expires_after(ctx_->core.options().connect_timeout);
    timer_.async_wait([self](boost::system::error_code ec) {
        if (ec) return;
        self->connect_timed_out_ = true;
        boost::system::error_code ignored;
        self->upstream_.cancel(ignored);
    });
    upstream_.async_connect(first_hop, [self, proxy](boost::system::error_code ec) {
        if (self->closed_) return;
        if (ec) {
            self->timer_.cancel();
            std::string why = ec == net::error::operation_aborted ? "timed out" : ec.message();
            return self->not_connected(proxy ? "the egress proxy " + proxy->describe() +
                                                   " did not accept: " + why
                                             : "the destination did not accept: " + why);
        }
        if (!proxy) {
            self->timer_.cancel();
            return self->relay();
        }
        ProxyTunnel::open(self->upstream_, *proxy, self->proxy_target(), self->destination_.port(),
                          [self](const std::string& error) {
                              self->timer_.cancel();
                              if (self->closed_) return;
                              if (!error.empty())
                                  return self->not_connected(
                                      self->connect_timed_out_ ? error + " (timed out)" : error);
                              self->relay();
                          });
    });
}

// Allowed, but the destination (or the proxy to it) is not there: the sandbox sees what it
// would have seen directly, at once (a reset).
void TcpEgressConnection::not_connected(const std::string& error) {
    ctx_->stats.connection(label_, true, {});
    nlohmann::json detail = describe();
    detail["decision"] = "allowed";
    detail["error"] = error;
    ctx_->audit("egress", detail);
    reset_socket(client_);
    reset_socket(upstream_);
}

// What the upstream proxy is asked to reach: the name when the policy's decision rests on it
// (the proxy resolves it), else the address the sandbox connected to.
std::string TcpEgressConnection::proxy_target() const {
    const auto address = destination_.address();
    if (name_ && ctx_->dns_memory.resolves_to(*name_, address)) return *name_;
    if (!name_)
        if (auto learned = ctx_->dns_memory.name_of(address)) return *learned;
    return address.to_string();
}

void TcpEgressConnection::relay() {
    set_receive_low_water(client_, 1);
    if (!name_) {
        // Nothing waited for the name (the address decided): take it for the counters if the
        // client already sent it.
        SniffResult r = sniff_client_start(peek(client_));
        if (r.complete) {
            protocol_ = r.protocol;
            name_ = r.name;
            if (r.name) label_ = *r.name;
        }
        if (!name_)
            if (auto learned = ctx_->dns_memory.name_of(destination_.address())) label_ = *learned;
    }
    boost::system::error_code ignored;
    // A relay passes on writes as they come: Nagle on either of its sockets would hold a small
    // one (a TLS session ticket, a response's last record) for the peer's delayed ACK (40 ms).
    upstream_.set_option(tcp::no_delay(true), ignored);
    client_.set_option(tcp::no_delay(true), ignored);
    upstream_.set_option(net::socket_base::keep_alive(true), ignored);
    if (relays_http()) return relay_http();
    if (terminates_tls()) return relay_tls();
    auto ctx = ctx_;
    // The relay's completion owns the connection until the relay ends (the relay lets go of
    // it then, which ends the cycle).
    std::error_code relay_error;
    relay_ = SpliceRelay::create(
        client_, upstream_,
        [self = shared_from_this()](const SpliceRelay::Result& result) {
            self->relayed(result.a_to_b, result.b_to_a, result.reset ? result.error : "",
                          self->cut_);
            // The relay's handlers hold it; ours lets the connection go.
            net::post(self->timer_.get_executor(), [self] { self->relay_.reset(); });
        },
        relay_error, ctx_->limiter,
        [ctx](std::uint64_t out, std::uint64_t in) { ctx->stats.bytes_live(out, in); });
    if (!relay_)
        return refuse(RefusedReason::no_fds,
                      "deskboxd cannot relay the connection: " + relay_error.message());
    ctx_->stats.connection(label_, true, reason_);
    relay_->close_half_closed_after(ctx_->core.options().half_closed_idle);
    relay_->start();
    relay_started();
}

void TcpEgressConnection::relayed(std::uint64_t out, std::uint64_t in, const std::string& ended,
                                  const std::optional<std::string>& cut) {
    ctx_->stats.transferred(label_, out, in);
    if (cut) ctx_->stats.cut(label_, *cut);
    nlohmann::json detail = describe();
    detail["decision"] = cut ? "cut" : "allowed";
    detail["bytes_out"] = out;
    detail["bytes_in"] = in;
    if (cut) detail["reason"] = *cut;
    if (!ended.empty() && !cut) detail["ended"] = ended;
    ctx_->audit("egress", detail);
}

bool TcpEgressConnection::relays_http() const {
    return protocol_ == WireProtocol::http && ctx_->policy()->inspects_http();
}

// The address settles the connection, but DNS gave it out for a rule's domain: the proxy
// waits for the request to learn whether it is HTTP, whose headers the rules set.
bool TcpEgressConnection::may_need_rules() const {
    if (ctx_->policy()->rules().empty()) return false;
    auto name = ctx_->dns_memory.name_of(destination_.address());
    return name && ctx_->policy()->rules().names(*name);
}

void TcpEgressConnection::relay_http() {
    auto self = shared_from_this();
    http_relay_ = std::make_shared<HttpRelay>(
        std::move(client_), std::move(upstream_),
        [self](HttpRelay::RequestHead& head) { return self->inspect_request(head); },
        [self](const HttpRelay::Result& result) {
            self->relayed(result.out, result.in, result.reset ? result.error : "", result.cut);
            net::post(self->timer_.get_executor(), [self] { self->http_relay_.reset(); });
        },
        ctx_->limiter,
        [ctx = ctx_](std::uint64_t out, std::uint64_t in) { ctx->stats.bytes_live(out, in); });
    ctx_->stats.connection(label_, true, reason_);
    http_relay_->close_half_closed_after(ctx_->core.options().half_closed_idle);
    // Out of fds for its pipes, it copies through its buffers instead: slower, still correct.
    (void)http_relay_->splice_bodies();
    http_relay_->start();
    relay_started();
}

// Every request on the connection, not only the first: its Host (and an absolute-form target)
// must be the name already decided, or one the policy allows at this address; then the
// credential rules for its name and path set their headers.
std::optional<std::string> TcpEgressConnection::inspect_request(HttpRelay::RequestHead& head) {
    SniffResult r = sniff_http_request(HttpRelay::serialize(head));
    if (r.malformed) return "malformed http (" + r.detail + ")";
    if (auto why = check_request_host(r)) return why;
    if (!r.name || ctx_->policy()->rules().empty()) return std::nullopt;
    return apply_rules(*r.name, head);
}

std::optional<std::string> TcpEgressConnection::apply_rules(const std::string& name,
                                                            HttpRelay::RequestHead& head) {
    const auto policy = ctx_->policy();  // the rules point into it
    auto rules = policy->rules().matching(
        name, request_path(std::string_view(head.target().data(), head.target().size())));
    if (rules.empty()) return std::nullopt;
    // A rule's values go only where its name really is: a sandbox that sent Host: api.x to
    // an address of its own choosing gets nothing.
    if (!ctx_->dns_memory.resolves_to(name, destination_.address()))
        return "Host " + name + " does not resolve to " + destination_.address().to_string() +
               " (credential rules send only to the name's own addresses)";
    for (const auto* rule : rules)
        for (const auto& h : rule->headers) {
            std::optional<std::string> value = h.value;
            if (h.secret) {
                const auto& lookup = ctx_->core.options().secret_value;
                value = lookup ? lookup(*h.secret) : std::nullopt;
                if (!value)
                    return "secret " + *h.secret + " of the rule for " + rule->domain_text() +
                           " does not exist any more";
            }
            head.set(h.name, *value);
            injected_.insert(h.name);
        }
    return std::nullopt;
}

Destination TcpEgressConnection::destination_named(WireProtocol protocol,
                                                   const std::optional<std::string>& name) const {
    Destination d;
    d.address = destination_.address();
    d.port = destination_.port();
    d.protocol = protocol;
    d.name = name;
    d.name_resolves_to_address = name && ctx_->dns_memory.resolves_to(*name, d.address);
    return d;
}

std::optional<std::string> TcpEgressConnection::check_request_host(const SniffResult& r) const {
    if (r.name && name_ && *r.name == *name_) return std::nullopt;
    Verdict v = ctx_->policy()->decide(destination_named(WireProtocol::http, r.name),
                                       ctx_->core.host_view());
    if (v.allowed) return std::nullopt;
    return "Host " +
           (r.name              ? *r.name
            : r.literal.empty() ? "(none)"
                                : r.literal) +
           ": " + v.reason;
}

void TcpEgressConnection::finish_quietly() {
    timer_.cancel();
    boost::system::error_code ignored;
    client_.close(ignored);
    upstream_.close(ignored);
}

nlohmann::json TcpEgressConnection::describe() const {
    nlohmann::json d = {{"destination", label_},
                        {"address", destination_.address().to_string()},
                        {"port", destination_.port()},
                        {"protocol", protocol_name(protocol_)},
                        {"reason", reason_}};
    if (name_) d["name"] = *name_;
    if (terminated_tls_) d["tls"] = "terminated";
    // Header names only, never values.
    if (!injected_.empty()) d["injected_headers"] = injected_;
    d["duration_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - started_)
                           .count();
    return d;
}

}  // namespace deskbox::network
