#include "server/api/routes/snapshots.hpp"

#include "server/api/http_util.hpp"
#include "server/cluster/cluster_service.hpp"
#include "server/sandbox/sandbox_manager.hpp"
#include "server/sandbox/store_errors.hpp"

namespace deskbox::server::routes {

using nlohmann::json;

namespace {

json described(const snapshots::SnapshotInfo& info, const ClusterService* cluster) {
    json j = info.to_json();
    if (cluster) j["node"] = cluster->node_name();
    return j;
}

// Runs `here` on this node's store; a snapshot it does not hold is asked of the other nodes
// by `method`, the holder answering (200, or its 409 for one in use).
template <typename Here>
HttpResponse here_or_holder(RouteContext& context, http::verb method, Here here) {
    try {
        return as_sandbox_error(here);
    } catch (const SandboxError& e) {
        auto* cluster = context.api.options.cluster;
        if (e.fault() != SandboxFault::not_found || !cluster) throw;
        if (auto answer = cluster->answer_from_peers(context.request(),
                                                     "/v1/snapshots/" + context.params.at("name"),
                                                     method, {200, 409}))
            return std::move(*answer);
        throw;
    }
}

}  // namespace

// In a cluster a name is unique across the nodes: under the name's cluster lock the others are
// asked before the save; see ARCHITECTURE, "Named snapshots and forks".
HttpResponse create_snapshot(RouteContext& context) {
    allow_only(context.query, {});
    const auto request = parse_snapshot_request(parse_body(context.request()));
    const auto* cluster = context.api.options.cluster;
    if (!cluster) {
        auto info = context.api.manager.snapshot_sandbox(context.sandbox->id(), request);
        return json_response(201, info.to_json());
    }
    auto check = cluster->check_snapshot_name(context.request(), request.name);
    if (check.refusal) return std::move(*check.refusal);
    auto info = context.api.manager.snapshot_sandbox(context.sandbox->id(), request);
    json answer = described(info, cluster);
    if (!check.unasked.empty()) {
        json warnings = json::array();
        for (const auto& node : check.unasked)
            warnings.push_back("node " + node + " is lost and could not be asked whether it " +
                               "holds a snapshot named " + request.name +
                               "; if it does when it returns, a create from the name is 409 " +
                               "snapshot_ambiguous until one is deleted");
        answer["warnings"] = warnings;
    }
    return json_response(201, answer);
}

// In a cluster each node keeps the snapshots it made: the list covers every node (each entry
// names its node; `missing_nodes` those that could not say), and one snapshot is inspected or
// deleted through any node, on the node that holds it.
HttpResponse list_snapshots(RouteContext& context) {
    allow_only(context.query, {});
    const auto* cluster = context.api.options.cluster;
    json list = json::array();
    for (const auto& info : context.api.manager.snapshots().list())
        list.push_back(described(info, cluster));
    json answer = json::object();
    if (cluster && !cluster->from_peer(context.request())) {
        json missing = json::array();
        for (const auto& peer : cluster->ask_peers(context.request(), "/v1/snapshots")) {
            const json theirs = json::parse(peer.body, nullptr, false);
            if (peer.error.empty() && theirs.is_object() && theirs.contains("snapshots") &&
                theirs["snapshots"].is_array()) {
                for (const auto& s : theirs["snapshots"]) list.push_back(s);
                continue;
            }
            missing.push_back(
                {{"node", peer.node},
                 {"error", peer.error.empty() ? "its answer is not a snapshot list" : peer.error}});
        }
        answer["missing_nodes"] = missing;
    }
    answer["snapshots"] = std::move(list);
    return json_response(200, answer);
}

HttpResponse get_snapshot(RouteContext& context) {
    allow_only(context.query, {});
    return here_or_holder(context, http::verb::get, [&] {
        return json_response(
            200, described(context.api.manager.snapshots().inspect(context.params.at("name")),
                           context.api.options.cluster));
    });
}

HttpResponse delete_snapshot(RouteContext& context) {
    allow_only(context.query, {});
    return here_or_holder(context, http::verb::delete_, [&] {
        context.api.manager.snapshots().remove(context.params.at("name"));
        json done = {{"deleted", context.params.at("name")}};
        if (const auto* cluster = context.api.options.cluster) done["node"] = cluster->node_name();
        return json_response(200, done);
    });
}

// In a cluster the request reached the source's node (routed as every sandbox route is): the
// copies start here, from the save of the source made here, each on a slot of this node
// promised in etcd first, as a placed create's is; the answer names their node.
HttpResponse fork_sandbox(RouteContext& context) {
    allow_only(context.query, {});
    const auto request = parse_fork_request(parse_body(context.request(), true),
                                            context.api.manager.options().max_timeout);
    auto* cluster = context.api.options.cluster;
    if (!cluster)
        return json_response(
            201,
            context.api.manager.fork(context.sandbox->id(), request).to_json(/*with_tokens=*/true));
    const auto& source = context.sandbox->config();
    auto reserved = cluster->reserve_here(source.runtime_name, source.template_name, request.count);
    auto forked = context.api.manager.fork(context.sandbox->id(), request, reserved->ids());
    reserved->keep(forked.sandboxes);
    json answer = forked.to_json(/*with_tokens=*/true);
    for (auto& copy : answer["sandboxes"]) cluster->annotate(copy);
    return json_response(201, answer);
}

}  // namespace deskbox::server::routes
