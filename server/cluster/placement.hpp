// Where a new sandbox goes: pure, so every rule is unit-tested without etcd.
//
// A node can take it when it is alive (its lease record exists), not drained, runs the runtime,
// has the template built for that runtime, has a free slot (allocation below capacity) and has
// at least `min_memory_available_mb` of memory free on the host. Among those the most free
// wins, by the fraction of slots still free; a microVM create prefers a node where it starts
// fast: a ready pooled VM counts as much as half the slots free, a template snapshot a fifth.
// Ties go to the node with fewer sandboxes, then to the name (stable across calls).
//
// A template users built lives on the nodes that built or pulled it. When the request says it
// can be pulled (some live node holds it, for this runtime), a node without it can take the
// create too: it pulls the image first (seconds for hundreds of MB), so it ranks half the slots
// below a node where the template is ready.
//
// A create from a named snapshot goes to a node that holds the snapshot (snapshots stay on the
// node that made them), whatever its templates.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "server/cluster/cluster_records.hpp"

namespace deskbox::cluster {

struct PlacementRequest {
    std::string runtime;
    std::string template_name;
    bool pullable = false;      // nodes without the template may take it and pull it first
    // A start from this named snapshot: only nodes holding it qualify.
    std::string snapshot = {};
};

struct PlacementInput {
    std::vector<NodeRecord> nodes;                  // alive nodes
    std::set<std::string> drained;                  // names
    std::map<std::string, Allocation> allocations;  // by node name (missing: nothing yet)
    std::uint64_t min_memory_available_mb = 256;
};

struct PlacementResult {
    std::vector<std::string> candidates;  // best first; empty: nowhere
    // When empty: why, naming what every node lacked ("no node has template 'x' built for
    // microvm"; "every node is full (3 nodes, 60 sandboxes)").
    std::string reason;
    bool capacity_exhausted = false;  // the only obstacle is that nodes are full (503, not 409)
};

PlacementResult place(const PlacementRequest& request, const PlacementInput& input);

}  // namespace deskbox::cluster
