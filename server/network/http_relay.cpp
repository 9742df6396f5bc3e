#include "server/network/http_relay.hpp"

#include <sys/socket.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <algorithm>
#include <limits>
#include <sstream>

#include "server/network/splice_relay.hpp"

namespace deskbox::network {
namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;

constexpr std::uint32_t kMaxHeadBytes = 64 * 1024;

std::string hex(std::size_t n) {
    std::ostringstream out;
    out << std::hex << n;
    return std::move(out).str();
}

// The peer ended its side: a TCP FIN, or on TLS a close_notify or (as many clients end) a FIN
// without one.
bool peer_ended(const boost::system::error_code& ec) {
    return ec == net::error::eof || ec == net::ssl::error::stream_truncated;
}

bool ends_cleanly(const boost::system::error_code& ec) {
    return ec == http::error::end_of_stream || peer_ended(ec);
}

net::ip::tcp::socket& lowest(net::ip::tcp::socket& s) {
    return s;
}
net::ip::tcp::socket& lowest(TlsStream& s) {
    return s.next_layer();
}

}  // namespace

std::string serialize_request_head(const HttpRequestHead& head) {
    std::ostringstream out;
    out << head;
    return std::move(out).str();
}

template <class Stream>
BasicHttpRelay<Stream>::BasicHttpRelay(Stream client, Stream upstream, Inspect inspect, Done done,
                                       std::shared_ptr<RateLimiter> limit_out, Progress progress)
    : client_(std::move(client)),
      upstream_(std::move(upstream)),
      inspect_(std::move(inspect)),
      done_(std::move(done)),
      limiter_(std::move(limit_out)),
      progress_(std::move(progress)),
      limit_timer_(client_.get_executor()),
      half_closed_(client_.get_executor()),
      up_splice_(client_.get_executor()),
      down_splice_(client_.get_executor()) {}

template <class Stream>
std::error_code BasicHttpRelay<Stream>::splice_bodies() {
    if constexpr (kTls) {
        return std::make_error_code(std::errc::operation_not_supported);  // bytes pass OpenSSL
    } else {
        UniqueFd up_read, up_write, down_read, down_write;
        int err = make_splice_pipe(up_read, up_write);
        if (err == 0) err = make_splice_pipe(down_read, down_write);
        if (err != 0) return {err, std::generic_category()};
        up_splice_.attach(client_, upstream_, std::move(up_read), std::move(up_write), limiter_);
        down_splice_.attach(upstream_, client_, std::move(down_read), std::move(down_write));
        spliced_ = true;
        return {};
    }
}

template <class Stream>
void BasicHttpRelay<Stream>::start() {
    net::post(client_.get_executor(), [self = this->shared_from_this()] {
        self->read_head();
        self->pump_down();
    });
}

template <class Stream>
void BasicHttpRelay<Stream>::abort() {
    finish(true, "closed by deskboxd");
}

template <class Stream>
void BasicHttpRelay<Stream>::cut(const std::string& reason) {
    if (finished_) return;
    result_.cut = reason;
    finish(true, reason);
}

template <class Stream>
void BasicHttpRelay<Stream>::read_head() {
    if (finished_) return;
    parser_.emplace();
    parser_->header_limit(kMaxHeadBytes);
    // Streamed, never held. Not boost::none: Beast 1.74 compares a Content-Length with an empty
    // limit as if the limit were below it.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    http::async_read_header(client_, in_, *parser_,
                            [self = this->shared_from_this()](boost::system::error_code ec,
                                                              std::size_t) { self->on_head(ec); });
}

template <class Stream>
void BasicHttpRelay<Stream>::on_head(boost::system::error_code ec) {
    if (finished_) return;
    if (ends_cleanly(ec)) return direction_done(true);
    if (ec)
        return cut("request " + std::to_string(result_.requests + 1) + ": not HTTP/1 (" +
                   ec.message() + ")");
    ++result_.requests;
    auto& head = parser_->get().base();
    if (auto why = inspect_ ? inspect_(head) : std::nullopt)
        return cut("request " + std::to_string(result_.requests) + ": " + *why);
    chunked_ = parser_->chunked();
    upgrade_ =
        head.method() == http::verb::connect || head.find(http::field::upgrade) != head.end();
    send_up(serialize(head), [self = this->shared_from_this()] { self->read_body(); });
}

