#include "server/events/event.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <ctime>
#include <stdexcept>

namespace deskbox::server::events {

using nlohmann::json;

std::optional<EventId> parse_event_id(std::string_view text) {
    EventId parsed;
    if (const auto colon = text.rfind(':'); colon != std::string_view::npos) {
        parsed.node = std::string(text.substr(0, colon));
        text.remove_prefix(colon + 1);
        // A node name as --node-name takes it (cluster::valid_node_name).
        const bool usable = !parsed.node.empty() && parsed.node.size() <= 63 &&
                            std::isalnum(static_cast<unsigned char>(parsed.node[0])) &&
                            std::all_of(parsed.node.begin(), parsed.node.end(), [](char c) {
                                return std::isalnum(static_cast<unsigned char>(c)) || c == '.' ||
                                       c == '_' || c == '-';
                            });
        if (!usable) return std::nullopt;
    }
    if (text.empty() || text.size() > 20) return std::nullopt;
    std::uint64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
    parsed.sequence = value;
    return parsed;
}

std::string Event::public_id() const {
    return node.empty() ? std::to_string(id) : node + ":" + std::to_string(id);
}

json Event::to_json() const {
    return {{"id", public_id()},
            {"type", type},
            {"time", time},
            {"sandbox_id", sandbox_id},
            {"template", template_name},
            {"metadata", metadata},
            {"data", data}};
}

Event Event::from_json(const json& j) {
    Event e;
    const json& id = j.at("id");
    if (id.is_number_unsigned()) {
        e.id = id.get<std::uint64_t>();
    } else {
        const auto parsed = parse_event_id(id.get<std::string>());
        if (!parsed) throw std::invalid_argument("not an event id: " + id.dump());
        e.id = parsed->sequence;
        e.node = parsed->node;
    }
    e.type = j.at("type").get<std::string>();
    e.time = j.at("time").get<std::string>();
    e.sandbox_id = j.at("sandbox_id").get<std::string>();
    e.template_name = j.at("template").get<std::string>();
    e.metadata = j.at("metadata");
    e.data = j.at("data");
    return e;
}

std::vector<LifecycleEvent> lifecycle_events_of(const std::string& kind, const json& detail) {
    const auto text = [&](const char* key) {
        return detail.is_object() && detail.contains(key) && detail[key].is_string()
                   ? detail[key].get<std::string>()
                   : std::string();
    };
    // A create's request is not repeated: its env may hold the caller's secrets.
    if (kind == "create") return {{"created"}};
    if (kind == "ready") {
        if (detail.value("condition", json()) == false) return {{"ready", {{"waited", false}}}};
        if (detail.value("ready", false))
            return {{"ready", {{"waited_ms", detail.value("waited_ms", 0)}}}};
        return {{"error", {{"reason", "not ready: " + text("unmet")}, {"code", "not_ready"}}}};
    }
    if (kind == "pause") return {{"paused", {{"reason", "request"}}}};
    if (kind == "timeout" && detail.is_object() && detail.contains("action")) {
        // Without "action" it is a client setting the timeout, not the timeout firing.
        const std::string action = text("action");
        if (action == "kill") return {{"timeout", {{"action", action}}}};
        return {{"timeout", {{"action", action}}},
                {"paused", {{"reason", "timeout"}, {"snapshot", action == "snapshot"}}}};
    }
    if (kind == "resume") return {{"resumed", {{"reason", "request"}}}};
    if (kind == "auto_resume") return {{"resumed", {{"reason", "auto_resume"}}}};
    if (kind == "kill") return {{"killed"}};
    if (kind == "error") return {{"error", {{"reason", text("reason")}}}};
    if (kind == "snapshot_saved")
        return {{"snapshot_created",
                 {{"name", text("name")},
                  {"kind", text("kind")},
                  {"bytes", detail.value("bytes", json(0))}}}};
    return {};
}

std::set<std::string> parse_event_types(std::string_view comma_separated) {
    std::set<std::string> types;
    std::size_t start = 0;
    while (start <= comma_separated.size() && !comma_separated.empty()) {
        const auto comma = comma_separated.find(',', start);
        const std::string one(comma_separated.substr(start, comma - start));
        if (std::find(event_types().begin(), event_types().end(), one) == event_types().end())
            throw std::invalid_argument("unknown event type '" + one +
                                        "'; known: created, ready, paused, resumed, timeout, "
                                        "killed, error, snapshot_created");
        types.insert(one);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    return types;
}

std::string event_time_now() {
    return event_time(std::chrono::system_clock::now());
}

std::string event_time(std::chrono::system_clock::time_point at) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch());
    const std::time_t secs = static_cast<std::time_t>(ms.count() / 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[40];
    const std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(ms.count() % 1000));
    return buf;
}

}  // namespace deskbox::server::events
