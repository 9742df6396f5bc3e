#include "server/http/streamed_answer.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>

#include <future>
#include <mutex>
#include <optional>

#include "server/http/http_server.hpp"

namespace deskbox::server {

namespace net = boost::asio;

struct StreamedAnswer::Impl {
    std::optional<net::ip::tcp::socket> socket;  // none: in-process, collect into `body`
    HttpResponse buffered{http::status::ok, 11};
    mutable std::mutex mutex;
    bool gone = false;

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
    : impl_(std::make_unique<Impl>()) {
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
}

StreamedAnswer::~StreamedAnswer() {
    if (!impl_->socket) return;
    boost::system::error_code ignored;
    impl_->socket->shutdown(net::ip::tcp::socket::shutdown_both, ignored);
    impl_->socket->close(ignored);
}

bool StreamedAnswer::write(std::string_view text) {
    std::lock_guard lock(impl_->mutex);
    return impl_->send_locked(text);
}

bool StreamedAnswer::client_gone() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->gone;
}

HttpResponse StreamedAnswer::finish() {
    if (impl_->socket) return {};
    HttpResponse res = std::move(impl_->buffered);
    res.prepare_payload();
    return res;
}

}  // namespace deskbox::server
