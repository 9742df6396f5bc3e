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

}  // namespace

PlacementResult place(const PlacementRequest& request, const PlacementInput& input) {
    PlacementResult result;
    std::vector<Scored> scored;
    // Counted per obstacle, for a reason that names the one that stopped the most nodes.
    std::size_t drained = 0, no_runtime = 0, no_template = 0, no_snapshot = 0, full = 0,
                low_memory = 0;
    std::size_t total_sandboxes = 0;
    for (const auto& node : input.nodes) {
        auto found = input.allocations.find(node.name);
        const std::size_t used = found == input.allocations.end() ? 0 : found->second.sandboxes;
        total_sandboxes += used;
        if (input.drained.count(node.name)) {
            ++drained;
            continue;
        }
        // A start from a snapshot goes where the snapshot is: it holds the template's part.
        const bool from_snapshot = !request.snapshot.empty();
        if (from_snapshot && !contains(node.snapshots, request.snapshot)) {
            ++no_snapshot;
            continue;
        }
        if (!from_snapshot && !contains(node.runtimes, request.runtime)) {
            ++no_runtime;
            continue;
        }
        auto offer = node.templates.find(request.template_name);
        const bool ready = from_snapshot || (offer != node.templates.end() &&
                                             contains(offer->second.runtimes, request.runtime));
        if (!ready && !request.pullable) {
            ++no_template;
            continue;
        }
        if (used >= node.capacity_sandboxes) {
            ++full;
            continue;
        }
        if (node.memory_available_mb < input.min_memory_available_mb) {
            ++low_memory;
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

    const std::size_t nodes = input.nodes.size();
    if (nodes == 0) {
        result.reason = "no node of the cluster is up";
    } else if (full + low_memory == nodes - drained && drained < nodes &&
               no_runtime + no_template + no_snapshot == 0) {
        result.capacity_exhausted = true;
        result.reason = "every node that can run it is full (" + std::to_string(nodes) +
                        " nodes, " + std::to_string(total_sandboxes) + " sandboxes" +
                        (low_memory ? ", " + std::to_string(low_memory) + " low on memory" : "") +
                        (drained ? ", " + std::to_string(drained) + " drained" : "") + ")";
    } else if (drained == nodes) {
        result.reason = "every node is drained";
    } else if (no_snapshot + drained == nodes) {
        result.reason = "no live node holds snapshot '" + request.snapshot + "'";
    } else if (no_runtime + drained == nodes) {
        result.reason = "no node runs the " + request.runtime + " runtime";
    } else if (no_runtime + no_template + drained == nodes) {
        result.reason =
            "no node has template '" + request.template_name + "' built for " + request.runtime;
    } else {
        result.capacity_exhausted = full + low_memory > 0;
        result.reason = "no node can take it (" + std::to_string(full) + " full, " +
                        std::to_string(low_memory) + " low on memory, " + std::to_string(drained) +
                        " drained, " + std::to_string(no_template) +
                        " without the template built, " + std::to_string(no_runtime) +
                        " without the runtime)";
    }
    return result;
}

}  // namespace deskbox::cluster
