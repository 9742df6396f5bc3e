#include "server/stream/viewer_session.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include <deque>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "input/pointer_input.hpp"
#include "server/stream/viewer_messages.hpp"

namespace deskbox::server {
namespace {

namespace beast = boost::beast;
namespace net = boost::asio;
namespace websocket = beast::websocket;
using nlohmann::json;
using Text = std::shared_ptr<const std::string>;

constexpr std::size_t kMaxQueuedTexts = 64;
constexpr std::size_t kMaxClientMessage = 256 * 1024;  // a "text" message carries typed text
// Our limit is checked as a message arrives, and the close that follows is a real close
// handshake. Beast's own limit fails the connection instead, and Boost 1.74's teardown then
// drains one read at most: a viewer still sending gets a reset and loses the close frame
// (and its 1009). Beast's stays as a backstop far above ours, reached only while closing.
constexpr std::size_t kBeastMessageLimit = 64 * kMaxClientMessage;
constexpr std::size_t kReadChunk = 64 * 1024;
constexpr std::uint64_t kMaxBadMessages = 200;  // then the viewer is cut off

class ViewerSession : public std::enable_shared_from_this<ViewerSession> {
  public:
    ViewerSession(beast::tcp_stream&& stream, HttpRequest request, std::shared_ptr<Sandbox> sandbox,
                  const streaming::StreamSettings& settings, bool control, ViewerCounters& counters,
                  std::shared_ptr<streaming::LiveEncoder> encoder)
        : ws_(std::move(stream)),
          request_(std::move(request)),
          sandbox_(std::move(sandbox)),
          settings_(settings),
          control_(control),
          counters_(counters),
          pointer_(input::dom_buttons(), sandbox_->config().width, sandbox_->config().height),
          encoder_(std::move(encoder)) {
        ++counters_.connected;
    }

    ~ViewerSession() {
        subscription_.reset();
        if (control_) sandbox_->input().queue_input(pointer_.release_all(), "viewer");
        --counters_.connected;
    }

    // Called on a request handler's thread: everything the session does, from its first
    // option on, runs on the stream's strand (as Beast's advanced server does).
    void start() {
        net::dispatch(ws_.get_executor(),
                      beast::bind_front_handler(&ViewerSession::on_run, shared_from_this()));
    }

  private:
    void on_run() {
        ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
        ws_.set_option(websocket::stream_base::decorator(
            [](websocket::response_type& res) { res.set(http::field::server, "deskboxd"); }));
        ws_.read_message_max(kBeastMessageLimit);
        ws_.async_accept(request_,
                         beast::bind_front_handler(&ViewerSession::on_accept, shared_from_this()));
    }

    void on_accept(beast::error_code ec) {
        if (ec) return;
        request_ = {};
        const auto& config = sandbox_->config();
        send_text(json{{"type", "hello"},
                       {"sandbox", config.id},
                       {"codec", streaming::codec_name(settings_.codec)},
                       {"screen", {{"width", config.width}, {"height", config.height}}},
                       {"control", control_},
                       {"fps", settings_.max_fps}});
        auto executor = ws_.get_executor();
        std::weak_ptr<ViewerSession> weak = shared_from_this();
        // Callbacks run on the encoder's thread: hop onto this socket's strand and return.
        streaming::StreamCallbacks callbacks;
        callbacks.packet = [executor, weak](const streaming::StreamPacketPtr& packet) {
            net::post(executor, [weak, packet] {
                if (auto self = weak.lock()) self->on_packet(packet);
            });
        };
        callbacks.cursor = [executor, weak](const Text& message) {
            net::post(executor, [weak, message] {
                if (auto self = weak.lock()) self->on_cursor(message);
            });
        };
        callbacks.end = [executor, weak] {
            net::post(executor, [weak] {
                if (auto self = weak.lock())
                    self->close(websocket::close_code::going_away, "sandbox killed");
            });
        };
        subscription_ = encoder_->subscribe(std::move(callbacks));
        read();
    }

    // ---- writing ----
    void on_packet(const streaming::StreamPacketPtr& packet) {
        if (!packets_.push(packet)) {
            ++counters_.packets_dropped;
            encoder_->request_keyframe();
        }
        write_next();
    }

    void on_cursor(const Text& message) {
        if (message->find("\"cursor_shape\"") != std::string::npos)
            cursor_shape_ = message;
        else
            cursor_position_ = message;
        write_next();
    }

    void send_text(const json& message) {
        if (texts_.size() >= kMaxQueuedTexts) return;  // a viewer not reading its pongs
        // decode_viewer_message escapes what it quotes; replace is the net under that.
        texts_.push_back(std::make_shared<const std::string>(
            message.dump(-1, ' ', false, json::error_handler_t::replace)));
        write_next();
    }

