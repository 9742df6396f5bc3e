#include "server/stream/vnc_proxy.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include <array>
#include <deque>

namespace deskbox::server {
namespace {

namespace beast = boost::beast;
namespace net = boost::asio;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;

constexpr std::size_t kMaxPendingBytes = 16 << 20;  // per direction, then the proxy closes

class VncProxy : public std::enable_shared_from_this<VncProxy> {
  public:
    VncProxy(beast::tcp_stream&& stream, HttpRequest request, std::shared_ptr<Sandbox> sandbox,
             unsigned short port, ViewerCounters& counters)
        : ws_(std::move(stream)),
          vnc_(ws_.get_executor()),
          request_(std::move(request)),
          sandbox_(std::move(sandbox)),
          port_(port),
          counters_(counters) {
        ++counters_.connected;
    }
    ~VncProxy() { --counters_.connected; }

    // Called on a request handler's thread: the session runs on the stream's strand from here.
    void start() {
        net::dispatch(ws_.get_executor(), [self = shared_from_this()] { self->run(); });
    }

  private:
    void run() {
        ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
        // noVNC asks for the "binary" subprotocol; answering with it is what it expects.
        std::string protocols(request_[http::field::sec_websocket_protocol]);
        bool binary = protocols.find("binary") != std::string::npos;
        ws_.set_option(websocket::stream_base::decorator([binary](websocket::response_type& res) {
            res.set(http::field::server, "deskboxd");
            if (binary) res.set(http::field::sec_websocket_protocol, "binary");
        }));
        ws_.binary(true);
        ws_.read_message_max(1 << 20);
        ws_.async_accept(request_, [self = shared_from_this()](beast::error_code ec) {
            if (ec) return;
            self->request_ = {};
            self->connect();
        });
    }

    void connect() {
        tcp::endpoint endpoint(net::ip::make_address("127.0.0.1"), port_);
        vnc_.async_connect(endpoint, [self = shared_from_this()](beast::error_code ec) {
            if (ec) return self->shutdown("the sandbox's VNC server is not reachable");
            self->read_vnc();
            self->read_ws();
        });
    }

    // VNC server -> viewer.
    void read_vnc() {
        vnc_.async_read_some(net::buffer(vnc_buffer_),
                             [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                                 if (ec) return self->shutdown("VNC server closed the connection");
                                 self->to_ws_.emplace_back(self->vnc_buffer_.data(), n);
                                 self->to_ws_bytes_ += n;
                                 self->write_ws();
                                 // Stop reading while the viewer lags far behind; resume as it
                                 // catches up.
                                 if (self->to_ws_bytes_ < kMaxPendingBytes)
                                     self->read_vnc();
                                 else
                                     self->vnc_paused_ = true;
                             });
    }

    void write_ws() {
        if (ws_writing_ || to_ws_.empty() || closed_) return;
        ws_writing_ = true;
        ws_.async_write(net::buffer(to_ws_.front()),
                        [self = shared_from_this()](beast::error_code ec, std::size_t) {
                            self->ws_writing_ = false;
                            if (ec) return self->shutdown({});
                            self->to_ws_bytes_ -= self->to_ws_.front().size();
                            self->to_ws_.pop_front();
                            if (self->vnc_paused_ && self->to_ws_bytes_ < kMaxPendingBytes / 2) {
                                self->vnc_paused_ = false;
                                self->read_vnc();
                            }
                            self->write_ws();
                        });
    }

    // Viewer -> VNC server.
    void read_ws() {
        ws_.async_read(ws_buffer_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
            if (ec) return self->shutdown({});
            self->to_vnc_bytes_ += self->ws_buffer_.size();
            if (self->to_vnc_bytes_ > kMaxPendingBytes)
                return self->shutdown("viewer sends faster than VNC reads");
            self->to_vnc_.push_back(beast::buffers_to_string(self->ws_buffer_.data()));
            self->ws_buffer_.consume(self->ws_buffer_.size());
            self->write_vnc();
            self->read_ws();
        });
    }

    void write_vnc() {
        if (vnc_writing_ || to_vnc_.empty() || closed_) return;
        vnc_writing_ = true;
        net::async_write(vnc_, net::buffer(to_vnc_.front()),
                         [self = shared_from_this()](beast::error_code ec, std::size_t) {
                             self->vnc_writing_ = false;
                             if (ec) return self->shutdown("VNC server closed the connection");
                             self->to_vnc_bytes_ -= self->to_vnc_.front().size();
                             self->to_vnc_.pop_front();
                             self->write_vnc();
                         });
    }

    void shutdown(const std::string& reason) {
        if (closed_) return;
        closed_ = true;
        beast::error_code ignored;
        vnc_.close(ignored);
        if (reason.empty()) {
            beast::get_lowest_layer(ws_).socket().close(ignored);
            return;
        }
        ws_.async_close(websocket::close_reason(websocket::close_code::going_away, reason),
                        [self = shared_from_this()](beast::error_code) {});
    }

    websocket::stream<beast::tcp_stream> ws_;
    tcp::socket vnc_;
    HttpRequest request_;
    std::shared_ptr<Sandbox> sandbox_;
    unsigned short port_;
    ViewerCounters& counters_;
    std::array<char, 64 * 1024> vnc_buffer_{};
    beast::flat_buffer ws_buffer_;
    std::deque<std::string> to_ws_, to_vnc_;
    std::size_t to_ws_bytes_ = 0, to_vnc_bytes_ = 0;
    bool ws_writing_ = false, vnc_writing_ = false, vnc_paused_ = false, closed_ = false;
};

}  // namespace

void start_vnc_proxy(HttpExchange& exchange, std::shared_ptr<Sandbox> sandbox,
                     ViewerCounters& counters) {
    auto port = sandbox->media().vnc_port();
    if (!port) throw ApiError(409, "conflict", "sandbox " + sandbox->id() + " has no VNC server");
    auto proxy =
        std::make_shared<VncProxy>(std::move(*exchange.stream), std::move(exchange.request),
                                   std::move(sandbox), *port, counters);
    exchange.taken = true;
    proxy->start();
}

}  // namespace deskbox::server
