#include "server/http/http_server.hpp"

#include <fcntl.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/version.hpp>

#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/io_loop.hpp"
#include "common/utf8.hpp"

namespace deskbox::server {

namespace beast = boost::beast;
namespace net = boost::asio;
using tcp = net::ip::tcp;

HttpResponse json_error(unsigned status, const std::string& code, const std::string& message,
                        const std::string& field, unsigned version) {
    // Messages and fields may quote what a client sent: bytes that are not UTF-8 are kept as
    // \xHH text, so writing the answer can't fail.
    nlohmann::json error = {{"code", code}, {"message", utf8::escape_invalid(message)}};
    if (!field.empty()) error["field"] = utf8::escape_invalid(field);
    HttpResponse res{static_cast<http::status>(status), version};
    res.set(http::field::content_type, "application/json");
    res.body() = nlohmann::json{{"error", error}}.dump();
    res.prepare_payload();
    return res;
}

HttpConnectionCounters& http_connection_counters() {
    static HttpConnectionCounters counters;
    return counters;
}

namespace {

class Session;

// Every open session, and which of them wait for a request (idle), for the connection caps.
class ConnectionTable {
  public:
    // A new connection is idle: it has not sent a request yet.
    std::uint64_t add(std::weak_ptr<Session> session) {
        std::lock_guard lock(mutex_);
        std::uint64_t id = next_++;
        entries_[id] = {std::move(session), true, std::chrono::steady_clock::now()};
        ++idle_;
        publish_locked();
        return id;
    }
    void remove(std::uint64_t id) {
        std::lock_guard lock(mutex_);
        auto it = entries_.find(id);
        if (it == entries_.end()) return;
        if (it->second.idle) --idle_;
        entries_.erase(it);
        publish_locked();
    }
    void set_idle(std::uint64_t id, bool idle) {
        std::lock_guard lock(mutex_);
        auto it = entries_.find(id);
        if (it == entries_.end() || it->second.idle == idle) return;
        it->second.idle = idle;
        it->second.idle_since = std::chrono::steady_clock::now();
        idle ? ++idle_ : --idle_;
        publish_locked();
    }
    std::size_t size() const {
        std::lock_guard lock(mutex_);
        return entries_.size();
    }
    std::size_t idle() const {
        std::lock_guard lock(mutex_);
        return idle_;
    }
    // The session idle the longest, taken out of the idle count (it is being closed); null if
    // none is idle.
    std::shared_ptr<Session> take_oldest_idle() {
        std::lock_guard lock(mutex_);
        auto oldest = entries_.end();
        for (auto it = entries_.begin(); it != entries_.end(); ++it)
            if (it->second.idle &&
                (oldest == entries_.end() || it->second.idle_since < oldest->second.idle_since))
                oldest = it;
        if (oldest == entries_.end()) return nullptr;
        oldest->second.idle = false;
        --idle_;
        publish_locked();
        return oldest->second.session.lock();
    }

  private:
    struct Entry {
        std::weak_ptr<Session> session;
        bool idle = false;
        std::chrono::steady_clock::time_point idle_since;
    };
    void publish_locked() {
        http_connection_counters().open.store(entries_.size());
        http_connection_counters().idle.store(idle_);
    }
    mutable std::mutex mutex_;
    std::map<std::uint64_t, Entry> entries_;
    std::size_t idle_ = 0;
    std::uint64_t next_ = 1;
};

// Body bytes reserved by requests being read or handled; given back when the answer is ready.
class BodyBudget {
  public:
    explicit BodyBudget(std::size_t limit) : limit_(limit) {}
    bool take(std::size_t bytes) {
        std::size_t now = used_.load();
        do {
            if (bytes > limit_ || now > limit_ - bytes) return false;
        } while (!used_.compare_exchange_weak(now, now + bytes));
        return true;
    }
    void give(std::size_t bytes) { used_ -= bytes; }

