// Admission's credential stages (7 and 10 of admission.hpp): who may call the route or the
// port, and the one place a sandbox id from a request becomes a Sandbox.
#include "server/api/admission.hpp"

#include "server/api/auth.hpp"
#include "server/api/routes/mcp.hpp"
#include "server/sandbox/sandbox_manager.hpp"

namespace deskbox::server::admission {

namespace {

void require_api_key(RouteContext& context) {
    if (!api_key_valid(context))
        throw ApiError(401, "unauthorized", "missing or wrong API key (Authorization: Bearer KEY)");
    context.access = Access::control;
}

// 404 on a single node, 401 without the secret.
void require_cluster_secret(const Admission& a) {
    if (!a.owners)
        throw ApiError(404, "not_found", "this server is not a node of a cluster (--cluster)");
    if (!a.owners->secret_valid(a.context.request()))
        throw ApiError(401, "unauthorized",
                       "a route between the nodes of a cluster: the cluster secret is required");
}

// For routes a sandbox's own token opens: the sandbox, or, for an id that is not here, the 401
// a wrong token gets unless an API key shows the caller may know (then 404): no answer tells a
// stranger which ids exist.
std::shared_ptr<Sandbox> resolve_for_token(const RouteContext& context, const std::string& id,
                                           const ApiError& unauthorized) {
    try {
        return context.api.manager.find(id);
    } catch (const SandboxError& e) {
        const bool may_know = !context.api.options.api_keys.empty() && api_key_valid(context);
        if (e.fault() == SandboxFault::not_found && !may_know) throw unauthorized;
        throw;
    }
}

// An exposed port: the sandbox's control token or an API key (else 401, also for unknown ids).
void admit_to_port(RouteContext& context, const std::string& id) {
    context.sandbox = resolve_for_token(context, id, routes::port_refusal());
    if (!port_access(context, *context.sandbox)) throw routes::port_refusal();
    context.sandbox->wake();
}

// What the route's RouteAuth asks; sets context.access and, for a per-sandbox route,
// context.sandbox.
void admit_to_route(Admission& a) {
    RouteContext& context = a.context;
    const ApiRoute& route = *a.match.route;
    if (route.auth == RouteAuth::api_key) require_api_key(context);
    if (route.auth == RouteAuth::cluster_secret) require_cluster_secret(a);
    if (route.auth == RouteAuth::sandbox_token) {
        const ApiError refusal(401, "unauthorized",
                               "missing or wrong token: pass the sandbox's view_token or "
                               "control_token as ?token=");
        context.sandbox = resolve_for_token(context, context.params.at("id"), refusal);
        context.access = sandbox_access(context, *context.sandbox);
        if (context.access == Access::none) throw refusal;
    } else if (route.as_sent) {  // an exposed port, path form
        admit_to_port(context, context.params.at("id"));
    } else if (route.per_sandbox()) {
        context.sandbox = context.api.manager.find(context.params.at("id"));  // 404
    } else if (route.path == "/mcp") {
        routes::mcp_access(context);  // 401 before the body is read
    }
    // After the credentials: a stranger's request wakes nothing.
    if (context.sandbox && route.wakes_sandbox()) context.sandbox->wake();
}

void admit_to_port_or_route(Admission& a) {
    if (a.port)
        admit_to_port(a.context, a.port->id);
    else
        admit_to_route(a);
}

}  // namespace

AdmissionAnswer check_credentials_here(Admission& a) {
    if (a.owner_decides()) {
        // The owner checks a sandbox's tokens (only it knows them); an API key is checked here
        // too, so a stranger cannot make this node talk to the others.
        if (!a.port && a.match.route->auth == RouteAuth::api_key) require_api_key(a.context);
        return std::nullopt;
    }
    admit_to_port_or_route(a);
    return std::nullopt;
}

AdmissionAnswer check_credentials_there(Admission& a) {
    // Reached on the owner only: route_to_owner answered for a sandbox another node owns.
    if (a.owner_decides()) admit_to_port_or_route(a);
    return std::nullopt;
}

}  // namespace deskbox::server::admission
