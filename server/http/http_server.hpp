// The HTTP front door of deskboxd, on Boost.Beast: accepts connections, reads each request's
// header, lets the router decide on it (credentials, the route's body limit) before the body
// is read, reads the body within that limit (413 past it) and a server-wide budget of body
// bytes in flight (503 past it), hands the request to the router and writes the answer. The I/O
// threads only read and write; a handler may block on a sandbox for minutes, so each runs on a
// thread of a HandlerPool and its answer is written back on the connection's strand. A route may
// take over the connection (WebSocket upgrade) by moving the stream out of the exchange. Accept
// errors (out of fds: EMFILE, ENFILE, ENOBUFS, ENOMEM) back off from 50 ms to 1 s instead of
// spinning, and open and idle connections are capped (HttpOptions).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/http/handler_pool.hpp"
#include "server/http/http_message.hpp"

namespace deskbox::server {

struct HttpOptions {
    std::string address = "127.0.0.1";
    unsigned short port = 8700;             // 0: any free port
    std::size_t threads = 2;                // I/O threads: sockets, WebSockets, VNC, port proxies
    std::size_t max_handlers = 256;         // requests handled at once; more wait for a thread
    std::size_t max_body_bytes = 64 << 20;  // the most any route takes (uploads)
    // Body bytes being read or held by handlers, over all connections: a request that would
    // pass it is answered 503 before its body is read.
    std::size_t max_body_in_flight = 256 << 20;
    std::size_t max_header_bytes = 16 << 10;
    // Open HTTP connections (WebSockets and relays taken over by a route not counted): past it
    // the oldest idle one is closed to make room, or the new one is refused when none is idle.
    std::size_t max_connections = 1024;
    // Connections waiting for a request (not yet authenticated, or idle between requests):
    // past it the oldest of them is closed.
    std::size_t max_idle_connections = 256;
};

// What the acceptor did, for /metrics (process-wide: deskboxd runs one HttpServer).
struct HttpConnectionCounters {
    std::atomic<std::uint64_t> open{0}, idle{0};
    std::atomic<std::uint64_t> accepted{0}, refused{0}, idle_closed{0}, accept_errors{0};
};
HttpConnectionCounters& http_connection_counters();

// A handler answers with a response, or takes the socket (for WebSockets) and returns nullopt.
struct HttpExchange {
    HttpRequest& request;
    boost::beast::tcp_stream* stream;  // valid during the call; move it out to keep it
    bool taken = false;                // set by a handler that moved the stream out
};
using HttpHandler = std::function<HttpResponse(HttpExchange&)>;

// What a request's header alone decides, before its body is read: a refusal (answered at
// once, the body never read, the connection closed), or how large its body may be.
struct HeaderDecision {
    std::optional<HttpResponse> refusal;
    std::size_t body_limit = 0;  // 0: the server's max_body_bytes
};
// Given the request with its header only (the body is empty).
using HeaderCheck = std::function<HeaderDecision(HttpRequest& header)>;

class HttpServer {
  public:
    // Binds at once (throws std::system_error naming the address if it can't).
    // `check` (optional) runs on each request's header before its body is read.
    HttpServer(HttpOptions options, HttpHandler handler, HeaderCheck check = {});
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    void start();
    void stop();  // stops accepting, closes connections, joins threads
    unsigned short port() const { return port_; }
    const std::string& address() const { return options_.address; }

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    HttpOptions options_;
    unsigned short port_ = 0;
};

}  // namespace deskbox::server
