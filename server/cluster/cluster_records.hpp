// What a deskbox cluster keeps in etcd, and the keys it keeps it under (all below one prefix,
// "/deskbox/" by default):
//
//   nodes/<name>       NodeRecord, on the node's lease: gone when the node stops renewing it
//   drain/<name>       present while the node is drained (no lease: outlives restarts)
//   alloc/<name>       Allocation: what has been promised on the node (changed only in
//                      transactions that check it was not changed since it was read)
//   sandboxes/<id>     SandboxRecord: which node owns the sandbox, and what list shows of it
//
// A sandbox's record and its node's allocation change together in one transaction, so the sum
// of records on a node is always its allocation, and concurrent creates on any nodes can never
// promise more than a node's capacity.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deskbox::cluster {

// What a template offers on one node.
struct TemplateOffer {
    std::vector<std::string> runtimes;  // runtimes the template is built for here
    bool template_snapshot = false;     // a template snapshot exists (a fast start)
    std::size_t pool_ready = 0;         // sandboxes of it restored and waiting
    // A template users built ("name:tag"): the store image it points at here, ready to start
    // from and to be pulled by other nodes (GET /v1/cluster/templates/{image_id}). Empty for a
    // shipped template.
    std::string image_id;
    std::string fast_start_runtime;  // the runtime template_snapshot and pool_ready are about
    nlohmann::json to_json() const;
};

struct NodeRecord {
    std::string name;
    std::string advertise;  // base URL other nodes reach its API at
    std::string version;
    std::size_t capacity_sandboxes = 0;
    std::uint64_t memory_available_mb = 0;  // the host's MemAvailable at the last heartbeat
    unsigned cpus = 0;                      // online CPUs
    double cpus_idle = 0;  // cpus minus the 1-minute load average (0 when loaded), in halves
    std::vector<std::string> runtimes;
    std::map<std::string, TemplateOffer> templates;
    std::vector<std::string> snapshots;  // names of the named snapshots kept here
    std::int64_t started_at_ms = 0;
    std::int64_t heartbeat_at_ms = 0;

    nlohmann::json to_json() const;
    static NodeRecord from_json(const nlohmann::json& j);  // throws nlohmann::json::exception
};

struct Allocation {
    std::size_t sandboxes = 0;
    nlohmann::json to_json() const;
    static Allocation from_json(const nlohmann::json& j);
};

struct SandboxRecord {
    std::string id;
    std::string node;
    std::string runtime;
    std::string template_name;
    std::string state;       // the owner's status ("creating" until it runs)
    nlohmann::json summary;  // what GET /v1/sandboxes shows of it (the owner's describe)
    nlohmann::json to_json() const;
    static SandboxRecord from_json(const nlohmann::json& j);
};

struct ClusterKeys {
    std::string prefix = "/deskbox/";
    std::string nodes() const { return prefix + "nodes/"; }
    std::string node(const std::string& name) const { return nodes() + name; }
    std::string drains() const { return prefix + "drain/"; }
    std::string drain(const std::string& name) const { return drains() + name; }
    std::string allocations() const { return prefix + "alloc/"; }
    std::string allocation(const std::string& name) const { return allocations() + name; }
    std::string sandboxes() const { return prefix + "sandboxes/"; }
    std::string sandbox(const std::string& id) const { return sandboxes() + id; }
    std::string locks() const { return prefix + "locks/"; }
    std::string lock(const std::string& name) const { return locks() + name; }
};

// [A-Za-z0-9][A-Za-z0-9_.-]{0,62}: a node name is a key segment and a DNS-ish label.
bool valid_node_name(const std::string& name);

}  // namespace deskbox::cluster
