#include "server/network/port_proxy.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>

#include <utility>

#include "server/network/splice_relay.hpp"

namespace deskbox::network {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

// Enrolled with the sandbox's network without owning it: killing the sandbox closes the relay,
// even when the guest vanished without a reset.
class PortProxy : public Closeable, public std::enable_shared_from_this<PortProxy> {
  public:
    PortProxy(beast::tcp_stream stream, PortRequest request, const SandboxNetwork& network,
              PortProxyCounters& counters)
        : client_(stream.release_socket()),
          upstream_(client_.get_executor()),
          timer_(client_.get_executor()),
          request_(std::move(request)),
          ctx_(network.context()),
          sandbox_id_(network.sandbox_id()),
          microvm_(network.kind() == SandboxNetwork::Kind::microvm),
          endpoint_(network.port_endpoint(request_.port)),
          counters_(counters) {
        ++counters_.open;
        ++counters_.total;
    }
    ~PortProxy() override {
        --counters_.open;
        ctx_->leave(ticket_);
    }

    void start(const SandboxNetwork& network) {
        ticket_ = ctx_->enroll(weak_from_this());
        try {
            upstream_.assign(tcp::v4(), network.port_socket().release());
        } catch (const std::exception& e) {
            return fail(409, "port_unreachable", e.what());
        }
        auto self = shared_from_this();
        timer_.expires_after(std::chrono::seconds(10));
        timer_.async_wait([self](beast::error_code ec) {
            if (ec) return;
            beast::error_code ignored;
            self->upstream_.cancel(ignored);
        });
        upstream_.async_connect(endpoint_, [self](beast::error_code ec) {
            self->timer_.cancel();
            if (self->closed_) return;
            if (ec)
                return self->fail(
                    502, "port_unreachable",
                    "nothing accepts connections on port " + std::to_string(self->request_.port) +
                        " in sandbox " + self->sandbox_id_ + " (" + ec.message() +
                        "); a program must listen there" +
                        (self->microvm_
                             ? " on 0.0.0.0 or 10.0.2.15 (a microVM's loopback is its own)"
                             : ""));
            self->forward();
        });
    }

    void close() override {
        net::post(client_.get_executor(), [self = shared_from_this()] {
            self->closed_ = true;
            self->timer_.cancel();
            if (auto relay = self->relay_.lock()) relay->abort();  // on our strand too
            reset_socket(self->client_);
            reset_socket(self->upstream_);
            self->ctx_->leave(std::exchange(self->ticket_, 0));
        });
    }

  private:
    void forward() {
        auto& req = request_.request;
        req.target(request_.target);
        if (!request_.host.empty()) {
            req.set("X-Forwarded-Host", req[http::field::host]);
            req.set(http::field::host, request_.host);
        }
        if (!request_.prefix.empty()) req.set("X-Forwarded-Prefix", request_.prefix);
        req.set("X-Forwarded-Proto", "http");
        beast::error_code ec;
        auto peer = client_.remote_endpoint(ec);
        if (!ec) req.set("X-Forwarded-For", peer.address().to_string());
        if (auto auth = req.find(http::field::authorization);
            auth != req.end() && !request_.strip_bearer.empty() &&
            std::string(auth->value()) == "Bearer " + request_.strip_bearer)
            req.erase(auth);
        if (auto cookie = req.find(http::field::cookie); cookie != req.end()) {
            std::string rest = without_cookie(std::string(cookie->value()), "deskbox_token");
            if (rest.empty())
                req.erase(cookie);
            else
                req.set(http::field::cookie, rest);
        }
        // One exchange per connection (an upgrade stays): keeps every request checked.
        if (req.find(http::field::upgrade) == req.end()) req.set(http::field::connection, "close");
        req.prepare_payload();
        auto serializer = std::make_shared<http::request_serializer<http::string_body>>(req);
        auto self = shared_from_this();
        http::async_write(upstream_, *serializer,
                          [self, serializer](beast::error_code ec, std::size_t) {
                              if (self->closed_) return;
                              if (ec)
                                  return self->fail(502, "port_unreachable",
                                                    "writing to the port: " + ec.message());
                              self->relay();
                          });
    }

    void relay() {
        // The relay's completion holds this (and so its enrollment) until the relay ends.
        std::error_code error;
        auto relay = SpliceRelay::create(
            client_, upstream_, [self = shared_from_this()](const SpliceRelay::Result&) {}, error);
        if (!relay) {
            // Out of fds: this connection ends, deskboxd goes on.
            ++counters_.failed;
            reset_socket(client_);
            reset_socket(upstream_);
            return;
        }
        relay_ = relay;
        relay->start();
    }

    void fail(unsigned status, const std::string& code, const std::string& message) {
        ++counters_.failed;
        http::response<http::string_body> res{static_cast<http::status>(status), 11};
        res.set(http::field::content_type, "application/json");
        res.set(http::field::connection, "close");
        res.body() =
            nlohmann::json{{"error", {{"code", code}, {"message", message}, {"field", "port"}}}}
                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        res.prepare_payload();
        auto response = std::make_shared<http::response<http::string_body>>(std::move(res));
        auto self = shared_from_this();
        http::async_write(client_, *response, [self, response](beast::error_code, std::size_t) {
            beast::error_code ignored;
            self->client_.shutdown(tcp::socket::shutdown_send, ignored);
            self->client_.close(ignored);
        });
    }

    tcp::socket client_, upstream_;
    net::steady_timer timer_;
    PortRequest request_;
    std::shared_ptr<EgressContext> ctx_;
    std::string sandbox_id_;
    bool microvm_;
    tcp::endpoint endpoint_;
    PortProxyCounters& counters_;
    std::weak_ptr<SpliceRelay> relay_;
    std::uint64_t ticket_ = 0;
    bool closed_ = false;
};

}  // namespace

void start_port_proxy(beast::tcp_stream stream, PortRequest request, const SandboxNetwork& network,
                      PortProxyCounters& counters) {
    std::make_shared<PortProxy>(std::move(stream), std::move(request), network, counters)
        ->start(network);
}

namespace {

// Calls `f(name, item)` for each "name=value" of a Cookie header, spaces trimmed.
template <typename F>
void each_cookie(std::string_view cookies, F f) {
    std::size_t start = 0;
    while (start < cookies.size()) {
        auto end = cookies.find(';', start);
        std::string_view item =
            cookies.substr(start, end == std::string_view::npos ? end : end - start);
        while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
        if (!item.empty()) f(item.substr(0, item.find('=')), item);
        if (end == std::string_view::npos) break;
        start = end + 1;
    }
}

}  // namespace

std::string without_cookie(std::string_view cookies, std::string_view name) {
    std::string out;
    each_cookie(cookies, [&](std::string_view key, std::string_view item) {
        if (key == name) return;
        if (!out.empty()) out += "; ";
        out += item;
    });
    return out;
}

std::string cookie_value(std::string_view cookies, std::string_view name) {
    std::string out;
    each_cookie(cookies, [&](std::string_view key, std::string_view item) {
        if (key == name && item.size() > key.size() && out.empty())
            out = std::string(item.substr(key.size() + 1));
    });
    return out;
}

}  // namespace deskbox::network