template <class Stream>
void BasicHttpRelay<Stream>::read_body() {
    if (finished_) return;
    if (parser_->is_done()) {
        if (!upgrade_) return read_head();
        // Not HTTP any more: what follows goes as bytes, starting with what was read already.
        std::string rest(static_cast<const char*>(in_.data().data()), in_.size());
        in_.consume(in_.size());
        return send_up(std::move(rest), [self = this->shared_from_this()] { self->raw_up(); });
    }
    if (!chunked_ && parser_->content_length_remaining()) {
        // A sized body goes on as it came (the head settled its length): no parser between.
        sized_left_ = *parser_->content_length_remaining();
        const std::size_t n = std::min<std::uint64_t>(sized_left_, in_.size());
        std::string first(static_cast<const char*>(in_.data().data()), n);
        in_.consume(n);
        sized_left_ -= n;
        return send_up(std::move(first), [self = this->shared_from_this()] { self->sized_body(); });
    }
    auto& body = parser_->get().body();
    body.data = body_buf_.data();
    body.size = body_buf_.size();
    http::async_read_some(
        client_, in_, *parser_,
        [self = this->shared_from_this()](boost::system::error_code ec, std::size_t) {
            if (self->finished_) return;
            if (ec == http::error::need_buffer) ec = {};
            if (ec) return self->finish(true, "reading a request body: " + ec.message());
            auto& b = self->parser_->get().body();
            std::size_t n = self->body_buf_.size() - b.size;
            std::string bytes;
            if (self->chunked_ && n > 0) bytes = hex(n) + "\r\n";
            bytes.append(self->body_buf_.data(), n);
            if (self->chunked_ && n > 0) bytes += "\r\n";
            if (self->chunked_ && self->parser_->is_done()) bytes += "0\r\n\r\n";
            self->send_up(std::move(bytes), [self] { self->read_body(); });
        });
}

template <class Stream>
void BasicHttpRelay<Stream>::sized_body() {
    if (sized_left_ == 0) return read_head();
    if (spliced_) {
        SpliceDirection::Events events;
        events.moved = [this](std::uint64_t n) {
            result_.out += n;
            half_closed_.moved();
            if (progress_) progress_(n, 0);
        };
        events.ended = [this] {
            sized_left_ = 0;
            read_head();
        };
        events.failed = [this](const std::string& error) {
            finish(true, "a request body: " + error);
        };
        return up_splice_.start(this->shared_from_this(), std::move(events), sized_left_);
    }
    const std::size_t want = std::min<std::uint64_t>(sized_left_, body_buf_.size());
    client_.async_read_some(
        net::buffer(body_buf_.data(), want),
        [self = this->shared_from_this()](boost::system::error_code ec, std::size_t n) {
            if (self->finished_) return;
            if (ec) return self->finish(true, "reading a request body: " + ec.message());
            self->sized_left_ -= n;
            self->send_up(std::string(self->body_buf_.data(), n), [self] { self->sized_body(); });
        });
}

template <class Stream>
void BasicHttpRelay<Stream>::send_up(std::string bytes, std::function<void()> then) {
    out_ = std::move(bytes);
    out_cleared_ = limiter_ ? 0 : out_.size();
    throttled_write(std::move(then));
}

// Waits for the rate limit to clear out_, then writes it upstream.
template <class Stream>
void BasicHttpRelay<Stream>::throttled_write(std::function<void()> then) {
    auto self = this->shared_from_this();
    while (out_cleared_ < out_.size()) {
        std::uint64_t got = limiter_->take(out_.size() - out_cleared_);
        if (got == 0) {
            limit_timer_.expires_after(limiter_->wait_for(16 * 1024));
            limit_timer_.async_wait([self, then](boost::system::error_code ec) {
                if (!ec && !self->finished_) self->throttled_write(then);
            });
            return;
        }
        out_cleared_ += got;
    }
    net::async_write(upstream_, net::buffer(out_),
                     [self, then](boost::system::error_code ec, std::size_t n) {
                         if (self->finished_) return;
                         if (ec) return self->finish(true, "sending: " + ec.message());
                         self->result_.out += n;
                         self->half_closed_.moved();
                         if (self->progress_) self->progress_(n, 0);
                         then();
                     });
}

