#include "server/api/routes/mcp.hpp"

#include "server/api/auth.hpp"
#include "server/api/http_util.hpp"

namespace deskbox::server::routes {

McpAccess mcp_access(const RouteContext& context) {
    allow_only(context.query, {"sandbox", "token"});
    McpAccess access;
    if (auto it = context.query.find("sandbox"); it != context.query.end())
        access.initial = it->second;
    if (api_key_valid(context) &&
        (!context.api.options.api_keys.empty() || !context.query.count("token"))) {
        access.full = true;
        return access;
    }
    if (!access.initial.empty()) {
        // An unknown id is refused like a wrong token: no answer tells which ids exist.
        std::shared_ptr<Sandbox> sandbox;
        try {
            sandbox = context.api.manager.find(access.initial);
        } catch (const SandboxError&) {
        }
        if (sandbox && sandbox_access(context, *sandbox) == Access::control) {
            access.sandbox = access.initial;
            return access;
        }
    }
    throw ApiError(401, "unauthorized",
                   "missing or wrong API key (Authorization: Bearer KEY), or ?sandbox=ID with that "
                   "sandbox's control token");
}

HttpResponse mcp(RouteContext& context) {
    return context.api.mcp.handle(context.request(), mcp_access(context), &context.exchange);
}

}  // namespace deskbox::server::routes
