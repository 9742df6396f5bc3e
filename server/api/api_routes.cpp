#include "server/api/api_routes.hpp"

#include <set>

#include "server/api/routes/actions.hpp"
#include "server/api/routes/analysis.hpp"
#include "server/api/routes/cluster_templates.hpp"
#include "server/api/routes/commands.hpp"
#include "server/api/routes/desktop.hpp"
#include "server/api/routes/events.hpp"
#include "server/api/routes/files.hpp"
#include "server/api/routes/lifecycle.hpp"
#include "server/api/routes/mcp.hpp"
#include "server/api/routes/metrics.hpp"
#include "server/api/routes/nodes.hpp"
#include "server/api/routes/ports.hpp"
#include "server/api/routes/recordings.hpp"
#include "server/api/routes/sandboxes.hpp"
#include "server/api/routes/screen.hpp"
#include "server/api/routes/secrets.hpp"
#include "server/api/routes/snapshots.hpp"
#include "server/api/routes/system.hpp"
#include "server/api/routes/templates.hpp"
#include "server/api/routes/usage.hpp"
#include "server/api/routes/viewers.hpp"
#include "server/api/routes/volumes.hpp"

namespace deskbox::server {

namespace {

using http::verb;
using RouteAuth::api_key;
using RouteAuth::cluster_secret;
using RouteAuth::open;
using RouteAuth::own;
using RouteAuth::sandbox_token;

std::vector<std::string_view> segments(std::string_view path) {
    std::vector<std::string_view> out;
    std::size_t start = 1;
    while (start <= path.size()) {
        std::size_t end = path.find('/', start);
        if (end == std::string_view::npos) end = path.size();
        out.push_back(path.substr(start, end - start));
        start = end + 1;
    }
    return out;
}

bool is_variable(std::string_view segment) {
    return segment.size() > 2 && segment.front() == '{' && segment.back() == '}';
}

// Fills `params` with the template's variables when `parts` fit `want`.
bool matches(const std::vector<std::string_view>& want, const std::vector<std::string_view>& parts,
             RouteParams& params) {
    for (std::size_t i = 0; i < want.size(); ++i) {
        if (want[i] == "{path}" && i + 1 == want.size()) {  // "" and deeper paths alike
            if (parts.size() < i) return false;
            std::string rest;
            for (std::size_t j = i; j < parts.size(); ++j)
                rest += (j == i ? "" : "/") + std::string(parts[j]);
            params.emplace("path", std::move(rest));
            return true;
        }
        if (i >= parts.size()) return false;
        if (!is_variable(want[i])) {
            if (parts[i] != want[i]) return false;
        } else {
            if (parts[i].empty()) return false;
            params.emplace(std::string(want[i].substr(1, want[i].size() - 2)), parts[i]);
        }
    }
    return parts.size() == want.size();
}

}  // namespace

bool ApiRoute::per_sandbox() const {
    // A sandbox's metrics outlive it: its {id} is looked up in the usage ledger.
    if (path == "/v1/sandboxes/{id}/metrics") return false;
    return path.starts_with("/v1/sandboxes/{id}") || path.starts_with("/view/{id}");
}

bool ApiRoute::wakes_sandbox() const {
    // What reads or changes the sandbox's lifecycle itself leaves it as it is.
    static const std::set<std::string_view> kLifecycle = {
        "/v1/sandboxes/{id}",        "/v1/sandboxes/{id}/timeout", "/v1/sandboxes/{id}/pause",
        "/v1/sandboxes/{id}/resume", "/v1/sandboxes/{id}/events",  "/v1/sandboxes/{id}/network"};
    return per_sandbox() && !kLifecycle.count(path);
}

RouteHandler ApiRoute::handler_for(http::verb verb) const {
    for (const auto& method : methods)
        if (method.verb == verb) return method.handler;
    return as_sent && !methods.empty() ? methods.front().handler : nullptr;
}

const std::vector<ApiRoute>& api_routes() {
    using namespace routes;
    static const std::vector<ApiRoute> table = {
        // The server itself (routes/system.cpp, routes/metrics.cpp, routes/mcp.cpp).
        {"/healthz", open, {{verb::get, healthz}, {verb::head, healthz}}},
        {"/metrics", api_key, {{verb::get, metrics_page}}},
        {"/v1/openapi.json", open, {{verb::get, openapi_json}}},
        {"/mcp", own, {{verb::post, mcp}, {verb::get, mcp}, {verb::delete_, mcp}}},
        // Templates, uploads and builds (routes/templates.cpp); the fixed paths before {name}.
        {"/v1/templates", api_key, {{verb::get, list_templates}}},
        {"/v1/templates/uploads", api_key, {{verb::post, create_upload}}, false, true},
        {"/v1/templates/uploads/{id}", api_key, {{verb::put, append_upload}}, false, true},
        {"/v1/templates/builds", api_key, {{verb::get, list_builds}, {verb::post, start_build}}},
        {"/v1/templates/imports", api_key, {{verb::post, start_import}}},
        {"/v1/templates/builds/{id}", api_key, {{verb::get, get_build}}},
        {"/v1/templates/builds/{id}/log", api_key, {{verb::get, build_log}}},
        {"/v1/templates/builds/{id}/cancel", api_key, {{verb::post, cancel_build}}},
        {"/v1/templates/{name}",
         api_key,
         {{verb::get, get_template}, {verb::delete_, delete_template}}},
        // Volumes (routes/volumes.cpp).
        {"/v1/volumes", api_key, {{verb::get, list_volumes}, {verb::post, create_volume}}},
        {"/v1/volumes/{name}", api_key, {{verb::get, get_volume}, {verb::delete_, delete_volume}}},
        {"/v1/volumes/{name}/files",
         api_key,
         {{verb::get, read_volume_file},
          {verb::put, write_volume_file},
          {verb::delete_, remove_volume_file}},
         false,
         true},
        // Secrets for credential rules, write-only (routes/secrets.cpp).
        {"/v1/secrets", api_key, {{verb::get, list_secrets}, {verb::post, set_secret}}},
        {"/v1/secrets/{name}", api_key, {{verb::delete_, delete_secret}}},
        // The nodes of a cluster (routes/nodes.cpp).
        {"/v1/nodes", api_key, {{verb::get, list_nodes}}},
        {"/v1/nodes/{name}/drain", api_key, {{verb::post, drain_node}}},
        {"/v1/nodes/{name}/undrain", api_key, {{verb::post, undrain_node}}},
        // Between nodes: a template's image for a node that lacks it (cluster_templates.cpp).
        {"/v1/cluster/templates/{image_id}", cluster_secret, {{verb::get, serve_template_image}}},
        // Lifecycle events, streamed (routes/events.cpp).
        {"/v1/events", api_key, {{verb::get, stream_events}}},
        // Sandboxes and their lifecycle (routes/sandboxes.cpp, routes/lifecycle.cpp).
        {"/v1/sandboxes", api_key, {{verb::get, list_sandboxes}, {verb::post, create_sandbox}}},
        {"/v1/sandboxes/{id}",
         api_key,
         {{verb::get, inspect_sandbox}, {verb::delete_, kill_sandbox}}},
        {"/v1/sandboxes/{id}/timeout", api_key, {{verb::post, set_timeout}}},
        {"/v1/sandboxes/{id}/network", api_key, {{verb::patch, change_network}}},
        {"/v1/sandboxes/{id}/pause", api_key, {{verb::post, pause_sandbox}}},
        {"/v1/sandboxes/{id}/resume", api_key, {{verb::post, resume_sandbox}}},
        {"/v1/sandboxes/{id}/events", sandbox_token, {{verb::get, stream_sandbox_events}}},
        // Named snapshots and forks (routes/snapshots.cpp).
        {"/v1/sandboxes/{id}/snapshots", api_key, {{verb::post, create_snapshot}}},
        {"/v1/sandboxes/{id}/fork", api_key, {{verb::post, fork_sandbox}}},
        // Usage and samples, of sandboxes running and gone (routes/usage.cpp).
        {"/v1/sandboxes/{id}/metrics", api_key, {{verb::get, sandbox_metrics}}},
        {"/v1/usage", api_key, {{verb::get, usage_report}}},
        {"/v1/snapshots", api_key, {{verb::get, list_snapshots}}},
        {"/v1/snapshots/{name}",
         api_key,
         {{verb::get, get_snapshot}, {verb::delete_, delete_snapshot}}},
        // The screen, input and analysis (routes/screen.cpp, actions.cpp, analysis.cpp).
        {"/v1/sandboxes/{id}/screenshot", api_key, {{verb::get, screenshot}}},
        {"/v1/sandboxes/{id}/actions", api_key, {{verb::post, run_actions}}},
        {"/v1/sandboxes/{id}/wait", api_key, {{verb::post, wait_for_screen}}},
        {"/v1/sandboxes/{id}/locate", api_key, {{verb::post, locate_on_screen}}, false, true},
        {"/v1/sandboxes/{id}/ocr", api_key, {{verb::post, read_screen_text}}},
        {"/v1/sandboxes/{id}/compare", api_key, {{verb::post, compare_screen}}, false, true},
        // Processes and files in the guest (routes/commands.cpp, routes/files.cpp).
        {"/v1/sandboxes/{id}/commands",
         api_key,
         {{verb::post, run_command}, {verb::get, list_commands}},
         false,
         true},
        {"/v1/sandboxes/{id}/commands/{pid}/stdin",
         api_key,
         {{verb::post, write_command_stdin}},
         false,
         true},
        {"/v1/sandboxes/{id}/commands/{pid}/kill", api_key, {{verb::post, kill_command}}},
        {"/v1/sandboxes/{id}/processes/kill", api_key, {{verb::post, kill_processes}}},
        {"/v1/sandboxes/{id}/files",
         api_key,
         {{verb::get, read_file}, {verb::put, write_file}, {verb::delete_, remove_file}},
         false,
         true},
        {"/v1/sandboxes/{id}/files/list", api_key, {{verb::get, list_directory}}},
        {"/v1/sandboxes/{id}/files/mkdir", api_key, {{verb::post, make_directory}}},
        // Recordings (routes/recordings.cpp).
        {"/v1/sandboxes/{id}/recording",
         api_key,
         {{verb::get, recording_status},
          {verb::post, start_recording},
          {verb::delete_, stop_recording}}},
        {"/v1/recordings", api_key, {{verb::get, list_recordings}}},
        {"/v1/recordings/{id}",
         api_key,
         {{verb::get, download_recording},
          {verb::head, download_recording},
          {verb::delete_, delete_recording}}},
        {"/v1/recordings/{id}/events",
         api_key,
         {{verb::get, download_recording_events}, {verb::head, download_recording_events}}},
        // Exposed ports (routes/ports.cpp).
        {"/v1/sandboxes/{id}/ports", api_key, {{verb::get, list_ports}}},
        {"/v1/sandboxes/{id}/ports/{port}/{path}",
         own,
         {{verb::get, relay_to_port},
          {verb::post, relay_to_port},
          {verb::put, relay_to_port},
          {verb::patch, relay_to_port},
          {verb::delete_, relay_to_port},
          {verb::head, relay_to_port},
          {verb::options, relay_to_port}},
         true,
         true},
        // The desktop's state (routes/desktop.cpp).
        {"/v1/sandboxes/{id}/windows", api_key, {{verb::get, list_windows}}},
        {"/v1/sandboxes/{id}/cursor", api_key, {{verb::get, cursor_position}}},
        {"/v1/sandboxes/{id}/accessibility", api_key, {{verb::get, accessibility_tree}}},
        {"/v1/sandboxes/{id}/accessibility/find", api_key, {{verb::post, accessibility_find}}},
        {"/v1/sandboxes/{id}/accessibility/act", api_key, {{verb::post, accessibility_act}}},
        {"/v1/sandboxes/{id}/clipboard",
         api_key,
         {{verb::get, read_clipboard}, {verb::put, write_clipboard}, {verb::post, write_clipboard}},
         false,
         true},
        // People watching (routes/viewers.cpp).
        {"/v1/sandboxes/{id}/stream", sandbox_token, {{verb::get, stream_socket}}},
        {"/v1/sandboxes/{id}/vnc", sandbox_token, {{verb::get, vnc_socket}}},
        {"/view/{id}", sandbox_token, {{verb::get, viewer_page}}},
        {"/", open, {{verb::get, dashboard_page}, {verb::head, dashboard_page}}},
        {"/assets/{name}", open, {{verb::get, viewer_asset}, {verb::head, viewer_asset}}},
    };
    return table;
}

RouteMatch match_api_route(std::string_view path) {
    if (path.empty() || path.front() != '/') return {};
    if (path == "/index.html") path = "/";
    if (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
    auto parts = segments(path);
    if (path == "/") parts.clear();
    // The templates split once, not on every request.
    static const std::vector<std::vector<std::string_view>> templates = [] {
        std::vector<std::vector<std::string_view>> out;
        for (const auto& route : api_routes()) out.push_back(segments(route.path));
        return out;
    }();
    const auto& routes = api_routes();
    for (std::size_t i = 0; i < routes.size(); ++i) {
        RouteMatch match{&routes[i], {}};
        if (routes[i].path == "/" ? path == "/" : matches(templates[i], parts, match.params))
            return match;
    }
    return {};
}

}  // namespace deskbox::server
