#include "server/cluster/placement.hpp"

#include <algorithm>

namespace deskbox::cluster {

namespace {

bool contains(const std::vector<std::string>& list, const std::string& item) {
    return std::find(list.begin(), list.end(), item) != list.end();
}

struct Scored {
    const NodeRecord* node;
    double score;
    std::size_t sandboxes;
};

// What stopped the nodes that cannot take the sandbox, counted per obstacle.
struct Obstacles {
    std::size_t drained = 0, no_runtime = 0, no_template = 0, no_snapshot = 0, full = 0,
                low_memory = 0;
    std::size_t total_sandboxes = 0;  // on every node, for the "all full" reason
};

// Why no node was found, naming the obstacle that stopped the most nodes; sets
// capacity_exhausted when it was room (a 429, not a 4xx about the request).
void explain_refusal(const PlacementRequest& request, std::size_t nodes, const Obstacles& o,
                     PlacementResult& result) {
    if (nodes == 0) {
        result.reason = "no node of the cluster is up";
    } else if (o.full + o.low_memory == nodes - o.drained && o.drained < nodes &&
               o.no_runtime + o.no_template + o.no_snapshot == 0) {
        result.capacity_exhausted = true;
        result.reason =
            "every node that can run it is full (" + std::to_string(nodes) + " nodes, " +
            std::to_string(o.total_sandboxes) + " sandboxes" +
            (o.low_memory ? ", " + std::to_string(o.low_memory) + " low on memory" : "") +
            (o.drained ? ", " + std::to_string(o.drained) + " drained" : "") + ")";
    } else if (o.drained == nodes) {
        result.reason = "every node is drained";
    } else if (o.no_snapshot + o.drained == nodes) {
        result.reason = "no live node holds snapshot '" + request.snapshot + "'";
    } else if (o.no_runtime + o.drained == nodes) {
        result.reason = "no node runs the " + request.runtime + " runtime";
    } else if (o.no_runtime + o.no_template + o.drained == nodes) {
        result.reason =
            "no node has template '" + request.template_name + "' built for " + request.runtime;
    } else {
        result.capacity_exhausted = o.full + o.low_memory > 0;
        result.reason = "no node can take it (" + std::to_string(o.full) + " full, " +
                        std::to_string(o.low_memory) + " low on memory, " +
                        std::to_string(o.drained) + " drained, " + std::to_string(o.no_template) +
                        " without the template built, " + std::to_string(o.no_runtime) +
                        " without the runtime)";
    }
}

}  // namespace

PlacementResult place(const PlacementRequest& request, const PlacementInput& input) {
    PlacementResult result;
    std::vector<Scored> scored;
    Obstacles o;
    for (const auto& node : input.nodes) {
        auto found = input.allocations.find(node.name);
        const std::size_t used = found == input.allocations.end() ? 0 : found->second.sandboxes;
        o.total_sandboxes += used;
        if (input.drained.count(node.name)) {
            ++o.drained;
            continue;
        }
        // A start from a snapshot goes where the snapshot is: it holds the template's part.
        const bool from_snapshot = !request.snapshot.empty();
        if (from_snapshot && !contains(node.snapshots, request.snapshot)) {
            ++o.no_snapshot;
            continue;
        }
        if (!from_snapshot && !contains(node.runtimes, request.runtime)) {
            ++o.no_runtime;
            continue;
        }
        auto offer = node.templates.find(request.template_name);
        const bool ready = from_snapshot || (offer != node.templates.end() &&
                                             contains(offer->second.runtimes, request.runtime));
        if (!ready && !request.pullable) {
            ++o.no_template;
            continue;
        }
        if (used >= node.capacity_sandboxes) {
            ++o.full;
            continue;
        }
        if (node.memory_available_mb < input.min_memory_available_mb) {
            ++o.low_memory;
            continue;
        }
        double score =
            1.0 - static_cast<double>(used) / static_cast<double>(node.capacity_sandboxes);
        if (!ready) {
            score -= 0.5;  // the image comes over the network first
        } else if (!from_snapshot && request.runtime == offer->second.fast_start_runtime) {
            if (offer->second.pool_ready > 0)
                score += 0.5;
            else if (offer->second.template_snapshot)
                score += 0.2;
        }
        scored.push_back({&node, score, used});
    }
    std::sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) {
        if (a.score != b.score) return a.score > b.score;
        if (a.sandboxes != b.sandboxes) return a.sandboxes < b.sandboxes;
        return a.node->name < b.node->name;
    });
    for (const auto& s : scored) result.candidates.push_back(s.node->name);
    if (!result.candidates.empty()) return result;

    explain_refusal(request, input.nodes.size(), o, result);
    return result;
}

}  // namespace deskbox::cluster
