// The routes deskboxd answers: each an OpenAPI path template ("/v1/sandboxes/{id}/files"), who
// may call it, and a handler per method. The router refuses a request whose path matches none
// (404) or whose method its route does not list (405) before any handler runs, so this table
// is the whole surface: a test checks openapi.json against it.
#pragma once

#include <string_view>
#include <vector>

#include "server/api/route_context.hpp"

namespace deskbox::server {

// What the router checks before a route's handler runs.
enum class RouteAuth {
    open,           // anyone: health, the OpenAPI document, the dashboard page and its assets
    api_key,        // an API key, when the server has any
    sandbox_token,  // the sandbox's view or control token, or an API key: viewers in browsers
    own,            // the handler decides: /mcp, exposed ports
    // Another node of this cluster: the cluster secret (X-Deskbox-Cluster-Secret) and nothing
    // else; an API key does not open it. A server without --cluster answers 404.
    cluster_secret,
};

struct RouteMethod {
    http::verb verb;
    RouteHandler handler;
};

struct ApiRoute {
    std::string_view path;  // template; a last segment "{path}" takes the rest of the path
    RouteAuth auth;
    std::vector<RouteMethod> methods;
    // Relayed to a program in the sandbox as sent: no UTF-8 check, and methods beyond the
    // documented ones go on too (the program decides what it takes).
    bool as_sent = false;
    // Takes bodies up to ApiOptions::max_upload_body (files, stdin, images); others take
    // max_json_body.
    bool large_body = false;

    // Its {id} is a sandbox's (/v1/sandboxes/{id}..., /view/{id}): admission resolves it, in
    // one place, before the handler runs (a recording's {id} is not a sandbox's, and a
    // sandbox's metrics are answered from the usage ledger, also after it is gone).
    bool per_sandbox() const;
    // A request to it needs the sandbox running: one its timeout paused with auto_resume
    // resumes first (all per-sandbox routes but inspect, kill, timeout, pause and resume).
    bool wakes_sandbox() const;
    // The handler of `verb`, or nullptr (405).
    RouteHandler handler_for(http::verb verb) const;
};

struct RouteMatch {
    const ApiRoute* route = nullptr;
    RouteParams params;  // the template's variables, without braces: {"id", "sb-1"}
    explicit operator bool() const { return route != nullptr; }
};

const std::vector<ApiRoute>& api_routes();

// The route `path` (already URL-decoded, without the query) falls under, with its variables;
// no route if none. One trailing slash is ignored ("/v1/sandboxes/" is "/v1/sandboxes").
RouteMatch match_api_route(std::string_view path);

// The OpenAPI 3.1 document (server/api/openapi.json, compiled in).
std::string_view openapi_document();

}  // namespace deskbox::server