    void write_next() {
        if (writing_ || closed_) return;
        Text text;
        streaming::StreamPacketPtr packet;
        if (!texts_.empty()) {
            text = std::move(texts_.front());
            texts_.pop_front();
        } else if (cursor_shape_) {
            text = std::exchange(cursor_shape_, nullptr);
        } else if (cursor_position_) {
            text = std::exchange(cursor_position_, nullptr);
        } else if (closing_) {
            return do_close();  // the close frame goes after the texts, before more video
        } else if (auto next = packets_.pop()) {
            packet = std::move(*next);
        } else {
            return;
        }
        writing_ = true;
        ws_.binary(packet != nullptr);
        auto buffer = packet ? net::buffer(packet->message) : net::buffer(*text);
        ws_.async_write(
            buffer, [self = shared_from_this(), text, packet](beast::error_code ec, std::size_t) {
                self->writing_ = false;
                // error::closed: the read side failed the connection (a message too big) and
                // Beast is sending its close frame and draining; closing the socket under it
                // would reset the connection, and the viewer would never see why.
                if (ec == websocket::error::closed) return self->finished();
                if (ec) return self->fail();
                self->write_next();
            });
    }

    // ---- closing ----
    void close(websocket::close_code code, const std::string& reason) {
        if (closing_ || closed_) return;
        closing_ = true;
        close_reason_ = websocket::close_reason(code, reason.substr(0, 120));
        // Whatever is queued still goes out first (bounded: the viewer may be slow).
        packets_ = streaming::PacketQueue();
        if (!writing_) do_close();
    }

    void do_close() {
        if (closed_) return;
        closed_ = true;
        subscription_.reset();
        ws_.async_close(close_reason_, [self = shared_from_this()](beast::error_code) {});
    }

    void finished() {
        closed_ = true;
        subscription_.reset();
    }

    void fail() {
        finished();
        beast::error_code ignored;
        beast::get_lowest_layer(ws_).socket().close(ignored);
    }

    // ---- reading ----
    void read() {
        ws_.async_read_some(
            buffer_, kReadChunk, [self = shared_from_this()](beast::error_code ec, std::size_t) {
                if (ec) return self->fail();
                if (self->closing_) {
                    // Closing waits for our queued writes; what the viewer still sends is read and
                    // dropped meanwhile, so a viewer blocked writing to us is never a deadlock.
                    self->buffer_.consume(self->buffer_.size());
                } else if (self->buffer_.size() > kMaxClientMessage) {
                    self->buffer_.consume(self->buffer_.size());
                    self->close(websocket::close_code::too_big, "message too big");
                } else if (!self->ws_.is_message_done()) {
                    // More of this message to come.
                } else if (!self->rate_.allow(MessageRate::Clock::now())) {
                    self->buffer_.consume(self->buffer_.size());
                    self->close(websocket::close_code::policy_error,
                                "over " + std::to_string(int(MessageRate::kPerSecond)) +
                                    " messages per second");
                } else {
                    if (!self->ws_.got_text())
                        self->bad_message("binary messages are not accepted; send JSON text");
                    else
                        self->on_message(beast::buffers_to_string(self->buffer_.data()));
                    self->buffer_.consume(self->buffer_.size());
                }
                if (!self->closed_) self->read();
            });
    }

    void bad_message(const std::string& why) {
        if (++bad_messages_ > kMaxBadMessages)
            return close(websocket::close_code::policy_error, "too many malformed messages");
        ++counters_.bad_messages;
        send_text({{"type", "error"}, {"code", "bad_message"}, {"message", why}});
    }

    void on_message(const std::string& text) {
        ViewerRequest r = decode_viewer_message(text, pointer_, control_);
        switch (r.kind) {
            case ViewerRequest::Kind::pong:
                return send_text(r.reply);
            case ViewerRequest::Kind::keyframe:
                return encoder_->request_keyframe();
            case ViewerRequest::Kind::bad:
                return bad_message(r.error);
            case ViewerRequest::Kind::view_only:
                ++counters_.input_ignored;
                if (!told_view_only_) {
                    told_view_only_ = true;
                    send_text({{"type", "error"},
                               {"code", "view_only"},
                               {"message", "this token can only watch; input is ignored"}});
                }
                return;
            case ViewerRequest::Kind::input:
                if (!sandbox_->input().queue_input(std::move(r.actions), "viewer"))
                    send_text({{"type", "error"},
                               {"code", "input_dropped"},
                               {"message", "the sandbox is not taking input now"}});
                return;
        }
    }

    websocket::stream<beast::tcp_stream> ws_;
    HttpRequest request_;
    std::shared_ptr<Sandbox> sandbox_;
    streaming::StreamSettings settings_;
    bool control_;
    ViewerCounters& counters_;
    input::PointerInput pointer_;

    std::shared_ptr<streaming::LiveEncoder> encoder_;
    streaming::LiveEncoder::Subscription subscription_;
    beast::flat_buffer buffer_;
    streaming::PacketQueue packets_;
    std::deque<Text> texts_;
    Text cursor_shape_, cursor_position_;
    bool writing_ = false, closing_ = false, closed_ = false, told_view_only_ = false;
    websocket::close_reason close_reason_;
    std::uint64_t bad_messages_ = 0;
    MessageRate rate_;
};

}  // namespace

void start_viewer_session(HttpExchange& exchange, std::shared_ptr<Sandbox> sandbox,
                          const streaming::StreamSettings& settings, bool control,
                          ViewerCounters& counters,
                          std::shared_ptr<streaming::LiveEncoder> encoder) {
    auto session = std::make_shared<ViewerSession>(std::move(*exchange.stream),
                                                   std::move(exchange.request), std::move(sandbox),
                                                   settings, control, counters, std::move(encoder));
    exchange.taken = true;
    session->start();
}

}  // namespace deskbox::server
