// Exposed ports: a program listening in a sandbox, reached through deskboxd at
// /v1/sandboxes/{id}/ports/{port}/... (path form) or {port}-{id}.<ports domain> (host-name
// form, for apps that must live at "/"), relayed by server/network/port_proxy. The sandbox's
// control token (?token=, Authorization: Bearer, or the deskbox_token cookie a first ?token=
// visit sets) or an API key authorises; a view token does not.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api/route_context.hpp"
#include "server/http/api_error.hpp"

namespace deskbox::server::routes {

HttpResponse list_ports(RouteContext& context);     // GET /v1/sandboxes/{id}/ports
HttpResponse relay_to_port(RouteContext& context);  // any /v1/sandboxes/{id}/ports/{port}/...

// Where a relayed request goes.
struct PortTarget {
    std::string id;
    std::uint16_t port = 0;
    std::string target;       // for the program: its path and query, without our credentials
    std::string prefix;       // path form: /v1/sandboxes/{id}/ports/{port}
    std::string cookie_path;  // where the token cookie applies
    bool path_form = false;
};
// The host-name form's target, or nullopt when the Host is not under `ports_domain` (or it is
// empty). Throws ApiError 404 for a malformed host label, 400 for a bad port.
std::optional<PortTarget> host_port_target(const HttpRequest& request,
                                           const std::string& ports_domain);
// Relays the request to `target` of context.sandbox (resolved by admission): authorises,
// answers a first ?token= visit with a cookie, then hands the connection to the port proxy.
HttpResponse relay(RouteContext& context, const PortTarget& target);

// The 401 of a request without the sandbox's control token (nor an API key); an unknown id
// gets the same.
ApiError port_refusal();
// 1..65535; else ApiError 400 bad_request naming "port".
std::uint16_t parse_port_number(const std::string& text);
// What inspect and /ports list: the ports the guest listens on and how to reach them; null
// when the agent cannot say.
nlohmann::json listening_ports(Sandbox& sandbox, const std::string& ports_domain);

}  // namespace deskbox::server::routes
