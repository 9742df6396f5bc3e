// A webhook receiver for tests and benchmarks: a real HTTP server on a loopback port (Beast),
// recording each request, answering with a status the test sets, after a delay it sets
// (a slow receiver), and going down and up again on the same port (refused meanwhile). With
// use_tls it speaks HTTPS with the certificate of the context it is given (switched at any
// time: the next connection gets the new one), and counts handshakes that failed.
#pragma once

#include <poll.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <memory>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace deskbox::test {

struct ReceivedRequest {
    std::string target;
    std::map<std::string, std::string> headers;  // names as sent
    std::string body;
    unsigned answered = 0;  // the status it got
    std::chrono::system_clock::time_point at;
    std::string header(const std::string& name) const {
        auto it = headers.find(name);
        return it == headers.end() ? "" : it->second;
    }
};

class WebhookReceiver {
  public:
    WebhookReceiver() { start(); }
    ~WebhookReceiver() { stop(); }
    WebhookReceiver(const WebhookReceiver&) = delete;
    WebhookReceiver& operator=(const WebhookReceiver&) = delete;

    unsigned short port() const { return port_; }
    std::string url(const std::string& path = "/hook") const {
        std::lock_guard lock(mutex_);
        return (tls_ ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(port_) + path;
    }
    // HTTPS from the next connection on, with `context`'s certificate; null: plain HTTP again.
    void use_tls(std::shared_ptr<boost::asio::ssl::context> context) {
        std::lock_guard lock(mutex_);
        tls_ = std::move(context);
    }
    // TLS handshakes that failed (a client that did not trust the certificate).
    int tls_failures() const {
        std::lock_guard lock(mutex_);
        return tls_failures_;
    }
    void set_status(unsigned status) { status_ = status; }
    void set_delay(std::chrono::milliseconds delay) { delay_ = delay; }
    // Up on its port (a free one the first time); connections are refused while down.
    void start() {
        namespace net = boost::asio;
        acceptor_.emplace(io_);
        const net::ip::tcp::endpoint at(net::ip::make_address("127.0.0.1"), port_);
        acceptor_->open(at.protocol());
        acceptor_->set_option(net::socket_base::reuse_address(true));
        acceptor_->bind(at);
        acceptor_->listen();
        port_ = acceptor_->local_endpoint().port();
        stopping_ = false;
        thread_ = std::thread([this] { serve(); });
    }
    void stop() {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        wake_.notify_all();
        if (thread_.joinable()) thread_.join();
        acceptor_.reset();
    }
    std::vector<ReceivedRequest> received() const {
        std::lock_guard lock(mutex_);
        return received_;
    }
    // The requests it answered 2xx, in arrival order.
    std::vector<ReceivedRequest> accepted() const {
        std::vector<ReceivedRequest> out;
        for (auto& r : received())
            if (r.answered >= 200 && r.answered < 300) out.push_back(r);
        return out;
    }

  private:
    void serve() {
        while (true) {
            {
                std::lock_guard lock(mutex_);
                if (stopping_) return;
            }
            pollfd p{acceptor_->native_handle(), POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) continue;  // wakes to see stop()
            boost::system::error_code ec;
            boost::asio::ip::tcp::socket socket(io_);
            acceptor_->accept(socket, ec);
            if (ec) continue;
            std::shared_ptr<boost::asio::ssl::context> tls;
            {
                std::lock_guard lock(mutex_);
                tls = tls_;
            }
            if (!tls) {
                answer(socket);
                continue;
            }
            boost::asio::ssl::stream<boost::asio::ip::tcp::socket&> secured(socket, *tls);
            secured.handshake(boost::asio::ssl::stream_base::server, ec);
            if (ec) {
                std::lock_guard lock(mutex_);
                ++tls_failures_;
                continue;
            }
            answer(secured);
        }
    }
    template <typename Stream>
    void answer(Stream& socket) {
        namespace http = boost::beast::http;
        boost::beast::flat_buffer buffer;
        http::request<http::string_body> request;
        boost::system::error_code ec;
        http::read(socket, buffer, request, ec);
        if (ec) return;
        ReceivedRequest r;
        r.target = std::string(request.target());
        for (auto& field : request)
            r.headers[std::string(field.name_string())] = std::string(field.value());
        r.body = request.body();
        r.at = std::chrono::system_clock::now();
        r.answered = status_;
        {
            // A slow receiver: answers after the delay (or when stopped).
            std::unique_lock lock(mutex_);
            // The delay as it is now: a test shortening it releases a request held already.
            while (!stopping_ && std::chrono::system_clock::now() < r.at + delay_.load())
                wake_.wait_for(lock, std::chrono::milliseconds(10));
            if (stopping_) return;
            received_.push_back(r);
        }
        http::response<http::string_body> res{static_cast<http::status>(r.answered), 11};
        if (r.answered >= 300 && r.answered < 400) res.set(http::field::location, "/elsewhere");
        res.body() = "ok";
        res.prepare_payload();
        http::write(socket, res, ec);
    }

    boost::asio::io_context io_;
    std::optional<boost::asio::ip::tcp::acceptor> acceptor_;
    unsigned short port_ = 0;
    std::atomic<unsigned> status_{200};
    std::atomic<std::chrono::milliseconds> delay_{std::chrono::milliseconds(0)};
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
    std::vector<ReceivedRequest> received_;
    std::shared_ptr<boost::asio::ssl::context> tls_;
    int tls_failures_ = 0;
    std::thread thread_;
};

}  // namespace deskbox::test
