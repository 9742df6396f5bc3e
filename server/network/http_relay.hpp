// Carries one HTTP/1 connection request by request instead of splicing bytes: each request head
// the sandbox sends is parsed (Boost.Beast's parser), shown to an inspector that may refuse it
// (its Host against the policy) or change its headers (credential rules), and sent on
// re-serialized, so the server reads exactly the head that was checked; bodies are streamed
// (chunked bodies re-chunked). Responses go back as bytes. An upgraded connection (Upgrade,
// CONNECT) is carried as bytes after its request. A refused request cuts the connection: both
// sides are reset.
//
// The same relay carries plain TCP (HttpRelay) and TLS that the proxy terminated on both sides
// (TlsHttpRelay: the sandbox's TLS ends at the proxy, the server's begins there), where a clean
// end of either side closes both with a TLS close_notify: TLS half-closes are not carried.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/network/rate_limiter.hpp"
#include "server/network/splice_relay.hpp"

namespace deskbox::network {

using HttpRequestHead = boost::beast::http::request_header<>;
using TlsStream = boost::asio::ssl::stream<boost::asio::ip::tcp::socket>;

struct HttpRelayResult {
    std::uint64_t out = 0, in = 0;  // bytes sent upstream (as rewritten) and back
    std::uint64_t requests = 0;
    bool reset = false;
    std::string error;
    std::optional<std::string> cut;  // why a request was refused
};

// A head as sent: the request line, the fields and the blank line.
std::string serialize_request_head(const HttpRequestHead& head);

template <class Stream>
class BasicHttpRelay : public std::enable_shared_from_this<BasicHttpRelay<Stream>> {
  public:
    using RequestHead = HttpRequestHead;
    // Sees each request head before it is sent (and may change its fields); a reason refuses
    // it and cuts the connection.
    using Inspect = std::function<std::optional<std::string>(RequestHead&)>;
    using Result = HttpRelayResult;
    using Done = std::function<void(const Result&)>;
    using Progress = std::function<void(std::uint64_t out, std::uint64_t in)>;

    // Both streams must use the same strand executor; they are moved in.
    BasicHttpRelay(Stream client, Stream upstream, Inspect inspect, Done done,
                   std::shared_ptr<RateLimiter> limit_out = nullptr, Progress progress = {});
    static std::string serialize(const RequestHead& head) { return serialize_request_head(head); }

    void close_half_closed_after(std::chrono::milliseconds idle) { half_closed_.set_idle(idle); }
    // Plain TCP: sized request bodies and every response go socket to socket with splice(2)
    // (two pipes, four fds: the egress fd budget counts six a connection). Call before start;
    // an error (out of fds) leaves the relay copying through its buffers.
    std::error_code splice_bodies();
    void start();
    void abort();  // on the relay's strand: resets both and finishes
    // On the relay's strand: cuts the connection for `reason` (a policy change).
    void cut(const std::string& reason);

  private:
    using Parser = boost::beast::http::request_parser<boost::beast::http::buffer_body>;
    static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;
    void read_head();
    void on_head(boost::system::error_code ec);
    void read_body();
    void sized_body();  // a Content-Length body, copied as bytes
    void send_up(std::string bytes, std::function<void()> then);
    void throttled_write(std::function<void()> then);
    void raw_up();
    void pump_down();
    void direction_done(bool up);
    void finish(bool reset, const std::string& error);
    void close_tls_gracefully();

    Stream client_, upstream_;
    Inspect inspect_;
    Done done_;
    std::shared_ptr<RateLimiter> limiter_;
    Progress progress_;
    boost::asio::steady_timer limit_timer_;
    HalfClosedWatch half_closed_;
    boost::beast::flat_buffer in_;
    std::optional<Parser> parser_;
    bool chunked_ = false, upgrade_ = false;
    std::uint64_t sized_left_ = 0;
    std::array<char, 256 * 1024> body_buf_{}, down_buf_{};
    std::string out_;  // what is being written upstream
    std::size_t out_cleared_ = 0;
    SpliceDirection up_splice_, down_splice_;
    bool spliced_ = false;
    bool up_done_ = false, down_done_ = false, finished_ = false;
    Result result_;
};

using HttpRelay = BasicHttpRelay<boost::asio::ip::tcp::socket>;
using TlsHttpRelay = BasicHttpRelay<TlsStream>;

extern template class BasicHttpRelay<boost::asio::ip::tcp::socket>;
extern template class BasicHttpRelay<TlsStream>;

}  // namespace deskbox::network
