#include "server/api/routes/nodes.hpp"

#include "server/api/http_util.hpp"
#include "server/cluster/cluster_service.hpp"

namespace deskbox::server::routes {

namespace {

HttpResponse set_drained(RouteContext& context, bool drained) {
    allow_only(context.query, {});
    parse_body(context.request(), true);  // nothing to say, but a body must still be JSON
    auto* cluster = context.api.options.cluster;
    if (!cluster)
        throw ApiError(409, "not_clustered",
                       "this server is not part of a cluster (start deskboxd with --cluster)");
    return json_response(200, cluster->set_drained(context.params.at("name"), drained));
}

}  // namespace

HttpResponse list_nodes(RouteContext& context) {
    allow_only(context.query, {});
    if (auto* cluster = context.api.options.cluster) return json_response(200, cluster->nodes());
    return json_response(200, single_node_view(context.api.manager));
}

HttpResponse drain_node(RouteContext& context) {
    return set_drained(context, true);
}

HttpResponse undrain_node(RouteContext& context) {
    return set_drained(context, false);
}

}  // namespace deskbox::server::routes
