// deskboxd: the host server. Serves API v1 and runs sandboxes.
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>

#include "server/daemon/server_config.hpp"
#include "server/events/event_service.hpp"
#include "streaming/vnc/vnc_server.hpp"

namespace {

using namespace deskbox::server;

// SIGTERM and SIGINT wait for sigwait (blocked in every thread); SIGPIPE is an error return.
sigset_t block_stop_signals() {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    signal(SIGPIPE, SIG_IGN);
    return signals;
}

// Raises the soft fd limit to the hard one, shares it (the per-sandbox egress connections go
// into `config`) and prints how; throws on a budget that cannot work.
void plan_descriptors(ServerConfig& config) {
    // Each proxied connection of a sandbox holds six fds (two sockets, two pipes): a browser
    // in a few sandboxes passes the usual soft limit of 1024. The hard limit is the operator's,
    // and the fd budget below shares what it allows between sandboxes.
    rlimit files{};
    if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
        files.rlim_cur = std::min<rlim_t>(files.rlim_max, 1 << 20);  // fs.nr_open's default
        ::setrlimit(RLIMIT_NOFILE, &files);
    }
    if (::getrlimit(RLIMIT_NOFILE, &files) != 0) files.rlim_cur = 1024;
    const std::uint64_t limit =
        files.rlim_cur == RLIM_INFINITY ? (1u << 20) : static_cast<std::uint64_t>(files.rlim_cur);
    FdBudget budget = plan_fd_budget(limit, config);
    std::fprintf(stderr,
                 "deskboxd: fd budget: RLIMIT_NOFILE %llu, %llu reserved; each of %zu "
                 "sandboxes may hold %zu egress connections%s\n",
                 static_cast<unsigned long long>(budget.limit),
                 static_cast<unsigned long long>(budget.reserve), config.manager.max_sandboxes,
                 budget.per_sandbox, budget.overridden ? " (--egress-max-connections)" : "");
    if (!budget.warning.empty())
        std::fprintf(stderr, "deskboxd: warning: %s\n", budget.warning.c_str());
}

// Sandboxes an earlier deskboxd left: saved ones and running ones are adopted, the rest removed.
void adopt_or_clean(SandboxManager& manager) {
    for (auto& id : manager.adopt_snapshots())
        std::fprintf(stderr, "deskboxd: adopted sandbox %s (saved to a snapshot; resume it)\n",
                     id.c_str());
    for (auto& id : manager.adopt_running())
        std::fprintf(stderr, "deskboxd: adopted running sandbox %s\n", id.c_str());
    for (auto& id : manager.clean_leftovers())
        std::fprintf(stderr, "deskboxd: removed leftover sandbox %s\n", id.c_str());
}

