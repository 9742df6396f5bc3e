// A sandbox's lifecycle event: what webhooks receive, the durable log holds and GET /v1/events
// streams. Its id is unique across a cluster and grows with each event of its node (across
// restarts), so receivers dedup by it: "<node>:<n>" in a cluster (the node that wrote it, whose
// events only it keeps and streams), "<n>" on a single server; n counts that node's events.
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

// An event id taken apart: the node ("" for a single server's, and for the bare numbers logs
// held before ids named their node) and the node's running number.
struct EventId {
    std::string node;
    std::uint64_t sequence = 0;
};
// "<node>:<n>" or "<n>" (a node name as --node-name allows it, n a decimal number); nullopt for
// anything else.
std::optional<EventId> parse_event_id(std::string_view text);

struct Event {
    std::uint64_t id = 0;  // the node's running number: the log's order, cursors, ?after=
    std::string node;      // the node that wrote it; "" on a single server
    std::string type;
    std::string time;  // RFC 3339, UTC, milliseconds: "2026-12-07T02:31:00.123Z"
    std::string sandbox_id;
    std::string template_name;
    nlohmann::json metadata = nlohmann::json::object();
    nlohmann::json data = nlohmann::json::object();

    // What clients see as the id: "<node>:<id>", or "<id>" without a node.
    std::string public_id() const;
    // {id, type, time, sandbox_id, template, metadata, data}, id as public_id().
    nlohmann::json to_json() const;
    // Throws nlohmann::json::exception (or std::invalid_argument for an id) on a line that is
    // not an event. An id may be a string
    // as to_json writes it, or a number (logs written before ids named their node): no node.
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
