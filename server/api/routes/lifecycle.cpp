#include "server/api/routes/lifecycle.hpp"

#include "server/api/http_util.hpp"
#include "server/sandbox/request_reader.hpp"
#include "server/sandbox/sandbox_manager.hpp"

namespace deskbox::server::routes {

using nlohmann::json;

bool parse_pause_body(const json& body) {
    if (body.is_null()) return false;
    RequestReader reader(body);
    const bool snapshot = reader.boolean("snapshot").value_or(false);
    reader.finish();
    return snapshot;
}

void check_resume_body(const json& body) {
    if (!body.is_null()) RequestReader(body).finish();
}

HttpResponse set_timeout(RouteContext& context) {
    context.api.manager.set_timeout(context.sandbox->id(), parse_body(context.request()));
    return json_response(200, context.sandbox->describe(false));
}

HttpResponse change_network(RouteContext& context) {
    allow_only(context.query, {});
    const NetworkChange change = read_network_change(parse_body(context.request()));
    return json_response(200, context.api.manager.change_network(*context.sandbox, change));
}

HttpResponse pause_sandbox(RouteContext& context) {
    const json body = parse_body(context.request(), true);
    context.sandbox->pause(parse_pause_body(body));
    context.sandbox->audit("pause", body);
    return json_response(200, context.sandbox->describe(false));
}

HttpResponse resume_sandbox(RouteContext& context) {
    const json body = parse_body(context.request(), true);
    check_resume_body(body);
    context.sandbox->resume();
    context.sandbox->audit("resume", body);
    return json_response(200, context.sandbox->describe(false));
}

}  // namespace deskbox::server::routes
