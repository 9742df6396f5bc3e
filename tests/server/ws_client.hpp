// A small synchronous WebSocket client for tests (Boost.Beast): connect with a target, read
// the next message with a deadline, send text, see the close code.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include <chrono>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace deskbox::test {

class WsClient {
  public:
    struct Message {
        bool text = false;
        std::string data;
        nlohmann::json json() const { return nlohmann::json::parse(data, nullptr, false); }
    };

    // Connects and upgrades; on a refused upgrade `status()` is the HTTP status and
    // `connected()` false.
    // `receive_buffer` > 0 shrinks the socket's receive buffer (a client that reads slowly
    // fills it sooner).
    WsClient(int port, const std::string& target, const std::string& subprotocol = {},
             int receive_buffer = 0)
        : ws_(io_) {
        namespace net = boost::asio;
        namespace websocket = boost::beast::websocket;
        auto& socket = boost::beast::get_lowest_layer(ws_).socket();
        socket.open(net::ip::tcp::v4());
        if (receive_buffer > 0)
            socket.set_option(net::socket_base::receive_buffer_size(receive_buffer));
        boost::beast::get_lowest_layer(ws_).connect(net::ip::tcp::endpoint(
            net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
        if (!subprotocol.empty())
            ws_.set_option(
                websocket::stream_base::decorator([subprotocol](websocket::request_type& req) {
                    req.set(boost::beast::http::field::sec_websocket_protocol, subprotocol);
                }));
        // The async handshake fills the response even when the upgrade is declined (the
        // synchronous one does not), so a refusal's status and body can be checked.
        websocket::response_type response;
        boost::beast::error_code result;
        ws_.async_handshake(response, "127.0.0.1", target,
                            [&](boost::beast::error_code ec) { result = ec; });
        io_.run_for(std::chrono::seconds(30));
        status_ = response.result_int();
        body_ = response.body();
        connected_ = !result && status_ == 101;
    }

    bool connected() const { return connected_; }
    unsigned status() const { return status_; }
    const std::string& refusal_body() const { return body_; }

    // The next message, or nullopt on timeout or close (then close_code() says which).
    std::optional<Message> read(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
        if (!connected_) return std::nullopt;
        std::optional<Message> out;
        boost::beast::error_code result = boost::asio::error::timed_out;
        bool done = false;
        ws_.async_read(buffer_, [&](boost::beast::error_code ec, std::size_t) {
            done = true;
            result = ec;
        });
        io_.restart();
        io_.run_for(timeout);
        if (!done) {
            // Cancel the read and let its handler run before returning (the buffer is ours).
            boost::beast::get_lowest_layer(ws_).cancel();
            io_.restart();
            io_.run();
            connected_ = false;
            return std::nullopt;
        }
        if (result) {
            connected_ = false;
            // A close frame read is a close, also when answering it failed (the peer, having
            // refused a message, may hang up at once: the answer then meets a broken pipe).
            if (result == boost::beast::websocket::error::closed || ws_.reason().code != 0)
                close_code_ = ws_.reason().code;
            return std::nullopt;
        }
        out = Message{ws_.got_text(), boost::beast::buffers_to_string(buffer_.data())};
        buffer_.consume(buffer_.size());
        return out;
    }

    // The next message satisfying `want` (others are skipped), or nullopt.
    template <typename Want>
    std::optional<Message> read_until(
        Want want, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
        auto end = std::chrono::steady_clock::now() + timeout;
        while (std::chrono::steady_clock::now() < end) {
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                end - std::chrono::steady_clock::now());
            auto m = read(std::max(left, std::chrono::milliseconds(1)));
            if (!m) return std::nullopt;
            if (want(*m)) return m;
        }
        return std::nullopt;
    }

    void send_text(const std::string& text) {
        ws_.text(true);
        ws_.write(boost::asio::buffer(text));
    }
    void send_binary(const std::string& bytes) {
        ws_.binary(true);
        ws_.write(boost::asio::buffer(bytes));
    }
    std::optional<int> close_code() const { return close_code_; }

  private:
    boost::asio::io_context io_;
    boost::beast::websocket::stream<boost::beast::tcp_stream> ws_;
    boost::beast::flat_buffer buffer_;
    bool connected_ = false;
    unsigned status_ = 0;
    std::string body_;
    std::optional<int> close_code_;
};

}  // namespace deskbox::test
