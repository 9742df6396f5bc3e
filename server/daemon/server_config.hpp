// deskboxd's configuration: flags, optionally on top of a JSON config file.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/api/api_router.hpp"
#include "server/cluster/cluster_service.hpp"
#include "server/http/http_server.hpp"
#include "server/sandbox/sandbox_manager.hpp"

namespace deskbox::server {

struct ServerConfig {
    HttpOptions http;
    ApiOptions api;
    ManagerOptions manager;
    // SIGTERM leaves running sandboxes to the next deskboxd on this state dir
    // (--on-exit keep, the default: an upgrade or restart keeps every desktop), or kills them
    // (kill). SIGINT (^C at a terminal) always kills them.
    bool keep_sandboxes_on_sigterm = true;
    // --cluster: a member of a cluster coordinated by etcd (docs/CLUSTER.md). An empty
    // advertise is filled in once the port is known (the listen address must then be one).
    std::optional<ClusterConfig> cluster;
};

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
