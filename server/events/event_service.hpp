// The server's lifecycle events (server/events/): the durable log under <state>/events, the
// webhooks it is delivered to, and the one entry sandboxes feed it through (record). Made
// before the SandboxManager and gone after it, so every sandbox's last event is recorded.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/events/event_log.hpp"
#include "server/events/webhook.hpp"
#include "server/events/webhook_sender.hpp"

namespace deskbox::server::events {

// How long events stay in the log: older ones go (checked at most every `check_every`, on the
// thread recording an event), except those a webhook has not had yet.
struct EventRetention {
    std::chrono::hours keep{24 * 30};
    std::chrono::seconds check_every{3600};
    // A webhook further behind than this many events loses the oldest (--events-max-undelivered):
    // the log is not kept for a receiver that may never come back.
    std::uint64_t max_undelivered = 100'000;
};

class EventService {
  public:
    // Opens the log and the webhooks' cursors; nothing is sent before start_delivery. `node`:
    // this node's name in a cluster (its events' ids carry it), "" on a single server.
    // Throws std::system_error (the state dir), std::invalid_argument (a webhook).
    EventService(const std::filesystem::path& state_dir, std::vector<WebhookConfig> webhooks,
                 EventRetention retention = {}, std::string node = {});
    EventService(const EventService&) = delete;
    EventService& operator=(const EventService&) = delete;

    // A sandbox's audit line: the events it means (lifecycle_events_of) are appended.
    void record(const std::string& sandbox_id, const std::string& template_name,
                const nlohmann::json& metadata, const std::string& kind,
                const nlohmann::json& detail);
    // Once deskboxd listens at `self`: checks each webhook's URL (std::invalid_argument naming
    // it) and starts delivering.
    void start_delivery(const SelfAddress& self);

    EventLog& log() { return log_; }
    const EventLog& log() const { return log_; }
    // Gives up, for a webhook more than max_undelivered behind, on its oldest events (said on
    // stderr), then drops the events older than the retention that no webhook still needs;
    // how many went.
    std::size_t trim();
    const std::vector<std::unique_ptr<WebhookSender>>& senders() const { return senders_; }

  private:
    void trim_if_due();

    EventLog log_;
    EventRetention retention_;
    std::mutex trim_mutex_;
    std::chrono::steady_clock::time_point last_trim_{};
    std::vector<WebhookConfig> webhooks_;
    std::vector<std::unique_ptr<WebhookSender>> senders_;
};

}  // namespace deskbox::server::events
