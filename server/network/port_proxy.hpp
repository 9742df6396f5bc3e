// Exposed ports: HTTP and WebSocket requests for a port a program in the sandbox listens on
// (GET/WS /v1/sandboxes/{id}/ports/{port}/..., or {port}-{id}.<ports domain>/...), relayed to
// it through the sandbox's own network namespace -- the container's loopback, or a microVM's
// address on its link -- never through any address a sandbox could reach. The request goes
// on rewritten (target, Host, X-Forwarded-*; the router removes deskbox's credentials) with
// "Connection: close"; then the connection is spliced both ways, which carries a plain
// response and an upgraded WebSocket alike.
#pragma once

#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "server/network/egress_context.hpp"
#include "server/network/sandbox_network.hpp"

namespace deskbox::network {

struct PortRequest {
    boost::beast::http::request<boost::beast::http::string_body> request;
    std::uint16_t port = 0;
    std::string target;  // what the program sees: "/rest?query" without our parameters
    std::string host;    // Host header for the program (empty: keep the client's)
    std::string prefix;  // X-Forwarded-Prefix (path form), empty for the host-name form
    // Path form: the answer shares deskboxd's origin, so its header is marked to be isolated
    // (kIsolationPolicy) and its cookies scoped to `prefix`. The caller removes credentials.
    bool isolate = false;
};

struct PortProxyCounters {
    std::atomic<std::int64_t> open{0};
    std::atomic<std::uint64_t> total{0}, failed{0};
};

// Takes `stream` (the client's connection) and relays `request` to the sandbox's port. Errors
// reaching the port are answered as a JSON 502 on the client's connection. The relay does not
// keep `network` alive: when it goes (the sandbox is killed), the relay is closed.
void start_port_proxy(boost::beast::tcp_stream stream, PortRequest request,
                      const SandboxNetwork& network, PortProxyCounters& counters);

// The Content-Security-Policy every path-form answer gets: a sandboxed, opaque origin.
inline constexpr const char* kIsolationPolicy =
    "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads";
// A Set-Cookie value with its Path and Domain attributes replaced by "Path=`path`".
std::string scoped_cookie(std::string_view set_cookie, std::string_view path);
// Removes cookie `name` from a Cookie header value ("a=1; deskbox_token=x; b=2" -> "a=1; b=2").
std::string without_cookie(std::string_view cookies, std::string_view name);
// The value of cookie `name` in a Cookie header value, or "".
std::string cookie_value(std::string_view cookies, std::string_view name);

}  // namespace deskbox::network
