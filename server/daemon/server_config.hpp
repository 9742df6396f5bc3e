// deskboxd's configuration: flags, optionally on top of a JSON config file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/api/api_router.hpp"
#include "server/cluster/cluster_service.hpp"
#include "server/events/event_service.hpp"
#include "server/events/webhook.hpp"
#include "server/http/http_server.hpp"
#include "server/sandbox/sandbox_manager.hpp"
#include "server/usage/usage_sampler.hpp"

namespace deskbox::server {

struct ServerConfig {
    HttpOptions http;
    ApiOptions api;
    ManagerOptions manager;
    usage::UsageOptions usage;  // --usage-sample-s, --metrics-keep-h, --price-*
    // SIGTERM leaves running sandboxes to the next deskboxd on this state dir
    // (--on-exit keep, the default: an upgrade or restart keeps every desktop), or kills them
    // (kill). SIGINT (^C at a terminal) always kills them.
    bool keep_sandboxes_on_sigterm = true;
    // --cluster: a member of a cluster coordinated by etcd (docs/CLUSTER.md). An empty
    // advertise is filled in once the port is known (the listen address must then be one).
    std::optional<ClusterConfig> cluster;
    // --egress-max-connections; 0: from the fd budget (plan_fd_budget).
    std::size_t egress_max_connections = 0;
    bool max_http_connections_given = false;  // else the budget may lower it (limit / 8)
    // The config file's "webhooks" (server/events/webhook.hpp); only there: secrets stay out of
    // argv, where `ps` would show them.
    std::vector<events::WebhookConfig> webhooks;
    events::EventRetention event_retention;  // --events-keep-days, --events-max-undelivered
};

// How deskboxd's fds are shared (docs/ARCHITECTURE.md, "fd budget"): a reserve for itself, HTTP
// and each sandbox's fixed needs, and the rest split evenly between --max-sandboxes sandboxes,
// whose egress connections (TCP: two sockets and two splice pipes, 6 fds; plus as many UDP
// flows, 2 fds) are capped at their share.
struct FdBudget {
    static constexpr std::uint64_t kBaseReserve = 256;
    static constexpr std::uint64_t kFixedPerSandbox = 64;
    static constexpr std::uint64_t kFdsPerConnectionUnit = 8;  // a TCP connection + a UDP flow
    static constexpr std::size_t kMaxDefault = 1024;           // per sandbox, unless the flag says
    static constexpr std::size_t kMinPerSandbox = 16;          // less: a warning
    static constexpr std::size_t kRefuseBelow = 4;             // less: refuse to start
    std::uint64_t limit = 0, reserve = 0;
    std::size_t computed = 0;     // what the limit allows each sandbox
    std::size_t per_sandbox = 0;  // the cap in force (computed, or --egress-max-connections)
    bool overridden = false;
    std::string warning;  // the flag asks for more than the budget
};

// Plans the budget for `fd_limit` (RLIMIT_NOFILE after raising it) and sets the per-sandbox
// caps in `config` (and the HTTP cap, unless --max-http-connections was given, to at most an
// eighth of the limit). A share under FdBudget::kMinPerSandbox gives a warning; under
// kRefuseBelow, without --egress-max-connections, std::invalid_argument saying what to change.
FdBudget plan_fd_budget(std::uint64_t fd_limit, ServerConfig& config);

// The URL other nodes reach this server at, when --advertise was not given: its listen address
// and bound port. Throws std::invalid_argument for a wildcard address (0.0.0.0, ::).
std::string default_advertise(const std::string& address, unsigned short port);

// Parses flags (argv without argv[0]); `--config FILE` loads a JSON file whose keys are the
// flag names without dashes; later flags override it. Throws std::invalid_argument.
// Refuses to listen beyond loopback without an API key.
ServerConfig parse_server_config(const std::vector<std::string>& args);

bool is_loopback(const std::string& address);

// The runtimes deskboxd offers: `container` (runc, its cgroups under a parent of this state
// dir's own) and `microvm` (QEMU).
runtime::RuntimeRegistry make_runtimes(const ManagerOptions& options);

extern const char* const kServerUsage;

}  // namespace deskbox::server
