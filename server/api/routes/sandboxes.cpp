#include "server/api/routes/sandboxes.hpp"

#include "server/api/http_util.hpp"
#include "server/api/routes/ports.hpp"
#include "server/cluster/cluster_service.hpp"
#include "server/sandbox/sandbox_manager.hpp"
#include "server/usage/usage_sampler.hpp"

namespace deskbox::server::routes {

using nlohmann::json;

HttpResponse create_sandbox(RouteContext& context) {
    allow_only(context.query, {});
    ScopedTimer timer(context.api.metrics.create_seconds);
    const json body = parse_body(context.request(), true);
    if (auto* cluster = context.api.options.cluster) return cluster->create(context.exchange, body);
    auto sandbox = context.api.manager.create(body);
    return json_response(201, sandbox->describe(true));
}

namespace {

// What the usage sampler has of sandbox `id`, into its `usage`: the running totals and, from the
// last sample, its CPU % and resident memory (what the dashboard shows live).
void add_sampled_usage(const usage::UsageService* service, const std::string& id, json& described) {
    if (!service) return;
    const auto sample = service->latest(id);
    if (!sample) return;
    json& usage = described["usage"];
    usage.update(usage::to_json(sample->totals));
    usage["cpu_percent"] = sample->cpu_percent;
    usage["memory_resident_bytes"] = sample->memory_resident_bytes;
    usage["sampled_at_ms"] = sample->at;
}

}  // namespace

HttpResponse list_sandboxes(RouteContext& context) {
    if (auto* cluster = context.api.options.cluster)
        return json_response(200, {{"sandboxes", cluster->list()}});
    json list = json::array();
    for (auto& sandbox : context.api.manager.list()) {
        list.push_back(sandbox->describe(false));
        add_sampled_usage(context.api.options.usage, sandbox->id(), list.back());
    }
    return json_response(200, {{"sandboxes", list}});
}

HttpResponse inspect_sandbox(RouteContext& context) {
    auto described = context.sandbox->describe(true);
    described["ports"] = listening_ports(*context.sandbox, context.api.options.ports_domain);
    add_sampled_usage(context.api.options.usage, context.sandbox->id(), described);
    if (auto* cluster = context.api.options.cluster) cluster->annotate(described);
    return json_response(200, described);
}

HttpResponse kill_sandbox(RouteContext& context) {
    const std::string id = context.sandbox->id();
    context.sandbox.reset();  // the manager's kill ends it; this request holds it no longer
    json killed = context.api.manager.kill(id);
    if (auto* cluster = context.api.options.cluster) cluster->removed_here(id);
    return json_response(200, killed);
}

}  // namespace deskbox::server::routes
