#include "server/api/routes/usage.hpp"

#include "server/api/http_util.hpp"
#include "server/client/api_client.hpp"
#include "server/cluster/cluster_service.hpp"
#include "server/usage/usage_query.hpp"
#include "server/usage/usage_sampler.hpp"

namespace deskbox::server::routes {

namespace {

usage::UsageService& usage_service(RouteContext& context) {
    if (!context.api.options.usage)
        throw ApiError(404, "not_found", "usage is not recorded on this server");
    return *context.api.options.usage;
}

// In a cluster, the node that ran sandbox `id` keeps its samples (its record may be gone with
// it): the other nodes are asked, and the one that has them answers (its samples, or its 400
// for a bad from, to or step).
std::optional<HttpResponse> peers_metrics(RouteContext& context, const std::string& id,
                                          std::vector<std::string>& unreachable) {
    auto* cluster = context.api.options.cluster;
    if (!cluster) return std::nullopt;
    client::Query peer_query;
    for (const auto& [name, value] : context.query) peer_query.add(name, value);
    return cluster->answer_from_peers(context.request(),
                                      "/v1/sandboxes/" + id + "/metrics" + peer_query.str(),
                                      http::verb::get, {200, 400}, &unreachable);
}

}  // namespace

HttpResponse sandbox_metrics(RouteContext& context) {
    auto& service = usage_service(context);
    const std::string& id = context.params.at("id");
    auto history = service.ledger().history(id);
    if (!history) {
        std::vector<std::string> unreachable;
        if (auto answer = peers_metrics(context, id, unreachable)) return std::move(*answer);
        std::string not_asked;
        for (const auto& node : unreachable)
            not_asked += (not_asked.empty() ? "; nodes not reachable: " : ", ") + node;
        throw ApiError(404, "not_found",
                       "no samples of sandbox " + id +
                           " (unknown, not sampled yet, or ended longer ago than the server keeps "
                           "them)" +
                           not_asked,
                       "id");
    }
    const auto query =
        usage::parse_metrics_query(context.query, history->start.at, usage::now_millis());
    return json_response(200, usage::metrics_answer(*history, query));
}

namespace {

// In a cluster, the other nodes' usage over the same period, merged into `groups`: each node
// keeps the ledger of its own sandboxes. Returns the nodes whose usage is missing, and why.
nlohmann::json add_peers_usage(RouteContext& context, std::vector<usage::UsageGroup>& groups) {
    auto* cluster = context.api.options.cluster;
    nlohmann::json missing = nlohmann::json::array();
    if (!cluster || cluster->from_peer(context.request())) return missing;
    client::Query peer_query;
    for (const auto& [name, value] : context.query)
        if (name != "format") peer_query.add(name, value);
    peer_query.add("format", "json");
    for (auto& answer : cluster->ask_peers(context.request(), "/v1/usage" + peer_query.str())) {
        try {
            if (answer.error.empty())
                usage::merge_groups(groups,
                                    usage::groups_from_json(nlohmann::json::parse(answer.body)));
        } catch (const nlohmann::json::exception&) {
            answer.error = "its answer is not a usage report";
        }
        if (!answer.error.empty())
            missing.push_back({{"node", answer.node}, {"error", answer.error}});
    }
    return missing;
}

}  // namespace

HttpResponse usage_report(RouteContext& context) {
    auto& service = usage_service(context);
    const auto query = usage::parse_usage_query(context.query, usage::now_millis());
    auto groups = usage::summarise(service.ledger().overlapping(query.from, query.to), query);
    const nlohmann::json missing = add_peers_usage(context, groups);
    const usage::Prices prices{service.options().price_vcpu_second,
                               service.options().price_gib_second};
    if (!query.csv) {
        auto answer = usage::usage_json(groups, query, prices);
        if (context.api.options.cluster) answer["missing_nodes"] = missing;
        return json_response(200, answer);
    }
    HttpResponse res{http::status::ok, 11};
    res.set(http::field::content_type, "text/csv; charset=utf-8");
    std::string names;
    for (const auto& m : missing)
        names += (names.empty() ? "" : ",") + m["node"].get<std::string>();
    if (!names.empty()) res.set("X-Deskbox-Missing-Nodes", names);
    res.body() = usage::usage_csv(groups, prices);
    return res;
}

}  // namespace deskbox::server::routes
