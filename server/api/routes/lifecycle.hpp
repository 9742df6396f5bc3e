// A sandbox's lifetime: its timeout (validated by SandboxManager::set_timeout), pause (optionally
// to a snapshot, microVMs) and resume.
#pragma once

#include <nlohmann/json.hpp>

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse set_timeout(RouteContext& context);     // POST /v1/sandboxes/{id}/timeout
HttpResponse change_network(RouteContext& context);  // PATCH /v1/sandboxes/{id}/network
HttpResponse pause_sandbox(RouteContext& context);   // POST /v1/sandboxes/{id}/pause
HttpResponse resume_sandbox(RouteContext& context);  // POST /v1/sandboxes/{id}/resume

// The pause body ({} or {"snapshot": bool}; empty is {}): whether to snapshot. Throws
// SandboxError (invalid, bad_request) naming the field.
bool parse_pause_body(const nlohmann::json& body);
// The resume body takes no fields ({} or empty).
void check_resume_body(const nlohmann::json& body);

}  // namespace deskbox::server::routes