  private:
    const std::size_t limit_;
    std::atomic<std::size_t> used_{0};
};

// A share of the budget, given back when it goes.
class BodyReservation {
  public:
    BodyReservation() = default;
    BodyReservation(BodyBudget& budget, std::size_t bytes) : budget_(&budget), bytes_(bytes) {}
    BodyReservation(BodyReservation&& other) noexcept
        : budget_(std::exchange(other.budget_, nullptr)), bytes_(other.bytes_) {}
    BodyReservation& operator=(BodyReservation&& other) noexcept {
        if (this != &other) {
            release();
            budget_ = std::exchange(other.budget_, nullptr);
            bytes_ = other.bytes_;
        }
        return *this;
    }
    ~BodyReservation() { release(); }
    void release() {
        if (budget_) std::exchange(budget_, nullptr)->give(bytes_);
    }

  private:
    BodyBudget* budget_ = nullptr;
    std::size_t bytes_ = 0;
};

// How long a connection may sit idle between requests before the server closes it; every
// answer that keeps the connection says so (Keep-Alive: timeout=120).
constexpr auto kIdleConnectionTimeout = std::chrono::seconds(120);
const std::string kKeepAliveHeader = "timeout=" + std::to_string(kIdleConnectionTimeout.count());

// One keep-alive connection: read a request, answer it, repeat.
class Session : public std::enable_shared_from_this<Session> {
  public:
    Session(tcp::socket&& socket, const HttpHandler& handler, const HeaderCheck& check,
            const HttpOptions& options, HandlerPool& pool, BodyBudget& budget,
            ConnectionTable& table)
        : stream_(std::move(socket)),
          handler_(handler),
          check_(check),
          options_(options),
          pool_(pool),
          budget_(budget),
          table_(table) {}
    ~Session() { table_.remove(table_id_); }

    void enroll() { table_id_ = table_.add(weak_from_this()); }
    // From any thread: closes the connection (a cap made room for a newer one).
    void shut() {
        net::post(stream_.get_executor(), [self = shared_from_this()] {
            beast::error_code ignored;
            self->stream_.socket().close(ignored);
        });
    }

    void run() {
        net::dispatch(stream_.get_executor(),
                      beast::bind_front_handler(&Session::read, shared_from_this()));
    }

  private:
    void read() {
        parser_.emplace();
        parser_->body_limit(options_.max_body_bytes);
        parser_->header_limit(static_cast<std::uint32_t>(options_.max_header_bytes));
        stream_.expires_after(kIdleConnectionTimeout);
        table_.set_idle(table_id_, true);
        http::async_read_header(stream_, buffer_, *parser_,
                                beast::bind_front_handler(&Session::on_header, shared_from_this()));
    }

    // Refuses without reading the body: the connection closes after the answer.
    void refuse(HttpResponse res) {
        res.version(parser_->get().version());
        res.keep_alive(false);
        res.set(http::field::server, "deskboxd");
        write(std::move(res));
    }

    // The header is in: the router decides on it, then the body is read within its limit.
    void on_header(beast::error_code ec, std::size_t bytes) {
        if (ec) return on_read(ec, bytes);
        table_.set_idle(table_id_, false);                  // a request has begun
        if (parser_->is_done()) return on_read(ec, bytes);  // no body (or HTTP/1.0 GET)
        HeaderDecision decision;
        if (check_) {
            try {
                decision = check_(parser_->get());
            } catch (const std::exception& e) {
                decision.refusal = json_error(500, "internal", e.what());
            }
        }
        if (decision.refusal) return refuse(std::move(*decision.refusal));
        const std::size_t limit =
            decision.body_limit ? decision.body_limit : options_.max_body_bytes;
        const auto length = parser_->content_length();
        if (length && *length > limit)
            return refuse(json_error(413, "payload_too_large",
                                     "request body is over this endpoint's limit of " +
                                         std::to_string(limit) + " bytes"));
        // A body of unknown length (chunked) reserves all it may grow to.
        const std::size_t reserve = length ? static_cast<std::size_t>(*length) : limit;
        if (!budget_.take(reserve))
            return refuse(json_error(503, "server_busy",
                                     "too many request bodies are being received right now "
                                     "(over " +
                                         std::to_string(options_.max_body_in_flight) +
                                         " bytes in flight); try again shortly"));
        reservation_ = BodyReservation(budget_, reserve);
        limit_ = limit;
        parser_->body_limit(limit);
        // A client that waits before sending its body is told to go on, now that it may.
        const auto expect = parser_->get().find(http::field::expect);
        if (expect != parser_->get().end() && beast::iequals(expect->value(), "100-continue")) {
            static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
            return net::async_write(stream_, net::buffer(kContinue),
                                    [self = shared_from_this()](beast::error_code ec, std::size_t) {
                                        if (ec) return self->close();
                                        self->read_body();
                                    });
        }
        read_body();
    }

