// The TCP side of a sandbox's egress: a transparent listener in its router namespace gets every
// connection the sandbox opens (TPROXY keeps the address it was meant for), decides by the
// policy -- at once when the address settles it, else after reading the name the client asks
// for (TLS SNI, HTTP Host) without consuming it -- and then connects from the host's namespace
// and splices the two together. Blocked connections are reset at once; every connection is
// counted and audited with its name, decision and bytes.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/unique_fd.hpp"
#include "server/network/egress_context.hpp"
#include "server/network/http_relay.hpp"
#include "server/network/sniff.hpp"
#include "server/network/splice_relay.hpp"

namespace deskbox::network {

class TcpEgressListener : public Closeable, public std::enable_shared_from_this<TcpEgressListener> {
  public:
    TcpEgressListener(std::shared_ptr<EgressContext> ctx, UniqueFd listening_socket);
    ~TcpEgressListener() override;
    void start();
    void close() override;

  private:
    void accept();

    std::shared_ptr<EgressContext> ctx_;
    boost::asio::ip::tcp::acceptor acceptor_;
    std::uint64_t ticket_ = 0;
};

class TcpEgressConnection : public Closeable,
                            public std::enable_shared_from_this<TcpEgressConnection> {
  public:
    TcpEgressConnection(std::shared_ptr<EgressContext> ctx, boost::asio::ip::tcp::socket client);
    ~TcpEgressConnection() override;
    void start();
    void close() override;
    void recheck_policy() override;

  private:
    void wait_for_first_bytes();
    void on_readable();
    void decide(const SniffResult& sniffed);
    void decide_now(Destination destination, const SniffResult& sniffed);
    void block(const std::string& reason);
    void count_blocked(const std::string& reason);  // counted and audited as blocked
    // Allowed or not, deskboxd will not carry it (over the sandbox's cap, or out of fds): reset,
    // counted under connections.refused and audited with decision "refused".
    void refuse(RefusedReason why, const std::string& reason);
    void connect();
    void not_connected(const std::string& error);
    std::string proxy_target() const;
    void relay();
    // A policy changed between this connection's decision and its relay's start: the change's
    // recheck found nothing relayed, so the relay checks again as it starts.
    void relay_started();
    void enforce_policy();  // cuts what the policy in force forbids
    // Plain HTTP under a policy that names domains: carried request by request, each checked.
    bool relays_http() const;
    void relay_http();
    std::optional<std::string> inspect_request(HttpRelay::RequestHead& head);
    // TLS to a name credential rules apply to: the proxy ends the sandbox's TLS with a
    // certificate from deskboxd's CA, opens its own to the server (verified), and carries the
    // requests between as plain HTTP does, setting the rules' headers.
    bool terminates_tls() const;
    void relay_tls();
    void tls_to_server();
    // The server's TLS failed (its certificate, most often): the sandbox is answered 502 with
    // the reason, over its own TLS, and the connection is audited as blocked.
    void refuse_over_tls(const std::string& reason);
    std::optional<std::string> inspect_tls_request(HttpRelay::RequestHead& head);
    std::optional<std::string> check_request_host(const SniffResult& request) const;
    // Where the connection goes as the policy sees it, for `name` sent in `protocol` (whether
    // the name resolves to the address is this sandbox's DNS memory's answer).
    Destination destination_named(WireProtocol protocol,
                                  const std::optional<std::string>& name) const;
    // Sets the credential rules' headers for a request to `name`; a reason cuts it.
    std::optional<std::string> apply_rules(const std::string& name, HttpRelay::RequestHead& head);
    bool may_need_rules() const;
    void relayed(std::uint64_t out, std::uint64_t in, const std::string& ended,
                 const std::optional<std::string>& cut);
    void finish_quietly();
    nlohmann::json describe() const;

    std::shared_ptr<EgressContext> ctx_;
    boost::asio::ip::tcp::socket client_, upstream_;
    boost::asio::steady_timer timer_;
    boost::asio::ip::tcp::endpoint destination_, source_;
    std::shared_ptr<SpliceRelay> relay_;
    std::shared_ptr<HttpRelay> http_relay_;
    std::shared_ptr<boost::asio::ssl::context> sandbox_tls_;  // outlives the streams using it
    std::optional<TlsStream> tls_client_, tls_upstream_;      // while their handshakes run
    std::shared_ptr<TlsHttpRelay> tls_relay_;
    ConnectionSlot slot_;  // released when the connection (and its relay) is gone
    std::string label_;    // name or address, for counters
    std::optional<std::string> name_;
    // What the policy decided on (unset when the address alone decided), for a live change.
    std::optional<Destination> decided_;
    std::shared_ptr<const NetworkPolicy> decided_under_;  // the policy the decision read
    std::optional<std::string> cut_;  // why a live policy change cut the relayed connection
    std::set<std::string> injected_;  // header names the rules set on some request
    WireProtocol protocol_ = WireProtocol::other;
    std::string reason_;
    std::size_t peeked_ = 0;
    bool timed_out_ = false, connect_timed_out_ = false, closed_ = false, counted_open_ = false,
         terminated_tls_ = false;
    std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
    std::uint64_t ticket_ = 0;
};

}  // namespace deskbox::network
