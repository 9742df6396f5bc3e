// /mcp: the MCP server (server/mcp/) behind its own credentials: the API key opens every
// sandbox's tools, ?sandbox=ID with that sandbox's control token opens that sandbox's only.
#pragma once

#include "server/api/route_context.hpp"
#include "server/mcp/mcp_server.hpp"

namespace deskbox::server::routes {

HttpResponse mcp(RouteContext& context);  // POST|GET|DELETE /mcp

// Who may use /mcp; throws ApiError 401 (400 for an unknown query parameter).
McpAccess mcp_access(const RouteContext& context);

}  // namespace deskbox::server::routes
