// What each MCP tool does: one function per tool, on the same Sandbox operations the REST API
// uses. The catalog (names, schemas) is mcp_tools() in mcp_tools.cpp.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "server/mcp/mcp_server.hpp"

namespace deskbox::server::mcp {

struct ToolContext {
    McpSession& session;
    SandboxManager& manager;
    McpCallControl* control = nullptr;  // the call's progress and cancellation (none: neither)
    // The sandbox a tool acts on: arguments.sandbox_id, else the session's; checked against
    // the session's access (403), known to the manager (404).
    std::shared_ptr<Sandbox> target(const nlohmann::json& arguments) const;
    std::shared_ptr<Sandbox> target_id(std::string id) const;  // "": the session's
};

// Runs tool `name`. Throws RpcFailure (unknown tool, arguments not an object), ApiError
// (the tools' own checks) or SandboxError.
nlohmann::json call_tool(ToolContext& context, const std::string& name,
                         const nlohmann::json& arguments);

}  // namespace deskbox::server::mcp
