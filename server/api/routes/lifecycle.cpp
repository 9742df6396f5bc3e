#include "server/api/routes/lifecycle.hpp"

#include "server/api/http_util.hpp"
#include "server/sandbox/sandbox_manager.hpp"

namespace deskbox::server::routes {

using nlohmann::json;

namespace {
void require_object(const json& body) {
    if (!body.is_object()) throw bad_request("", "request body must be a JSON object");
}
}  // namespace

bool parse_pause_body(const json& body) {
    bool snapshot = false;
    if (body.is_null()) return snapshot;
    require_object(body);
    for (auto& [key, value] : body.items()) {
        if (key != "snapshot") throw bad_request(key, "unknown field");
        if (!value.is_boolean()) throw bad_request("snapshot", "expected true or false");
        snapshot = value;
    }
    return snapshot;
}

void check_resume_body(const json& body) {
    if (body.is_null()) return;
    require_object(body);
    if (!body.empty()) throw bad_request(body.begin().key(), "unknown field");
}

HttpResponse set_timeout(RouteContext& context) {
    context.api.manager.set_timeout(context.sandbox->id(), parse_body(context.request()));
    return json_response(200, context.sandbox->describe(false));
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
