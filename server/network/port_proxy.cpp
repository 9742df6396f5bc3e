#include "server/network/port_proxy.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>

#include <optional>
#include <utility>

#include "server/network/splice_relay.hpp"

namespace deskbox::network {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

// After one side closed, the other may stay silent this long (a guest that never answers a
// client's close would hold the relay's fds for good).
constexpr std::chrono::milliseconds kHalfClosedIdle{60000};

// The answer's header as text, marked for isolation: a CSP sandbox (scripts and forms run, in
// an opaque origin) and every Set-Cookie's Path set to `prefix`, Domain dropped.
std::string isolated_header(const http::response_header<>& header, const std::string& prefix) {
    std::string out = "HTTP/" + std::to_string(header.version() / 10) + "." +
                      std::to_string(header.version() % 10) + " " +
                      std::to_string(header.result_int()) + " " + std::string(header.reason()) +
                      "\r\n";
    for (const auto& field : header) {
        std::string value(field.value());
        if (field.name() == http::field::set_cookie) value = scoped_cookie(value, prefix);
        out += std::string(field.name_string()) + ": " + value + "\r\n";
    }
    out += std::string("Content-Security-Policy: ") + kIsolationPolicy + "\r\n\r\n";
    return out;
}

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

    // Called on a request handler's thread: the socket into the sandbox's network is made here
    // (system calls, not I/O-thread work), then the proxy runs on the client stream's strand.
    void start(const SandboxNetwork& network) {
        ticket_ = ctx_->enroll(weak_from_this());
        std::string refused;
        try {
            upstream_.assign(tcp::v4(), network.port_socket().release());
        } catch (const std::exception& e) {
            refused = e.what();
        }
        net::dispatch(client_.get_executor(), [self = shared_from_this(), refused] {
            if (!refused.empty()) return self->fail(409, "port_unreachable", refused);
            self->connect();
        });
    }

  private:
    void connect() {
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

  public:
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
                              if (self->request_.isolate) return self->read_answer_header();
                              self->relay();
                          });
    }

    // Path form: the program's answer is served on deskboxd's own origin, so it is marked to be
    // isolated (CSP sandbox: an opaque origin, no access to the dashboard's storage or to the
    // API with its cookies) and its cookies are scoped to the port's prefix. Interim answers
    // (1xx but 101) are passed on and the next header is read too.
    void read_answer_header() {
        answer_.emplace();
        answer_->header_limit(64 << 10);
        auto self = shared_from_this();
        http::async_read_header(
            upstream_, answer_buffer_, *answer_, [self](beast::error_code ec, std::size_t) {
                if (self->closed_) return;
                if (ec)
                    return self->fail(502, "port_unreachable",
                                      "the program's answer is not HTTP: " + ec.message());
                auto text = std::make_shared<std::string>(
                    isolated_header(self->answer_->get().base(), self->request_.prefix));
                const unsigned status = self->answer_->get().result_int();
                const bool interim = status >= 100 && status < 200 && status != 101;
                net::async_write(self->client_, net::buffer(*text),
                                 [self, text, interim](beast::error_code ec, std::size_t) {
                                     if (self->closed_ || ec) return;
                                     if (interim) return self->read_answer_header();
                                     self->write_rest();
                                 });
            });
    }

    // What the header read took beyond the header goes first, then the sockets are spliced.
    void write_rest() {
        if (answer_buffer_.size() == 0) return relay();
        auto self = shared_from_this();
        net::async_write(client_, answer_buffer_.data(), [self](beast::error_code ec, std::size_t) {
            if (self->closed_ || ec) return;
            self->answer_buffer_.clear();
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
        relay->close_half_closed_after(kHalfClosedIdle);
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
    beast::flat_buffer answer_buffer_;
    std::optional<http::response_parser<http::empty_body>> answer_;
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

std::string scoped_cookie(std::string_view set_cookie, std::string_view path) {
    std::string out;
    std::size_t start = 0;
    bool first = true;
    while (start <= set_cookie.size()) {
        auto end = set_cookie.find(';', start);
        std::string_view item =
            set_cookie.substr(start, end == std::string_view::npos ? end : end - start);
        while (!item.empty() && (item.front() == ' ' || item.front() == '\t'))
            item.remove_prefix(1);
        std::string_view name = item.substr(0, item.find('='));
        while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.remove_suffix(1);
        const bool scope =
            !first && (beast::iequals(beast::string_view(name.data(), name.size()), "path") ||
                       beast::iequals(beast::string_view(name.data(), name.size()), "domain"));
        if (!scope && !(item.empty() && !first)) out += (first ? "" : "; ") + std::string(item);
        first = false;
        if (end == std::string_view::npos) break;
        start = end + 1;
    }
    return out + "; Path=" + std::string(path);
}

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
