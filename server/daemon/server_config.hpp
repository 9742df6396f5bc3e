// deskboxd's configuration: flags, optionally on top of a JSON config file.
#pragma once

#include <string>
#include <vector>

#include "server/api/api_router.hpp"
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
};

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
