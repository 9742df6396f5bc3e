// The desktop's state, from the agent: its windows, the pointer, the clipboard.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse list_windows(RouteContext& context);     // GET /v1/sandboxes/{id}/windows
HttpResponse cursor_position(RouteContext& context);  // GET /v1/sandboxes/{id}/cursor
HttpResponse read_clipboard(RouteContext& context);   // GET /v1/sandboxes/{id}/clipboard
HttpResponse write_clipboard(RouteContext& context);  // PUT|POST, {"text": "..."}
// The AT-SPI tree, bounds in API pixels (server/sandbox/accessibility.hpp).
HttpResponse accessibility_tree(RouteContext& context);  // GET .../accessibility
HttpResponse accessibility_find(RouteContext& context);  // POST .../accessibility/find
HttpResponse accessibility_act(RouteContext& context);   // POST .../accessibility/act

// The clipboard body is {"text": string} and nothing else: its text. Throws SandboxError
// (invalid, bad_request) naming the field (the agent refuses more than it holds: 413 too_large).
std::string parse_clipboard_body(const nlohmann::json& body);

}  // namespace deskbox::server::routes