    void read_body() {
        http::async_read(stream_, buffer_, *parser_,
                         beast::bind_front_handler(&Session::on_read, shared_from_this()));
    }

    void on_read(beast::error_code ec, std::size_t) {
        table_.set_idle(table_id_, false);
        if (ec == http::error::end_of_stream || ec == net::error::eof) return close();
        if (ec == http::error::body_limit) {
            reservation_.release();
            auto res = json_error(413, "payload_too_large",
                                  "request body is over this endpoint's limit of " +
                                      std::to_string(limit_ ? limit_ : options_.max_body_bytes) +
                                      " bytes");
            res.keep_alive(false);
            return write(std::move(res));
        }
        if (ec == http::error::header_limit) {
            auto res = json_error(431, "headers_too_large", "request headers are too large");
            res.keep_alive(false);
            return write(std::move(res));
        }
        if (ec) reservation_.release();
        if (ec) {
            if (ec == beast::error::timeout || ec == net::error::operation_aborted ||
                ec == net::error::connection_reset)
                return close();
            auto res = json_error(400, "bad_request", "malformed HTTP request: " + ec.message());
            res.keep_alive(false);
            return write(std::move(res));
        }
        stream_.expires_never();
        // Off the I/O thread: nothing of this connection runs until the answer is posted back.
        pool_.submit(
            [self = shared_from_this(), request = std::make_shared<HttpRequest>(parser_->release()),
             reservation = std::make_shared<BodyReservation>(std::move(reservation_))]() mutable {
                self->respond(*request, *reservation);
            });
    }

    // On a pool thread.
    void respond(HttpRequest& request, BodyReservation& reservation) {
        HttpExchange exchange{request, &stream_};
        HttpResponse res;
        try {
            res = handler_(exchange);
        } catch (const std::exception& e) {
            res = json_error(500, "internal", e.what(), {}, request.version());
        }
        // The handler is done with the body (a relayed one has moved on to the sandbox).
        request.body() = std::string();
        request.body().shrink_to_fit();
        reservation.release();
        if (exchange.taken) return;  // a WebSocket owns the stream now
        res.version(request.version());
        res.keep_alive(request.keep_alive());
        // Says how long an idle connection stays open, so a client's pool retires it first
        // rather than sending its next request into a connection being closed.
        if (res.keep_alive()) res.set("Keep-Alive", kKeepAliveHeader);
        res.set(http::field::server, "deskboxd");
        if (!res.has_content_length() && !res.chunked()) res.prepare_payload();
        net::post(stream_.get_executor(),
                  [self = shared_from_this(),
                   response = std::make_shared<HttpResponse>(std::move(res))]() mutable {
                      self->write(std::move(*response));
                  });
    }

    void write(HttpResponse&& res) {
        auto response = std::make_shared<HttpResponse>(std::move(res));
        bool keep = response->keep_alive();
        http::async_write(
            stream_, *response,
            [self = shared_from_this(), response, keep](beast::error_code ec, std::size_t) {
                if (ec || !keep) return self->close();
                self->read();
            });
    }

    void close() {
        beast::error_code ec;
        stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    }

    beast::tcp_stream stream_;
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    const HttpHandler& handler_;
    const HeaderCheck& check_;
    const HttpOptions& options_;
    HandlerPool& pool_;
    BodyBudget& budget_;
    BodyReservation reservation_;
    std::size_t limit_ = 0;
    ConnectionTable& table_;
    std::uint64_t table_id_ = 0;
};

}  // namespace

struct HttpServer::Impl {
    explicit Impl(const HttpOptions& o)
        : options(&o),
          budget(o.max_body_in_flight),
          pool(o.max_handlers, std::chrono::seconds(60)) {}
    const HttpOptions* options = nullptr;
    // Before io: sessions still queued in io when it goes give their bytes and rows back here.
    BodyBudget budget;
    ConnectionTable table;
    net::io_context io;
    tcp::acceptor acceptor{io};
    HttpHandler handler;
    HeaderCheck check;
    std::vector<std::thread> threads;
    std::atomic<bool> stopped{false};
    net::steady_timer accept_pause{io};
    std::chrono::milliseconds accept_backoff = kFirstAcceptBackoff;
    HandlerPool pool;  // after io: its jobs hold sessions, so it goes first

