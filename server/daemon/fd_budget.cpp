// How deskboxd's file descriptors are shared: what it keeps for itself and HTTP, and each
// sandbox's share of egress connections (declared in server_config.hpp).
#include <algorithm>
#include <stdexcept>

#include "server/daemon/server_config.hpp"

namespace deskbox::server {

FdBudget plan_fd_budget(std::uint64_t fd_limit, ServerConfig& config) {
    FdBudget b;
    b.limit = fd_limit;
    const std::uint64_t sandboxes = std::max<std::size_t>(config.manager.max_sandboxes, 1);
    // Unless the flag says, HTTP takes at most an eighth of the fds (64 at least).
    if (!config.max_http_connections_given)
        config.http.max_connections = static_cast<std::size_t>(
            std::clamp<std::uint64_t>(fd_limit / 8, 64, config.http.max_connections));
    // deskboxd's own (logs, state, epoll, threads' eventfds), every HTTP connection with a socket
    // of its own to spare (a WebSocket's or exposed port's other end), and each sandbox's fixed
    // share (namespaces, listeners, agent channel, runtime processes' pipes, viewers).
    b.reserve = FdBudget::kBaseReserve + 2 * config.http.max_connections +
                sandboxes * FdBudget::kFixedPerSandbox;
    const std::uint64_t per_unit = sandboxes * FdBudget::kFdsPerConnectionUnit;
    const std::uint64_t computed = fd_limit > b.reserve ? (fd_limit - b.reserve) / per_unit : 0;
    b.computed = static_cast<std::size_t>(std::min<std::uint64_t>(computed, FdBudget::kMaxDefault));
    const std::string sizes = "RLIMIT_NOFILE " + std::to_string(fd_limit) + ", " +
                              std::to_string(b.reserve) + " kept for deskboxd, HTTP (" +
                              std::to_string(config.http.max_connections) +
                              " connections) and sandboxes' fixed needs, " +
                              std::to_string(sandboxes) + " sandboxes (--max-sandboxes)";
    if (config.egress_max_connections) {
        b.per_sandbox = config.egress_max_connections;
        b.overridden = true;
        if (b.per_sandbox > b.computed)
            b.warning = "--egress-max-connections " + std::to_string(b.per_sandbox) +
                        " is over the fd budget of " + std::to_string(b.computed) + " (" + sizes +
                        "): sandboxes together can run deskboxd out of fds, and connections are "
                        "then refused as no_fds";
    } else {
        if (b.computed < FdBudget::kMinPerSandbox)
            b.warning = "few file descriptors: each sandbox may hold only " +
                        std::to_string(b.computed) + " egress connections (" + sizes +
                        "); raise the hard limit (ulimit -Hn, systemd LimitNOFILE=) or lower "
                        "--max-sandboxes";
        if (b.computed < FdBudget::kRefuseBelow)
            throw std::invalid_argument(
                "too few file descriptors: each sandbox could hold only " +
                std::to_string(b.computed) + " egress connections (" + sizes +
                "; a connection costs " + std::to_string(FdBudget::kFdsPerConnectionUnit) +
                " fds with its UDP share). Raise the hard limit (ulimit -Hn, systemd "
                "LimitNOFILE=), lower --max-sandboxes or --max-http-connections, or set "
                "--egress-max-connections N to accept the risk");
        b.per_sandbox = b.computed;
    }
    config.manager.network.max_connections = b.per_sandbox;
    config.manager.network.max_udp_flows =
        std::min<std::size_t>(config.manager.network.max_udp_flows, b.per_sandbox);
    return b;
}

}  // namespace deskbox::server
