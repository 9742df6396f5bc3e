#include "server/cluster/cluster_records.hpp"

#include <cctype>

namespace deskbox::cluster {

using nlohmann::json;

json TemplateOffer::to_json() const {
    json j = {{"runtimes", runtimes},
              {"template_snapshot", template_snapshot},
              {"pool_ready", pool_ready}};
    if (!image_id.empty()) j["image_id"] = image_id;
    if (!fast_start_runtime.empty()) j["fast_start_runtime"] = fast_start_runtime;
    return j;
}

json NodeRecord::to_json() const {
    json offers = json::object();
    for (const auto& [name, offer] : templates) offers[name] = offer.to_json();
    return {{"name", name},
            {"advertise", advertise},
            {"version", version},
            {"capacity", {{"sandboxes", capacity_sandboxes}}},
            {"memory_available_mb", memory_available_mb},
            {"cpus", cpus},
            {"cpus_idle", cpus_idle},
            {"runtimes", runtimes},
            {"templates", offers},
            {"snapshots", snapshots},
            {"started_at_ms", started_at_ms},
            {"heartbeat_at_ms", heartbeat_at_ms}};
}

NodeRecord NodeRecord::from_json(const json& j) {
    NodeRecord n;
    n.name = j.at("name");
    n.advertise = j.at("advertise");
    n.version = j.value("version", "");
    n.capacity_sandboxes = j.at("capacity").at("sandboxes");
    n.memory_available_mb = j.value("memory_available_mb", std::uint64_t{0});
    n.cpus = j.value("cpus", 0u);
    n.cpus_idle = j.value("cpus_idle", 0.0);
    n.runtimes = j.value("runtimes", std::vector<std::string>{});
    const json offers = j.value("templates", json::object());
    for (const auto& [name, offer] : offers.items()) {
        TemplateOffer t;
        t.runtimes = offer.value("runtimes", std::vector<std::string>{});
        t.template_snapshot = offer.value("template_snapshot", false);
        t.pool_ready = offer.value("pool_ready", std::size_t{0});
        t.image_id = offer.value("image_id", "");
        t.fast_start_runtime = offer.value("fast_start_runtime", "");
        n.templates[name] = std::move(t);
    }
    n.snapshots = j.value("snapshots", std::vector<std::string>{});
    n.started_at_ms = j.value("started_at_ms", std::int64_t{0});
    n.heartbeat_at_ms = j.value("heartbeat_at_ms", std::int64_t{0});
    return n;
}

json Allocation::to_json() const {
    return {{"sandboxes", sandboxes}};
}

Allocation Allocation::from_json(const json& j) {
    Allocation a;
    a.sandboxes = j.value("sandboxes", std::size_t{0});
    return a;
}

json SandboxRecord::to_json() const {
    return {{"id", id},           {"node", node},
            {"runtime", runtime}, {"template", template_name},
            {"state", state},     {"summary", summary}};
}

SandboxRecord SandboxRecord::from_json(const json& j) {
    SandboxRecord r;
    r.id = j.at("id");
    r.node = j.at("node");
    r.runtime = j.value("runtime", "");
    r.template_name = j.value("template", "");
    r.state = j.value("state", "");
    r.summary = j.value("summary", json::object());
    return r;
}

bool valid_node_name(const std::string& name) {
    if (name.empty() || name.size() > 63 || !std::isalnum(static_cast<unsigned char>(name[0])))
        return false;
    for (char c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-')
            return false;
    return true;
}

}  // namespace deskbox::cluster