    static constexpr std::chrono::milliseconds kFirstAcceptBackoff{50};
    static constexpr std::chrono::milliseconds kLastAcceptBackoff{1000};

    void accept() {
        acceptor.async_accept(
            net::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
                if (!acceptor.is_open() || stopped) return;
                if (ec) {
                    // Out of fds or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM), or a connection
                    // that went before it was taken: trying again at once would spin on the
                    // same error with the backlog still full. Wait, longer each time in a row.
                    http_connection_counters().accept_errors.fetch_add(1);
                    accept_pause.expires_after(accept_backoff);
                    accept_backoff = std::min(accept_backoff * 2, kLastAcceptBackoff);
                    accept_pause.async_wait([this](beast::error_code wait_ec) {
                        if (!wait_ec) accept();
                    });
                    return;
                }
                accept_backoff = kFirstAcceptBackoff;
                admit(std::move(socket));
                accept();
            });
    }

    // Within the caps: the oldest idle connection makes room for a new one; with none idle at
    // the total cap, the new one is refused (closed at once).
    void admit(tcp::socket socket) {
        auto& counters = http_connection_counters();
        if (table.idle() >= std::max<std::size_t>(options->max_idle_connections, 1))
            close_oldest_idle();
        if (table.size() >= std::max<std::size_t>(options->max_connections, 1) &&
            !close_oldest_idle()) {
            counters.refused.fetch_add(1);
            beast::error_code ignored;
            socket.close(ignored);
            return;
        }
        counters.accepted.fetch_add(1);
        auto session = std::make_shared<Session>(std::move(socket), handler, check, *options, pool,
                                                 budget, table);
        session->enroll();
        session->run();
    }

    bool close_oldest_idle() {
        auto oldest = table.take_oldest_idle();
        if (!oldest) return false;
        http_connection_counters().idle_closed.fetch_add(1);
        oldest->shut();
        return true;
    }
};

HttpServer::HttpServer(HttpOptions options, HttpHandler handler, HeaderCheck check)
    : options_(std::move(options)) {
    impl_ = std::make_unique<Impl>(options_);
    impl_->handler = std::move(handler);
    impl_->check = std::move(check);
    beast::error_code ec;
    auto address = net::ip::make_address(options_.address, ec);
    if (ec) throw std::system_error(ec, "listen address '" + options_.address + "'");
    tcp::endpoint endpoint{address, options_.port};
    auto& acceptor = impl_->acceptor;
    acceptor.open(endpoint.protocol());
    // Asio opens it without SOCK_CLOEXEC: no program the server starts may keep its port open.
    ::fcntl(acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
    acceptor.set_option(net::socket_base::reuse_address(true));
    acceptor.bind(endpoint, ec);
    if (ec)
        throw std::system_error(
            ec, "cannot listen on " + options_.address + ":" + std::to_string(options_.port));
    acceptor.listen(net::socket_base::max_listen_connections);
    port_ = acceptor.local_endpoint().port();
}

HttpServer::~HttpServer() {
    stop();
}

void HttpServer::start() {
    impl_->accept();
    for (std::size_t i = 0; i < std::max<std::size_t>(1, options_.threads); ++i)
        impl_->threads.emplace_back([this] { run_io_loop(impl_->io, "http"); });
}

void HttpServer::stop() {
    if (impl_->stopped.exchange(true)) return;
    net::post(impl_->io, [this] {
        beast::error_code ec;
        impl_->acceptor.close(ec);
        impl_->accept_pause.cancel();
    });
    impl_->io.stop();
    for (auto& t : impl_->threads)
        if (t.joinable()) t.join();
    impl_->pool.stop();  // handlers running now finish; their answers have nowhere to go
}

}  // namespace deskbox::server
