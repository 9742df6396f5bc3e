#include "server/http/streamed_answer.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <atomic>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <utility>

#include "server/http/http_server.hpp"

namespace deskbox::server {

namespace net = boost::asio;

struct StreamedAnswer::Impl : std::enable_shared_from_this<StreamedAnswer::Impl> {
    std::optional<net::ip::tcp::socket> socket;  // none: in-process, collect into `body`
    HttpResponse buffered{http::status::ok, 11};
    mutable std::mutex mutex;  // one write at a time
    std::atomic<bool> gone = false;
    // The client's side: it sends nothing more, so a read that ends means it left.
    std::mutex gone_mutex;
    std::function<void()> on_gone;
    std::array<char, 512> discard{};

    void watch_for_close() {
        socket->async_read_some(
            net::buffer(discard),
            [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                if (!ec) return self->watch_for_close();
                self->gone = true;
                // Under the lock: the destructor clears it before what it wakes goes away.
                std::lock_guard lock(self->gone_mutex);
                if (auto tell = std::exchange(self->on_gone, nullptr)) tell();
            });
    }

    bool send_locked(std::string_view text) {
        if (gone) return false;
        if (!socket) {
            buffered.body() += text;
            return true;
        }
        // The connection's I/O runs on the server's threads; this handler thread only waits,
        // so a client that stops reading costs a bounded wait, not a stuck thread.
        auto done =
            net::async_write(*socket, net::buffer(text.data(), text.size()), net::use_future);
        if (done.wait_for(kWriteTimeout) != std::future_status::ready) {
            gone = true;
            // On the socket's own executor: the write in flight runs there.
            net::post(socket->get_executor(), [this] {
                boost::system::error_code ignored;
                socket->shutdown(net::ip::tcp::socket::shutdown_both, ignored);
                socket->cancel(ignored);
            });
            done.wait();
            return false;
        }
        try {
            done.get();
        } catch (const boost::system::system_error&) {
            gone = true;
        }
        return !gone;
    }
};

StreamedAnswer::StreamedAnswer(HttpExchange& exchange, std::string_view content_type,
                               const Headers& headers)
    : impl_(std::make_shared<Impl>()) {
    if (!exchange.stream) {
        impl_->buffered.set(http::field::content_type, std::string(content_type));
        for (const auto& [name, value] : headers) impl_->buffered.set(name, value);
        return;
    }
    impl_->socket.emplace(exchange.stream->release_socket());
    exchange.taken = true;
    std::string head =
        "HTTP/1.1 200 OK\r\nServer: deskboxd\r\nContent-Type: " + std::string(content_type) +
        "\r\nCache-Control: no-store\r\nX-Accel-Buffering: no\r\n";
    for (const auto& [name, value] : headers) head += name + ": " + value + "\r\n";
    head += "Connection: close\r\n\r\n";
    std::lock_guard lock(impl_->mutex);
    impl_->send_locked(head);
    net::post(impl_->socket->get_executor(), [impl = impl_] { impl->watch_for_close(); });
}

StreamedAnswer::~StreamedAnswer() {
    if (!impl_->socket) return;
    {
        std::lock_guard lock(impl_->gone_mutex);
        impl_->on_gone = nullptr;
    }
    // On the socket's executor, where its read waits; the read's handler keeps it alive.
    net::post(impl_->socket->get_executor(), [impl = impl_] {
        boost::system::error_code ignored;
        impl->socket->shutdown(net::ip::tcp::socket::shutdown_both, ignored);
        impl->socket->close(ignored);
    });
}

void StreamedAnswer::on_client_gone(std::function<void()> tell) {
    if (!impl_->socket) return;
    std::lock_guard lock(impl_->gone_mutex);
    if (impl_->gone)
        tell();  // it left before anyone asked
    else
        impl_->on_gone = std::move(tell);
}

bool StreamedAnswer::write(std::string_view text) {
    std::lock_guard lock(impl_->mutex);
    return impl_->send_locked(text);
}

bool StreamedAnswer::client_gone() const {
    return impl_->gone;
}

HttpResponse StreamedAnswer::finish() {
    if (impl_->socket) return {};
    HttpResponse res = std::move(impl_->buffered);
    res.prepare_payload();
    return res;
}

}  // namespace deskbox::server
