// A sandbox's lifecycle event: what webhooks receive, the durable log holds and GET /v1/events
// streams. `id` is unique and grows with each event (across restarts), so receivers dedup by it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace deskbox::server::events {

// The event types, in the order the README lists them.
inline const std::vector<std::string>& event_types() {
    static const std::vector<std::string> types = {
        "created", "ready", "paused", "resumed", "timeout", "killed", "error", "snapshot_created"};
    return types;
}

struct Event {
    std::uint64_t id = 0;
    std::string type;
    std::string time;  // RFC 3339, UTC, milliseconds: "2026-12-07T02:31:00.123Z"
    std::string sandbox_id;
    std::string template_name;
    nlohmann::json metadata = nlohmann::json::object();
    nlohmann::json data = nlohmann::json::object();

    // {id, type, time, sandbox_id, template, metadata, data}
    nlohmann::json to_json() const;
    // Throws nlohmann::json::exception on a line that is not an event.
    static Event from_json(const nlohmann::json& j);
};

// What a sandbox's audit line `kind` with `detail` means as events (type and data): none for
// most kinds; the server's audit log and these events come from one place (Sandbox::audit).
struct LifecycleEvent {
    std::string type;
    nlohmann::json data = nlohmann::json::object();
};
std::vector<LifecycleEvent> lifecycle_events_of(const std::string& kind,
                                                const nlohmann::json& detail);

// "created,killed" as a set of types; std::invalid_argument naming an unknown one. Empty text:
// every type.
std::set<std::string> parse_event_types(std::string_view comma_separated);

// Now as Event::time writes it.
std::string event_time_now();
// The same for any point in time.
std::string event_time(std::chrono::system_clock::time_point at);

}  // namespace deskbox::server::events