// Serves until SIGTERM or SIGINT; then stops streams, the HTTP server and the cluster
// membership in that order (the manager, declared by the caller, goes last).
void serve(ServerConfig& config, SandboxManager& manager, const sigset_t& signals) {
    // The router answers only once started; it needs the cluster, which needs the bound
    // port to advertise. (Declared in this order, the server stops before either goes.)
    std::unique_ptr<ClusterService> cluster;
    std::optional<ApiRouter> router;
    HttpServer http(
        config.http, [&router](HttpExchange& exchange) { return router->handle(exchange); },
        [&router](HttpRequest& header) { return router->check_header(header); });
    if (config.cluster) {
        if (config.cluster->advertise.empty())
            config.cluster->advertise = default_advertise(config.http.address, http.port());
        cluster = std::make_unique<ClusterService>(*config.cluster, manager);
        config.api.cluster = cluster.get();
        std::fprintf(stderr, "deskboxd: node %s joined the cluster (advertised at %s)\n",
                     config.cluster->node_name.c_str(), config.cluster->advertise.c_str());
    }
    router.emplace(manager, config.api);
    // Before serving: a webhook that points at this very listener is refused at start.
    boost::system::error_code not_an_address;  // a name: checked as any local address
    config.api.events->start_delivery(
        {boost::asio::ip::make_address(config.http.address, not_an_address), http.port()});
    http.start();
    // One parseable line: tests and scripts read the port from it.
    std::printf("deskboxd listening on http://%s:%u\n", config.http.address.c_str(), http.port());
    std::fflush(stdout);
    int sig = 0;
    sigwait(&signals, &sig);
    const bool keep = sig == SIGTERM && config.keep_sandboxes_on_sigterm;
    std::fprintf(stderr, "deskboxd: signal %d, stopping (%s)\n", sig,
                 keep ? "running sandboxes stay for the next deskboxd" : "killing every sandbox");
    manager.keep_sandboxes_on_exit(keep);
    // Live encoders post to viewer sockets' executors: stop them before those go away.
    for (const auto& sandbox : manager.list()) sandbox->media().streams().stop_all();
    http.stop();
    // Killed sandboxes leave the cluster with the node; kept ones stay recorded for the
    // next deskboxd, and the node's record lapses unless it is back within the lease.
    if (cluster) cluster->shutdown(keep);
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
        std::fputs(kServerUsage, stdout);
        return 0;
    }
    ServerConfig config;
    try {
        config = parse_server_config(args);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deskboxd: %s\n", e.what());
        return 2;
    }
    const sigset_t signals = block_stop_signals();
    // Frames, screenshots and encoder buffers are megabytes each and come and go on many
    // threads. glibc's default raises its mmap threshold to the largest block freed, after
    // which they are carved from per-thread arenas that fragment and never shrink (RSS grew
    // by hundreds of MB per burst of sandboxes). A fixed threshold keeps them mmapped: freed
    // means returned.
    ::mallopt(M_MMAP_THRESHOLD, 1 << 20);
    try {
        plan_descriptors(config);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deskboxd: %s\n", e.what());
        return 2;
    }
    try {
        // Before anything takes descriptors: sandboxes, connections, adopted ones.
        deskbox::streaming::VncServer::reserve_descriptors();
        // Before the manager and gone after it: every sandbox's last event is recorded. In a
        // cluster the ids name this node, so they are unique across the cluster.
        events::EventService events(config.manager.state_dir, config.webhooks,
                                    config.event_retention,
                                    config.cluster ? config.cluster->node_name : std::string());
        config.api.events = &events;
        // Made after the manager (it samples the manager's sandboxes): set once it exists, and
        // unset (under the same lock as its use) before it goes.
        std::mutex usage_mutex;
        usage::UsageService* usage_service = nullptr;
        config.manager.audit_listener = [&](const Sandbox& sandbox, const std::string& kind,
                                            const nlohmann::json& detail) {
            // One made ahead for the pool has no events until a create claims it.
            if (sandbox.config().pooled) return;
            // Its counters are still readable: the usage up to the kill, not the last round's.
            if (kind == "kill") {
                std::lock_guard lock(usage_mutex);
                if (usage_service) usage_service->sandbox_ending(sandbox);
            }
            events.record(sandbox.id(), sandbox.config().template_name, sandbox.config().metadata,
                          kind, detail);
        };
        SandboxManager manager(config.manager, make_runtimes(config.manager));
        adopt_or_clean(manager);
        // After adoption: adopted sandboxes continue their ledger lines, the rest are ended.
        usage::UsageService usage(manager, config.manager.state_dir, config.usage);
        config.api.usage = &usage;
        struct Unset {
            std::mutex& mutex;
            usage::UsageService*& service;
            ~Unset() {
                std::lock_guard lock(mutex);
                service = nullptr;
            }
        } unset{usage_mutex, usage_service};
        {
            std::lock_guard lock(usage_mutex);
            usage_service = &usage;
        }
        serve(config, manager, signals);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deskboxd: %s\n", e.what());
        return 1;
    }
    return 0;
}
