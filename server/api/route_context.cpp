// The one place routes reach a sandbox's parts through (route_context.hpp), so only this file
// and the routes that use the sandbox's lifecycle include all of sandbox.hpp.
#include "server/api/route_context.hpp"

#include "server/http/http_server.hpp"
#include "server/sandbox/sandbox.hpp"

namespace deskbox::server {

HttpRequest& RouteContext::request() const {
    return exchange.request;
}

const SandboxConfig& RouteContext::config() const {
    return sandbox->config();
}
SandboxScreen& RouteContext::screen() const {
    return sandbox->screen();
}
SandboxInput& RouteContext::input() const {
    return sandbox->input();
}
SandboxMedia& RouteContext::media() const {
    return sandbox->media();
}
AgentClient& RouteContext::agent() const {
    return sandbox->agent_client();
}

}  // namespace deskbox::server
