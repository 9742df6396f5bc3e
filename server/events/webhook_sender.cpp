#include "server/events/webhook_sender.hpp"

#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <cstdio>
#include <fstream>

#include "common/atomic_file.hpp"
#include "server/network/ip_range.hpp"

namespace deskbox::server::events {

namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = boost::asio::ssl;
using tcp = boost::asio::ip::tcp;

namespace {

struct Stopped {};  // the sender stops: an attempt under way is abandoned

// The client context an https:// webhook connects with: the receiver's certificate must chain
// to the host's trust store or the webhook's own CA file; nothing older than TLS 1.2.
std::unique_ptr<ssl::context> webhook_tls_context(const WebhookConfig& config) {
    auto context = std::make_unique<ssl::context>(ssl::context::tls_client);
    SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION);
    boost::system::error_code ec;
    context->set_default_verify_paths(ec);
    if (ec)
        throw std::invalid_argument("webhook " + config.url +
                                    ": cannot read the host's trust store: " + ec.message());
    if (!config.ca_file.empty()) {
        context->load_verify_file(config.ca_file.string(), ec);
        if (ec)
            throw std::invalid_argument("webhook " + config.url + ": cannot load ca_file " +
                                        config.ca_file.string() + ": " + ec.message());
    }
    context->set_verify_mode(ssl::verify_peer);
    return context;
}

}  // namespace

WebhookSender::WebhookSender(WebhookConfig config, EventLog& log,
                             const std::filesystem::path& cursor_dir)
    : config_(std::move(config)),
      log_(log),
      cursor_file_(cursor_dir / cursor_file_name(config_.url)) {
    if (webhook_target(config_.url).tls) tls_ = webhook_tls_context(config_);
    std::filesystem::create_directories(cursor_dir);
    std::ifstream in(cursor_file_);
    const auto saved = nlohmann::json::parse(in, nullptr, false);
    if (saved.is_object() && saved.value("url", "") == config_.url && saved.contains("cursor") &&
        saved["cursor"].is_number_unsigned()) {
        cursor_ = saved["cursor"].get<std::uint64_t>();
    } else {
        // A new webhook gets the events from now on, not the log's history.
        cursor_ = log_.last_id();
        save_cursor();
    }
}

WebhookSender::~WebhookSender() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    io_.stop();
    if (thread_.joinable()) thread_.join();
}

void WebhookSender::start(const SelfAddress& self) {
    self_ = self;
    subscription_ = log_.subscribe([this](const Event& event) {
        {
            std::lock_guard lock(mutex_);
            seen_ = std::max(seen_, event.id);
        }
        wake_.notify_all();
    });
    thread_ = std::thread([this] { run(); });
}

void WebhookSender::save_cursor() {
    const nlohmann::json record = {{"url", config_.url}, {"cursor", cursor_.load()}};
    try {
        atomic_file::write(cursor_file_, record.dump() + "\n", {0600});
    } catch (const std::exception& e) {
        // Delivery goes on; a restart would send the events since the last saved cursor again.
        std::fprintf(stderr, "deskboxd: webhook %s: cursor not saved: %s\n", config_.url.c_str(),
                     e.what());
    }
}

bool WebhookSender::pause(std::chrono::milliseconds delay, bool wake_on_event,
                          std::uint64_t retrying) {
    std::unique_lock lock(mutex_);
    const std::uint64_t cursor = cursor_;
    wake_.wait_for(lock, delay, [&] {
        return stopping_ || (wake_on_event && seen_ > cursor) ||
               (retrying && drop_through_ >= retrying);
    });
    return !stopping_;
}

void WebhookSender::drop_through(std::uint64_t id) {
    {
        std::lock_guard lock(mutex_);
        const std::uint64_t passed = std::max<std::uint64_t>(drop_through_, cursor_);
        if (id <= passed) return;
        dropped_ += id - passed;
        drop_through_ = id;
    }
    wake_.notify_all();
}

bool WebhookSender::dropping(std::uint64_t id) const {
    std::lock_guard lock(mutex_);
    return id <= drop_through_;
}

std::uint64_t WebhookSender::needs_from() const {
    std::lock_guard lock(mutex_);
    return std::max<std::uint64_t>(cursor_, drop_through_) + 1;
}

void WebhookSender::run() {
    while (true) {
        const auto batch = log_.read_after(cursor_, 64);
        if (batch.empty()) {
            // The listener wakes it; the timeout is only a safety net.
            if (!pause(std::chrono::seconds(5), true)) return;
            continue;
        }
        bool skipped = false;
        for (const auto& event : batch) {
            const bool unwanted = !config_.types.empty() && !config_.types.count(event.type);
            if (unwanted || dropping(event.id)) {  // a dropped one was counted then
                cursor_ = event.id;
                skipped = true;
                continue;
            }
            if (deliver(event) == Outcome::stopped) return;
            cursor_ = event.id;
            save_cursor();
            skipped = false;
        }
        if (skipped) save_cursor();
    }
}

