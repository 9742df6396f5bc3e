// The sandbox's network: attached at boot, the policy in force, changed live (PATCH .../network).
#include "server/network/sandbox_network.hpp"
#include "server/network/netns.hpp"
#include "server/sandbox/network_change.hpp"
#include "server/sandbox/sandbox.hpp"

namespace deskbox::server {

void Sandbox::attach_network(std::shared_ptr<network::SandboxNetwork> network) {
    if (network)
        network->set_audit(
            [this](const std::string& kind, const nlohmann::json& detail) { audit(kind, detail); });
    // The network's threads may audit until kill() ends it, which happens before we go.
    std::lock_guard lock(mutex_);
    network_ = std::move(network);
}

std::shared_ptr<network::SandboxNetwork> Sandbox::network() const {
    std::lock_guard lock(mutex_);
    return network_;
}

network::NetworkPolicy Sandbox::network_policy() const {
    if (auto net = network()) return net->policy();
    return config_.network;
}

std::uint64_t Sandbox::egress_kbps() const {
    if (auto net = network()) return net->egress_kbps();
    return config_.egress_kbps;
}

nlohmann::json Sandbox::change_network(
    const NetworkChange& change, const std::function<void(const network::NetworkPolicy&)>& check) {
    std::lock_guard serial(network_change_mutex_);
    auto net = network();
    const network::NetworkPolicy current = net ? net->policy() : network::NetworkPolicy::closed();
    if (!current.enabled())
        throw SandboxError(SandboxFault::conflict, "network_disabled",
                           "sandbox " + config_.id +
                               " was created without a network (\"network\": false): it has none "
                               "to change",
                           "network");
    network::NetworkPolicy policy = apply_network_change(change, current);
    if (check) check(policy);
    const std::uint64_t kbps = change.egress_kbps.value_or(net->egress_kbps());
    try {
        net->change(policy, kbps);
    } catch (const network::NetworkError& e) {
        throw SandboxError(SandboxFault::conflict, "network_disabled", e.what(), "network");
    }
    save_record_or_audit();
    nlohmann::json detail = {{"policy", policy.describe()}};  // inline rule values hidden
    if (kbps) detail["egress_kbps"] = kbps;
    audit("network.change", detail);
    return net->describe();
}

}  // namespace deskbox::server
