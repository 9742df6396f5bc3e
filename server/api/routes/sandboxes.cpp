#include "server/api/routes/sandboxes.hpp"

#include "server/api/http_util.hpp"
#include "server/api/routes/ports.hpp"
#include "server/sandbox/sandbox_manager.hpp"

namespace deskbox::server::routes {

using nlohmann::json;

HttpResponse create_sandbox(RouteContext& context) {
    allow_only(context.query, {});
    ScopedTimer timer(context.api.metrics.create_seconds);
    auto sandbox = context.api.manager.create(parse_body(context.request(), true));
    return json_response(201, sandbox->describe(true));
}

HttpResponse list_sandboxes(RouteContext& context) {
    json list = json::array();
    for (auto& sandbox : context.api.manager.list()) list.push_back(sandbox->describe(false));
    return json_response(200, {{"sandboxes", list}});
}

HttpResponse inspect_sandbox(RouteContext& context) {
    auto described = context.sandbox->describe(true);
    described["ports"] = listening_ports(*context.sandbox, context.api.options.ports_domain);
    return json_response(200, described);
}

HttpResponse kill_sandbox(RouteContext& context) {
    const std::string id = context.sandbox->id();
    context.sandbox.reset();  // the manager's kill ends it; this request holds it no longer
    context.api.manager.kill(id);
    return json_response(200, {{"id", id}, {"state", "killed"}});
}

}  // namespace deskbox::server::routes