WebhookSender::Outcome WebhookSender::deliver(const Event& event) {
    auto wait = config_.retry_initial;
    while (true) {
        std::string why;
        try {
            why = attempt(event);
        } catch (const Stopped&) {
            return Outcome::stopped;
        }
        if (why.empty()) {
            ++delivered_;
            std::lock_guard lock(mutex_);
            if (event.id <= drop_through_) --dropped_;  // given up on while on its way: it got it
            return Outcome::sent;
        }
        ++failed_attempts_;
        {
            std::lock_guard lock(mutex_);
            last_failure_ = why;
        }
        std::fprintf(stderr, "deskboxd: webhook %s: event %s: %s; again in %lld ms\n",
                     config_.url.c_str(), event.public_id().c_str(), why.c_str(),
                     static_cast<long long>(wait.count()));
        if (!pause(wait, false, event.id)) return Outcome::stopped;
        if (dropping(event.id)) return Outcome::dropped;
        wait = std::min(wait * 2, config_.retry_max);
    }
}

std::string WebhookSender::last_failure() const {
    std::lock_guard lock(mutex_);
    return last_failure_;
}

std::string WebhookSender::attempt(const Event& event) {
    const auto url = webhook_target(config_.url);
    beast::error_code step_error;
    auto done = [&](beast::error_code ec, auto&&...) { step_error = ec; };
    // Each step on io_ under the TCP stream's timer: a receiver that stalls (in TLS too) fails
    // the attempt.
    auto run_step = [&](beast::tcp_stream& timed) {
        timed.expires_after(config_.timeout);
        io_.restart();
        io_.run();
        {
            std::lock_guard lock(mutex_);
            if (stopping_) throw Stopped{};
        }
        return step_error;
    };
    beast::error_code ec;
    const auto found = tcp::resolver(io_).resolve(url.host, url.port, ec);
    if (ec) return "cannot resolve " + url.host + ": " + ec.message();
    // Checked again at each connect: a name may resolve elsewhere than at start.
    std::vector<tcp::endpoint> allowed;
    std::string refused;
    for (const auto& entry : found) {
        auto why = refusal_of(entry.endpoint().address(), entry.endpoint().port(), self_,
                              config_.allow_private);
        if (why.empty())
            allowed.push_back(entry.endpoint());
        else
            refused = why;
    }
    if (allowed.empty()) return "refused: " + refused;

    const std::string body =
        event.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const long long now = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
    http::request<http::string_body> request{http::verb::post, url.path, 11};
    request.set(http::field::host, url.host_header);
    request.set(http::field::user_agent, "deskboxd-webhooks");
    request.set(http::field::content_type, "application/json");
    request.set("Deskbox-Event-Id", event.public_id());
    request.set("Deskbox-Signature", webhook_signature(config_.secret, now, body));
    request.body() = body;
    request.prepare_payload();

    // The POST and its answer, over plain TCP or TLS alike.
    auto exchange = [&](auto& stream, beast::tcp_stream& timed) -> std::string {
        http::async_write(stream, request, done);
        if (run_step(timed)) return "cannot send: " + step_error.message();
        beast::flat_buffer buffer;
        http::response_parser<http::string_body> parser;
        parser.body_limit(64 << 10);  // the answer's body is ignored; a huge one is not read
        http::async_read(stream, buffer, parser, done);
        if (run_step(timed) && !parser.is_header_done())
            return "no answer: " + step_error.message();
        timed.socket().shutdown(tcp::socket::shutdown_both, ec);
        const unsigned status = parser.get().result_int();
        if (status >= 200 && status < 300) return {};
        if (status >= 300 && status < 400)
            return "answered " + std::to_string(status) + " (a redirect; not followed)";
        return "answered " + std::to_string(status);
    };

    if (!tls_) {
        beast::tcp_stream stream(io_);
        stream.async_connect(allowed, done);
        if (run_step(stream)) return "cannot connect: " + step_error.message();
        return exchange(stream, stream);
    }
    ssl::stream<beast::tcp_stream> stream(io_, *tls_);
    beast::tcp_stream& timed = stream.next_layer();
    timed.async_connect(allowed, done);
    if (run_step(timed)) return "cannot connect: " + step_error.message();
    // The certificate must name the URL's host: SNI and the name check for a DNS name, the IP
    // address check for a literal (SNI carries no addresses, RFC 6066).
    SSL* native = stream.native_handle();
    const bool literal = network::parse_ip_address(url.host).has_value();
    const bool named =
        literal ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(native), url.host.c_str()) == 1
                : SSL_set_tlsext_host_name(native, url.host.c_str()) == 1 &&
                      SSL_set1_host(native, url.host.c_str()) == 1;
    if (!named) return "TLS: cannot check the certificate against " + url.host;
    stream.async_handshake(ssl::stream_base::client, done);
    if (run_step(timed)) {
        const long verdict = SSL_get_verify_result(native);
        if (verdict != X509_V_OK)
            return std::string("TLS: the receiver's certificate is not trusted: ") +
                   X509_verify_cert_error_string(verdict);
        return "TLS handshake failed: " + step_error.message();
    }
    // No close_notify exchange after the answer: the answer is complete (its length or
    // chunks), and waiting for the receiver's would only add a round trip.
    return exchange(stream, timed);
}

}  // namespace deskbox::server::events
