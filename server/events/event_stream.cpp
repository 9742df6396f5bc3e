#include "server/events/event_stream.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <memory>

namespace deskbox::server::events {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

constexpr std::size_t kBatch = 256;
constexpr auto kWriteTimeout = std::chrono::seconds(30);
constexpr auto kKeepAlive = std::chrono::seconds(15);

// Where streams read events memory no longer holds: blocking file reads, off the I/O threads.
net::thread_pool& file_readers() {
    static net::thread_pool pool(1);
    return pool;
}

class EventStream : public std::enable_shared_from_this<EventStream> {
  public:
    EventStream(tcp::socket socket, EventLog& log, StreamFilter filter, std::uint64_t after)
        : socket_(std::move(socket)),
          log_(log),
          filter_(std::move(filter)),
          last_(after),
          write_timer_(socket_.get_executor()),
          keep_alive_(socket_.get_executor()) {}

    net::any_io_executor executor() { return socket_.get_executor(); }

    void start() {
        fetch_again_ = true;  // the events after `after` once the header is out
        std::weak_ptr<EventStream> weak = shared_from_this();
        subscription_ = log_.subscribe([weak](const Event&) {
            if (auto self = weak.lock())
                net::post(self->socket_.get_executor(), [self] { self->fetch(); });
        });
        watch_for_close();
        send(
            "HTTP/1.1 200 OK\r\nServer: deskboxd\r\nContent-Type: text/event-stream\r\n"
            "Cache-Control: no-store\r\nX-Accel-Buffering: no\r\nConnection: close\r\n\r\n"
            "retry: 2000\n\n");
    }

  private:
    // On the executor: the next batch after last_, from memory or (far behind) the file.
    void fetch() {
        if (closed_ || writing_) {
            fetch_again_ = true;
            return;
        }
        if (auto recent = log_.recent_after(last_, kBatch)) return write_batch(*recent);
        writing_ = true;  // a file read under way counts as a write: one at a time
        net::post(file_readers(), [self = shared_from_this()] {
            auto batch = self->log_.read_after(self->last_, kBatch);
            net::post(self->socket_.get_executor(), [self, batch = std::move(batch)] {
                self->writing_ = false;
                self->write_batch(batch);
            });
        });
    }

    void write_batch(const std::vector<Event>& batch) {
        if (closed_ || batch.empty()) return;
        std::string text;
        for (const auto& event : batch)
            if (filter_.matches(event)) text += sse_text(event);
        last_ = batch.back().id;
        if (text.empty()) return fetch();  // none it wants: look further
        fetch_again_ = true;               // more may follow this batch
        send(std::move(text));
    }

    void send(std::string text) {
        writing_ = true;
        out_ = std::move(text);
        write_timer_.expires_after(kWriteTimeout);
        write_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
            if (!ec) self->close();  // a client that stopped reading
        });
        net::async_write(socket_, net::buffer(out_),
                         [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                             self->write_timer_.cancel();
                             self->writing_ = false;
                             if (ec) return self->close();
                             self->arm_keep_alive();
                             if (std::exchange(self->fetch_again_, false)) self->fetch();
                         });
    }

    void arm_keep_alive() {
        keep_alive_.expires_after(kKeepAlive);
        keep_alive_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
            if (!ec && !self->writing_ && !self->closed_) self->send(": keep-alive\n\n");
        });
    }

    // The client sends nothing more; a read ending (EOF, reset) means it left.
    void watch_for_close() {
        socket_.async_read_some(
            net::buffer(discard_),
            [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                if (ec) return self->close();
                self->watch_for_close();
            });
    }

    void close() {
        if (closed_) return;
        closed_ = true;
        subscription_.reset();
        write_timer_.cancel();
        keep_alive_.cancel();
        boost::system::error_code ignored;
        socket_.shutdown(tcp::socket::shutdown_both, ignored);
        socket_.close(ignored);
    }

    tcp::socket socket_;
    EventLog& log_;
    StreamFilter filter_;
    std::uint64_t last_;
    net::steady_timer write_timer_, keep_alive_;
    EventLog::Subscription subscription_;
    std::string out_;
    std::array<char, 512> discard_{};
    bool writing_ = false, fetch_again_ = false, closed_ = false;
};

}  // namespace

bool StreamFilter::matches(const Event& event) const {
    return (types.empty() || types.count(event.type)) &&
           (sandbox_id.empty() || sandbox_id == event.sandbox_id);
}

std::string sse_text(const Event& event) {
    return "id: " + event.public_id() + "\nevent: " + event.type + "\ndata: " +
           event.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

void start_event_stream(tcp::socket socket, EventLog& log, StreamFilter filter,
                        std::uint64_t after) {
    auto stream = std::make_shared<EventStream>(std::move(socket), log, std::move(filter), after);
    net::post(stream->executor(), [stream] { stream->start(); });
}

}  // namespace deskbox::server::events
