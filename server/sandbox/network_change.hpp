// PATCH /v1/sandboxes/{id}/network read into a typed change, and applied to the policy in force:
// each part present (allow, deny, rules, proxy, egress_kbps) replaces that part, the others stay.
#pragma once

#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

#include "server/network/network_policy.hpp"

namespace deskbox::server {

struct NetworkChange {
    // Each as NetworkPolicy::parse reads it; a null `allow` removes the allow list (the
    // internet minus `deny`).
    std::optional<nlohmann::json> allow, deny, rules, proxy;
    std::optional<std::uint64_t> egress_kbps;  // 0: no limit
};

// Throws SandboxError (invalid) naming the field: not an object, an unknown field, a wrong type
// or range, or nothing to change.
NetworkChange read_network_change(const nlohmann::json& body);

// The policy `change` makes of `current`. Throws SandboxError (invalid) naming the field
// (allow[2], rules[0].headers) as the request wrote it.
network::NetworkPolicy apply_network_change(const NetworkChange& change,
                                            const network::NetworkPolicy& current);

}  // namespace deskbox::server
