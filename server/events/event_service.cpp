#include "server/events/event_service.hpp"

namespace deskbox::server::events {

EventService::EventService(const std::filesystem::path& state_dir,
                           std::vector<WebhookConfig> webhooks)
    : log_(state_dir / "events"), webhooks_(std::move(webhooks)) {
    for (const auto& webhook : webhooks_)
        senders_.push_back(
            std::make_unique<WebhookSender>(webhook, log_, state_dir / "events" / "webhooks"));
}

void EventService::record(const std::string& sandbox_id, const std::string& template_name,
                          const nlohmann::json& metadata, const std::string& kind,
                          const nlohmann::json& detail) {
    for (auto& lifecycle : lifecycle_events_of(kind, detail)) {
        Event event;
        event.type = std::move(lifecycle.type);
        event.sandbox_id = sandbox_id;
        event.template_name = template_name;
        event.metadata = metadata.is_object() ? metadata : nlohmann::json::object();
        event.data = std::move(lifecycle.data);
        log_.append(std::move(event));
    }
}

void EventService::start_delivery(const SelfAddress& self) {
    for (const auto& webhook : webhooks_) check_webhook_url(webhook, self);
    for (auto& sender : senders_) sender->start(self);
}

}  // namespace deskbox::server::events
