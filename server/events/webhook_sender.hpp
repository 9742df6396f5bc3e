// Delivers the event log to one webhook, on a thread of its own: each event POSTed as JSON,
// signed (webhook.hpp), in log order, at least once. Its cursor (the last event id it
// delivered) is a file under the state dir, written after each delivery, so a restarted server
// (SIGKILL too) resumes there: an event may arrive twice, never not at all. A failed attempt
// (no connection, a timeout, a TLS handshake or certificate that fails, a non-2xx answer, a
// redirect, never followed) is retried after a wait that doubles from retry_initial up to
// retry_max. https:// webhooks verify the receiver's certificate against the host's trust store
// and the webhook's ca_file, by the URL's host name (or IP address), over TLS 1.2 or later. Sandbox
// operations only append to the log: a webhook that is down or slow delays nothing but its own
// deliveries. One that stays down while the log grows is given up on past a backlog (drop_through,
// EventService's cap): the oldest events are dropped for it, counted, and never block the log's
// trimming.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "server/events/event_log.hpp"
#include "server/events/webhook.hpp"

namespace deskbox::server::events {

class WebhookSender {
  public:
    // Reads (or starts, at the log's end) the cursor in `cursor_dir`; delivery waits for start().
    // Throws std::invalid_argument when an https webhook's ca_file cannot be loaded.
    WebhookSender(WebhookConfig config, EventLog& log, const std::filesystem::path& cursor_dir);
    ~WebhookSender();  // stops at once (an attempt under way is abandoned, not counted)
    WebhookSender(const WebhookSender&) = delete;
    WebhookSender& operator=(const WebhookSender&) = delete;

    void start(const SelfAddress& self);
    std::uint64_t cursor() const { return cursor_; }
    const std::string& url() const { return config_.url; }
    std::uint64_t delivered() const { return delivered_; }
    std::uint64_t failed_attempts() const { return failed_attempts_; }
    // Why the last failed attempt failed ("" before any), as the server's log says it.
    std::string last_failure() const;
    // Gives up on every event up to `id` it has not passed yet: not sent (an attempt being
    // retried is abandoned), counted in dropped() at once (the log may trim them before the
    // sender reaches them), whatever their type. Thread-safe.
    void drop_through(std::uint64_t id);
    std::uint64_t dropped() const { return dropped_; }
    // The oldest event it may still send: what the log must keep.
    std::uint64_t needs_from() const;

  private:
    void run();
    enum class Outcome { sent, dropped, stopped };
    // Delivers `event`, retrying until it is sent, dropped (drop_through) or the sender stops.
    Outcome deliver(const Event& event);
    bool dropping(std::uint64_t id) const;
    // One POST; "" on a 2xx answer, else why it failed.
    std::string attempt(const Event& event);
    void save_cursor();
    // Waits `delay` or until stopped, or (with `wake_on_event`) a new event, or event `retrying`
    // is dropped; false if stopped.
    bool pause(std::chrono::milliseconds delay, bool wake_on_event, std::uint64_t retrying = 0);

    WebhookConfig config_;
    EventLog& log_;
    std::filesystem::path cursor_file_;
    SelfAddress self_;
    std::atomic<std::uint64_t> cursor_{0};
    std::atomic<std::uint64_t> delivered_{0}, failed_attempts_{0}, dropped_{0};
    boost::asio::io_context io_;
    // https:// webhooks: the verifying client context (trust store, ca_file, TLS >= 1.2).
    std::unique_ptr<boost::asio::ssl::context> tls_;
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
    std::uint64_t seen_ = 0;          // the newest id the listener reported
    std::uint64_t drop_through_ = 0;  // events up to this id are given up on
    std::string last_failure_;
    EventLog::Subscription subscription_;
    std::thread thread_;
};

}  // namespace deskbox::server::events
