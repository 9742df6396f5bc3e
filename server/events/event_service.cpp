#include "server/events/event_service.hpp"

#include <algorithm>
#include <cstdio>

namespace deskbox::server::events {

EventService::EventService(const std::filesystem::path& state_dir,
                           std::vector<WebhookConfig> webhooks, EventRetention retention,
                           std::string node)
    : log_(state_dir / "events", 4096, std::move(node)),
      retention_(retention),
      webhooks_(std::move(webhooks)) {
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
    trim_if_due();
}

void EventService::trim_if_due() {
    {
        std::lock_guard lock(trim_mutex_);
        const auto now = std::chrono::steady_clock::now();
        if (last_trim_ != std::chrono::steady_clock::time_point{} &&
            now - last_trim_ < retention_.check_every)
            return;
        last_trim_ = now;
    }
    try {
        trim();
    } catch (const std::system_error& e) {
        std::fprintf(stderr, "deskboxd: the event log was not trimmed: %s\n", e.what());
    }
}

std::size_t EventService::trim() {
    const std::uint64_t last = log_.last_id();
    std::uint64_t keep_from = last + 1;
    for (const auto& sender : senders_) {
        if (last - std::min(last, sender->cursor()) > retention_.max_undelivered) {
            const std::uint64_t through = last - retention_.max_undelivered;
            if (sender->needs_from() <= through)
                std::fprintf(stderr,
                             "deskboxd: webhook %s is more than %llu events behind: events up to "
                             "%llu are dropped for it (--events-max-undelivered)\n",
                             sender->url().c_str(),
                             static_cast<unsigned long long>(retention_.max_undelivered),
                             static_cast<unsigned long long>(through));
            sender->drop_through(through);
        }
        keep_from = std::min(keep_from, sender->needs_from());
    }
    return log_.trim(event_time(std::chrono::system_clock::now() - retention_.keep), keep_from);
}

void EventService::start_delivery(const SelfAddress& self) {
    for (const auto& webhook : webhooks_) check_webhook_url(webhook, self);
    for (auto& sender : senders_) sender->start(self);
}

}  // namespace deskbox::server::events
