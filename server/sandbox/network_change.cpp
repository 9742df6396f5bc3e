#include "server/sandbox/network_change.hpp"

#include "server/sandbox/request_reader.hpp"
#include "server/sandbox/sandbox_error.hpp"

namespace deskbox::server {

using nlohmann::json;

NetworkChange read_network_change(const json& body) {
    RequestReader reader(body);
    NetworkChange change;
    auto part = [&](const char* name) -> std::optional<json> {
        if (const json* value = reader.raw(name)) return *value;
        if (body.contains(name)) return json(nullptr);  // null: that part goes
        return std::nullopt;
    };
    change.allow = part("allow");
    change.deny = part("deny");
    change.rules = part("rules");
    change.proxy = part("proxy");
    if (auto kbps = reader.integer("egress_kbps", 0, 100'000'000))
        change.egress_kbps = static_cast<std::uint64_t>(*kbps);
    reader.finish();
    if (!change.allow && !change.deny && !change.rules && !change.proxy && !change.egress_kbps)
        throw invalid_field("", "nothing to change: give allow, deny, rules, proxy or egress_kbps");
    return change;
}

network::NetworkPolicy apply_network_change(const NetworkChange& change,
                                            const network::NetworkPolicy& current) {
    json merged = current.to_json();
    if (!merged.is_object()) merged = json::object();  // a policy without a network: false
    auto set = [&](const char* name, const std::optional<json>& value) {
        if (!value) return;
        if (value->is_null())
            merged.erase(name);
        else
            merged[name] = *value;
    };
    set("allow", change.allow);
    set("deny", change.deny);
    set("rules", change.rules);
    set("proxy", change.proxy);
    try {
        return network::NetworkPolicy::parse(merged, "");  // fields as the request wrote them
    } catch (const network::PolicyError& e) {
        throw invalid_field(e.field(), std::string(e.what()).substr(e.field().size() + 2));
    }
}

}  // namespace deskbox::server