template <class Stream>
void BasicHttpRelay<Stream>::raw_up() {
    client_.async_read_some(
        net::buffer(body_buf_),
        [self = this->shared_from_this()](boost::system::error_code ec, std::size_t n) {
            if (self->finished_) return;
            if (peer_ended(ec)) return self->direction_done(true);
            if (ec) return self->finish(true, "receiving: " + ec.message());
            self->send_up(std::string(self->body_buf_.data(), n), [self] { self->raw_up(); });
        });
}

template <class Stream>
void BasicHttpRelay<Stream>::pump_down() {
    if (finished_) return;
    if (spliced_) {
        SpliceDirection::Events events;
        events.moved = [this](std::uint64_t n) {
            result_.in += n;
            half_closed_.moved();
            if (progress_) progress_(0, n);
        };
        events.ended = [this] { direction_done(false); };
        events.failed = [this](const std::string& error) { finish(true, error); };
        return down_splice_.start(this->shared_from_this(), std::move(events));
    }
    upstream_.async_read_some(
        net::buffer(down_buf_),
        [self = this->shared_from_this()](boost::system::error_code ec, std::size_t n) {
            if (self->finished_) return;
            if (peer_ended(ec)) return self->direction_done(false);
            if (ec) return self->finish(true, "receiving: " + ec.message());
            net::async_write(self->client_, net::buffer(self->down_buf_.data(), n),
                             [self](boost::system::error_code ec, std::size_t n) {
                                 if (self->finished_) return;
                                 if (ec) return self->finish(true, "sending: " + ec.message());
                                 self->result_.in += n;
                                 self->half_closed_.moved();
                                 if (self->progress_) self->progress_(0, n);
                                 self->pump_down();
                             });
        });
}

// One direction ended cleanly: pass the end on (half-close) and finish once both have.
template <class Stream>
void BasicHttpRelay<Stream>::direction_done(bool up) {
    (up ? up_done_ : down_done_) = true;
    if constexpr (kTls) {
        return close_tls_gracefully();
    } else {
        ::shutdown((up ? upstream_ : client_).native_handle(), SHUT_WR);
    }
    if (up_done_ && down_done_) return finish(false, {});
    half_closed_.start([self = this->shared_from_this()](const std::string& reason) {
        self->finish(true, reason);
    });
}

template <class Stream>
void BasicHttpRelay<Stream>::finish(bool reset, const std::string& error) {
    if (finished_) return;
    finished_ = true;
    limit_timer_.cancel();
    half_closed_.cancel();
    up_splice_.stop();
    down_splice_.stop();
    if (reset) {
        reset_socket(lowest(client_));
        reset_socket(lowest(upstream_));
    } else {
        boost::system::error_code ignored;
        lowest(client_).close(ignored);
        lowest(upstream_).close(ignored);
    }
    result_.reset = reset;
    result_.error = error;
    if (done_) {
        auto done = std::move(done_);
        done(result_);
    }
}

// TLS: either side's clean end ends both. Each gets a close_notify (a client reading a response
// to its end must learn it was not cut), bounded in time; then the sockets close.
template <class Stream>
void BasicHttpRelay<Stream>::close_tls_gracefully() {
    if constexpr (kTls) {
        if (finished_) return;
        finished_ = true;
        limit_timer_.cancel();
        half_closed_.cancel();
        boost::system::error_code ignored;
        lowest(client_).cancel(ignored);
        lowest(upstream_).cancel(ignored);
        auto self = this->shared_from_this();
        auto timer = std::make_shared<net::steady_timer>(client_.get_executor());
        auto left = std::make_shared<int>(2);
        auto closed = [self, timer, left](Stream& stream) {
            boost::system::error_code ignored;
            lowest(stream).close(ignored);
            if (--*left == 0) timer->cancel();
        };
        for (Stream* stream : {&client_, &upstream_})
            stream->async_shutdown(
                [closed, stream](boost::system::error_code) { closed(*stream); });
        timer->expires_after(std::chrono::seconds(1));
        timer->async_wait([self](boost::system::error_code ec) {
            if (ec) return;
            boost::system::error_code ignored;
            lowest(self->client_).close(ignored);
            lowest(self->upstream_).close(ignored);
        });
        result_.reset = false;
        if (done_) {
            auto done = std::move(done_);
            done(result_);
        }
    }
}

template class BasicHttpRelay<net::ip::tcp::socket>;
template class BasicHttpRelay<TlsStream>;

}  // namespace deskbox::network
