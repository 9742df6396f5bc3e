#include "server/events/webhook_sender.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <cstdio>
#include <fstream>

#include "common/atomic_file.hpp"
#include "server/client/api_client.hpp"

namespace deskbox::server::events {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

namespace {

struct Stopped {};  // the sender stops: an attempt under way is abandoned

}  // namespace

WebhookSender::WebhookSender(WebhookConfig config, EventLog& log,
                             const std::filesystem::path& cursor_dir)
    : config_(std::move(config)),
      log_(log),
      cursor_file_(cursor_dir / cursor_file_name(config_.url)) {
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
        std::fprintf(stderr, "deskboxd: webhook %s: event %llu: %s; again in %lld ms\n",
                     config_.url.c_str(), static_cast<unsigned long long>(event.id), why.c_str(),
                     static_cast<long long>(wait.count()));
        if (!pause(wait, false, event.id)) return Outcome::stopped;
        if (dropping(event.id)) return Outcome::dropped;
        wait = std::min(wait * 2, config_.retry_max);
    }
}

std::string WebhookSender::attempt(const Event& event) {
    const auto url = client::parse_server_url(config_.url);
    beast::tcp_stream stream(io_);
    beast::error_code step_error;
    auto done = [&](beast::error_code ec, auto&&...) { step_error = ec; };
    // Each step on io_ under the stream's timer: a receiver that stalls fails the attempt.
    auto run_step = [&] {
        stream.expires_after(config_.timeout);
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
    stream.async_connect(allowed, done);
    if (run_step()) return "cannot connect: " + step_error.message();

    const std::string body =
        event.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const long long now = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
    http::request<http::string_body> request{http::verb::post,
                                             url.base_path.empty() ? "/" : url.base_path, 11};
    request.set(http::field::host, url.host_header());
    request.set(http::field::user_agent, "deskboxd-webhooks");
    request.set(http::field::content_type, "application/json");
    request.set("Deskbox-Event-Id", std::to_string(event.id));
    request.set("Deskbox-Signature", webhook_signature(config_.secret, now, body));
    request.body() = body;
    request.prepare_payload();
    http::async_write(stream, request, done);
    if (run_step()) return "cannot send: " + step_error.message();
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 10);  // the answer's body is ignored; a huge one is not read
    http::async_read(stream, buffer, parser, done);
    if (run_step() && !parser.is_header_done()) return "no answer: " + step_error.message();
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    const unsigned status = parser.get().result_int();
    if (status >= 200 && status < 300) return {};
    if (status >= 300 && status < 400)
        return "answered " + std::to_string(status) + " (a redirect; not followed)";
    return "answered " + std::to_string(status);
}

}  // namespace deskbox::server::events
