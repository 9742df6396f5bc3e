// The server's lifecycle events (server/events/): the durable log under <state>/events, the
// webhooks it is delivered to, and the one entry sandboxes feed it through (record). Made
// before the SandboxManager and gone after it, so every sandbox's last event is recorded.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/events/event_log.hpp"
#include "server/events/webhook.hpp"
#include "server/events/webhook_sender.hpp"

namespace deskbox::server::events {

class EventService {
  public:
    // Opens the log and the webhooks' cursors; nothing is sent before start_delivery.
    // Throws std::system_error (the state dir), std::invalid_argument (a webhook).
    EventService(const std::filesystem::path& state_dir, std::vector<WebhookConfig> webhooks);
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
    const std::vector<std::unique_ptr<WebhookSender>>& senders() const { return senders_; }

  private:
    EventLog log_;
    std::vector<WebhookConfig> webhooks_;
    std::vector<std::unique_ptr<WebhookSender>> senders_;
};

}  // namespace deskbox::server::events
