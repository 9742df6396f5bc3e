#include "server/api/routes/snapshots.hpp"

#include "server/api/http_util.hpp"
#include "server/sandbox/sandbox_manager.hpp"
#include "server/sandbox/store_errors.hpp"

namespace deskbox::server::routes {

using nlohmann::json;

namespace {

// A fork's copies live on this node only: a cluster could not route to them.
void refuse_in_cluster(RouteContext& context, const char* what) {
    if (context.api.options.cluster)
        throw ApiError(400, "unsupported",
                       std::string(what) + " is not available in a cluster yet; use a single node");
}

}  // namespace

HttpResponse create_snapshot(RouteContext& context) {
    allow_only(context.query, {});
    const auto request = parse_snapshot_request(parse_body(context.request()));
    auto info = context.api.manager.snapshot_sandbox(context.sandbox->id(), request);
    return json_response(201, info.to_json());
}

HttpResponse list_snapshots(RouteContext& context) {
    allow_only(context.query, {});
    json list = json::array();
    for (const auto& info : context.api.manager.snapshots().list()) list.push_back(info.to_json());
    return json_response(200, {{"snapshots", list}});
}

HttpResponse get_snapshot(RouteContext& context) {
    allow_only(context.query, {});
    return as_sandbox_error([&] {
        return json_response(
            200, context.api.manager.snapshots().inspect(context.params.at("name")).to_json());
    });
}

HttpResponse delete_snapshot(RouteContext& context) {
    allow_only(context.query, {});
    return as_sandbox_error([&] {
        context.api.manager.snapshots().remove(context.params.at("name"));
        return json_response(200, {{"deleted", context.params.at("name")}});
    });
}

HttpResponse fork_sandbox(RouteContext& context) {
    allow_only(context.query, {});
    refuse_in_cluster(context, "fork");
    const auto request = parse_fork_request(parse_body(context.request(), true),
                                            context.api.manager.options().max_timeout);
    return json_response(
        201,
        context.api.manager.fork(context.sandbox->id(), request).to_json(/*with_tokens=*/true));
}

}  // namespace deskbox::server::routes
