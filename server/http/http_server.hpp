// The HTTP front door of deskboxd, on Boost.Beast: accepts connections, reads requests with
// a body limit (413 past it), hands each to the router and writes the answer. The I/O threads
// only read and write; a handler may block on a sandbox for minutes, so each runs on a thread
// of a HandlerPool and its answer is written back on the connection's strand. A route may take
// over the connection (WebSocket upgrade) by moving the stream out of the exchange.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/http/handler_pool.hpp"

namespace deskbox::server {

namespace http = boost::beast::http;
using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;

struct HttpOptions {
    std::string address = "127.0.0.1";
    unsigned short port = 8700;      // 0: any free port
    std::size_t threads = 2;         // I/O threads: sockets, WebSockets, VNC, port proxies
    std::size_t max_handlers = 256;  // requests handled at once; more wait for a thread
    std::size_t max_body_bytes = 64 << 20;
    std::size_t max_header_bytes = 16 << 10;
};

// A handler answers with a response, or takes the socket (for WebSockets) and returns nullopt.
struct HttpExchange {
    HttpRequest& request;
    boost::beast::tcp_stream* stream;  // valid during the call; move it out to keep it
    bool taken = false;                // set by a handler that moved the stream out
};
using HttpHandler = std::function<HttpResponse(HttpExchange&)>;

class HttpServer {
  public:
    // Binds at once (throws std::system_error naming the address if it can't).
    HttpServer(HttpOptions options, HttpHandler handler);
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

// A JSON error response in the API's one shape: {"error":{"code","message","field"?}}.
HttpResponse json_error(unsigned status, const std::string& code, const std::string& message,
                        const std::string& field = {}, unsigned version = 11);

}  // namespace deskbox::server
