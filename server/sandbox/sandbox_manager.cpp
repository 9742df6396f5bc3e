#include "server/sandbox/sandbox_manager.hpp"
#include "server/templates/deskbox_layer.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>

#include "common/atomic_file.hpp"
#include "common/pem.hpp"
#include "common/random.hpp"
#include "server/network/egress_ca.hpp"
#include "server/runtime/container/runtime_state.hpp"
#include "server/runtime/guest_env.hpp"
#include "server/sandbox/disk_commitment.hpp"
#include "server/sandbox/request_reader.hpp"
#include "server/sandbox/store_errors.hpp"

namespace deskbox::server {
namespace {

// The template VM is saved once its desktop is up: the agent answered, the screen arrived and
// the template's ready condition holds, so restored copies are ready at once. One that never
// gets ready is saved anyway: each copy's own wait then says what is missing. The host's
// session ends before the save (restored copies get their own).
void wait_for_desktop(runtime::SandboxInstance& sandbox, std::chrono::milliseconds timeout,
                      const ReadyCondition& ready) {
    UniqueFd fd = sandbox.connect_agent(timeout);
    int raw = fd.release();
    auto channel = std::make_unique<protocol::Channel>(raw, raw);
    protocol::handshake(*channel, "host");
    auto client = std::make_shared<protocol::RpcClient>(std::move(channel));
    client->start();
    AgentClient agent = AgentClient::over(client);
    agent.sync_screen(500, 5000);
    AgentReadinessProbe probe(agent);
    const ReadyOutcome outcome = wait_until_ready(ready, probe);
    if (!outcome.ready)
        std::fprintf(stderr, "deskboxd: template VM saved before it was ready: %s\n",
                     outcome.unmet.c_str());
    client->close();
}

// The egress CA where every guest sees it (agent_dir is /opt/deskbox inside), as the normalised
// certificates the guest's install compares with its bundle. Without one, a file an earlier
// server left goes, so no new sandbox is told of a CA this server does not use. (Containers
// adopted from that server see the change through their bind mount; their trust stores keep
// the CA they were born with.)
void publish_egress_ca(const std::filesystem::path& agent_dir, const std::string& pem) {
    const auto file = agent_dir / runtime::kEgressCaFileName;
    if (pem.empty()) {
        std::error_code ec;
        std::filesystem::remove(file, ec);
        if (ec) throw std::runtime_error("cannot remove " + file.string() + ": " + ec.message());
        return;
    }
    std::string certificates;
    try {
        for (const auto& certificate : pem_certificates(pem)) certificates += certificate;
    } catch (const std::invalid_argument& e) {
        throw std::runtime_error(std::string("the egress CA: ") + e.what());
    }
    std::filesystem::create_directories(agent_dir);
    atomic_file::write(file, certificates);  // written again at every start
}

// Waits for the sandbox's ready condition; a sandbox that does not get ready is killed.
void ready_or_kill(Sandbox& sandbox, const ReadyCondition& ready) {
    try {
        sandbox.wait_ready(ready);
    } catch (...) {
        sandbox.kill();
        throw;
    }
}

// What the runtime starts for `config`: the agent as init with the template's session (window
// manager, autostart), its environment under the request's, and its security settings.
runtime::SandboxSpec spec_for(const SandboxConfig& config, const nlohmann::json& definition,
                              const std::string& agent_channel_arg) {
    runtime::SandboxSpec spec;
    spec.id = config.id;
    spec.width = config.width;
    spec.height = config.height;
    spec.dpi = config.dpi;
    spec.limits = config.limits;
    spec.hostname = config.id;
    spec.env = {{"HOME", "/home/user"}, {"USER", "user"}, {"LANG", "C.UTF-8"}};
    if (definition.contains("env"))
        for (auto& [k, v] : definition["env"].items()) spec.env[k] = v;
    for (auto& [k, v] : config.env) spec.env[k] = v;
    spec.entry = {"/opt/deskbox/bin/deskbox-agent",
                  "--init",
                  "--channel",
                  agent_channel_arg,
                  "--size",
                  std::to_string(config.width) + "x" + std::to_string(config.height),
                  "--dpi",
                  std::to_string(config.dpi)};
    if (definition.contains("session")) {
        const auto& s = definition["session"];
        if (s.contains("window_manager")) {
            const std::string wm =
                templates::join_command(s["window_manager"].get<std::vector<std::string>>());
            spec.entry.insert(spec.entry.end(), {"--wm", wm.empty() ? "none" : wm});
        }
        // "glx": false (images/template_session.py): Xvfb without GLX, so without Mesa.
        if (s.value("glx", true) == false) spec.entry.push_back("--no-glx");
        for (auto& app : s.value("autostart", nlohmann::json::array())) {
            // Quoted so the agent splits it back into the same words.
            spec.entry.insert(
                spec.entry.end(),
                {"--autostart", templates::join_command(app.get<std::vector<std::string>>())});
        }
    }
    for (auto& [k, v] : spec.env) spec.entry.insert(spec.entry.end(), {"--env", k + "=" + v});
    // images/build.py checked the type; a hand-edited definition is read leniently.
    if (auto security = definition.find("security");
        security != definition.end() && security->is_object())
        spec.nested_user_namespaces = security->value("nested_user_namespaces", false) == true;
    return spec;
}

// Holds <state>/deskboxd.lock for this server's life. A second server on the same state dir
// would take the first one's live sandboxes for leftovers (and kill them) or fight over their
// QEMU control sockets: it is refused instead, naming the holder.
UniqueFd lock_state_dir(const std::filesystem::path& state_dir) {
    const auto file = state_dir / "deskboxd.lock";
    UniqueFd fd(::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!fd) throw std::runtime_error("cannot open " + file.string() + ": " + std::strerror(errno));
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        std::string holder;
        std::ifstream in(file);
        std::getline(in, holder);
        throw std::runtime_error("state dir " + state_dir.string() +
                                 " is in use by another deskboxd" +
                                 (holder.empty() ? "" : " (pid " + holder + ")") +
                                 "; give each server its own --state-dir");
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd.get(), 0) != 0 || ::pwrite(fd.get(), pid.data(), pid.size(), 0) < 0)
        throw std::runtime_error("cannot write " + file.string() + ": " + std::strerror(errno));
    return fd;
}

}  // namespace

SandboxManager::SandboxManager(ManagerOptions options, runtime::RuntimeRegistry runtimes)
    : options_(std::move(options)), runtimes_(std::move(runtimes)) {
    std::filesystem::create_directories(options_.state_dir);
    state_lock_ = lock_state_dir(options_.state_dir);
    if (!runtimes_.find(options_.default_runtime))
        throw std::runtime_error("--default-runtime: this server has no runtime named '" +
                                 options_.default_runtime + "' (it has " + runtimes_.names() + ")");
    const auto all = runtimes_.all();
    if (options_.user_namespaces &&
        std::any_of(all.begin(), all.end(),
                    [](const runtime::Runtime* r) { return r->needs_user_namespace(); })) {
        if (auto problem = runtime::host_id_range_problem(options_.host_ids); !problem.empty())
            throw std::runtime_error("cannot give sandboxes their own host ids: " + problem);
        runtime::open_the_way_to_sandboxes(options_.state_dir);
    }
    for (auto* runtime : runtimes_.all())
        if (runtime->template_snapshots() && pool_runtime_.empty()) pool_runtime_ = runtime->name();
    if (!options_.microvm_pool.empty() && pool_runtime_.empty())
        throw std::runtime_error(
            "a pool needs a runtime with template snapshots (this server has " + runtimes_.names() +
            ")");
    if (!options_.container_pool.empty() && !runtimes_.find(runtime::kContainerRuntimeName))
        throw std::runtime_error("--container-pool needs the container runtime (this server has " +
                                 runtimes_.names() + ")");
    for (const auto& [name, size] : options_.microvm_pool)
        if (size) pool_targets_.push_back({pool_runtime_, name, size});
    for (const auto& [name, size] : options_.container_pool)
        if (size) pool_targets_.push_back({runtime::kContainerRuntimeName, name, size});
    // Sandboxes get a copy of the agent, so rebuilding it never disturbs running ones.
    agent_dir_ = options_.state_dir / "agent";
    if (!options_.agent_binary.empty()) {
        if (!std::filesystem::exists(options_.agent_binary))
            throw std::runtime_error("agent binary not found: " + options_.agent_binary.string());
        std::filesystem::create_directories(agent_dir_ / "bin");
        auto target = agent_dir_ / "bin" / "deskbox-agent";
        auto temp = agent_dir_ / "bin" / ".deskbox-agent.new";
        std::filesystem::copy_file(options_.agent_binary, temp,
                                   std::filesystem::copy_options::overwrite_existing);
        std::filesystem::permissions(temp, std::filesystem::perms(0755));
        std::filesystem::rename(temp, target);
    }
    // The CA HTTPS credential rules are served with: made once per state dir, kept there.
    // Every sandbox trusts it (and --egress-ca-cert's) from birth, so a rule set later, or by a
    // PATCH, needs nothing from the guest.
    if (!options_.network.egress_ca)
        options_.network.egress_ca =
            network::EgressCa::load_or_create(options_.state_dir / "egress-ca");
    options_.egress_ca_pem = options_.network.egress_ca->certificate_pem() + options_.egress_ca_pem;
    publish_egress_ca(agent_dir_, options_.egress_ca_pem);
    // Set before any thread starts: setenv is not safe next to concurrent getenv.
    if (!options_.template_cache.empty())
        ::setenv("DESKBOX_CACHE", options_.template_cache.c_str(), 1);
    secrets_ = std::make_unique<secrets::SecretStore>(options_.state_dir / "secrets");
    // The proxy reads a rule's secret for each request (a new value applies at once).
    options_.network.secret_value = [store = secrets_.get()](const std::string& name) {
        return store->value(name);
    };
    network_ = std::make_unique<network::NetworkService>(options_.network);
    volumes::VolumeStore::Options volume_options;
    volume_options.root = options_.state_dir / "volumes";
    volume_options.mount_guest_written = options_.mount_guest_written_volumes;
    volumes_ = std::make_unique<volumes::VolumeStore>(std::move(volume_options));
    snapshots_ = std::make_unique<snapshots::SnapshotStore>(
        snapshots::SnapshotStore::Options{options_.state_dir / "snapshots"});
    start_template_service();
    reaper_ = std::thread([this] { reaper_loop(); });
    if (!pool_targets_.empty()) pool_filler_ = std::thread([this] { pool_loop(); });
}

SandboxManager::~SandboxManager() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    reaper_wake_.notify_all();
    pool_wake_.notify_all();
    reaper_.join();
    if (pool_filler_.joinable()) pool_filler_.join();
    std::map<std::string, std::shared_ptr<Sandbox>> all, pooled;
    {
        std::lock_guard lock(mutex_);
        all.swap(sandboxes_);
        for (auto& [name, ready] : pool_)
            for (auto& sandbox : ready) pooled[sandbox->id()] = sandbox;
        pool_.clear();
    }
    // Sandboxes saved to snapshots stay on disk for the next server; so do running ones when
    // asked (and their runtime can); the rest end. Nobody claimed the pool's: they end.
    for (auto& [id, sandbox] : all) sandbox->shutdown(keep_on_exit_);
    for (auto& [id, sandbox] : pooled) sandbox->shutdown(false);
}

runtime::Runtime& SandboxManager::runtime_for(const std::string& name) const {
    if (auto* runtime = runtimes_.find(name)) return *runtime;
    throw invalid_field("runtime", "unknown runtime '" + name + "' (" + runtimes_.names() + ")");
}

CreateRequest SandboxManager::parse_create(const nlohmann::json& asked) const {
    const bool from_snapshot = asked.is_object() && asked.contains("snapshot");
    const nlohmann::json request = from_snapshot ? request_from_snapshot(asked) : asked;
    CreateDefaults defaults;
    defaults.template_name = options_.default_template;
    defaults.runtime_name = options_.default_runtime;
    defaults.timeout = options_.default_timeout;
    defaults.max_timeout = options_.max_timeout;
    defaults.disk_mb = options_.default_disk_mb;
    defaults.network = options_.default_network;
    auto parsed = parse_create_request(
        request, defaults, [this](const std::string& name) { return template_definition(name); });
    // A runtime that cannot cap a sandbox's disk would accept disk_mb and not enforce it:
    // refused when asked for, and no cap reported. (An unknown runtime is refused later.)
    auto& config = parsed.config;
    if (auto* runtime = runtimes_.find(config.runtime_name); runtime && !runtime->caps_disk()) {
        if (request.contains("limits") && request["limits"].is_object() &&
            request["limits"].contains("disk_mb"))
            throw SandboxError(SandboxFault::invalid, "bad_request",
                               "limits.disk_mb is not enforced for the " + config.runtime_name +
                                   " runtime; leave it out",
                               "limits.disk_mb");
        config.limits.disk_mb = 0;
    }
    if (from_snapshot) config.from_snapshot = asked["snapshot"].get<std::string>();
    return parsed;
}

SandboxManager::Placement SandboxManager::placement_of(const nlohmann::json& request) const {
    auto parsed = parse_create(request);
    runtime_for(parsed.config.runtime_name);
    return {parsed.config.runtime_name, parsed.config.template_name};
}

std::vector<std::string> SandboxManager::runtime_names() const {
    std::vector<std::string> names;
    for (const auto* runtime : runtimes_.all()) names.emplace_back(runtime->name());
    return names;
}

std::shared_ptr<Sandbox> SandboxManager::create(const nlohmann::json& request,
                                                const std::string& id) {
    if (request.is_object() && request.contains("snapshot") && request["snapshot"].is_string()) {
        // Held until the sandbox stands on its own files: a delete meanwhile is a conflict.
        auto use = as_sandbox_error(
            [&] { return snapshots_->use(request["snapshot"].get<std::string>()); });
        return create_sandbox(request, id, use.copy_dir());
    }
    return create_sandbox(request, id, {});
}

std::shared_ptr<Sandbox> SandboxManager::create_sandbox(const nlohmann::json& request,
                                                        const std::string& id,
                                                        const std::filesystem::path& copy_dir) {
    auto [config, definition] = parse_create(request);
    runtime_for(config.runtime_name);  // an unknown runtime is invalid before anything else
    check_policy_references(config.network);
    if (!id.empty()) {
        static const std::string kHex = "0123456789abcdef";
        if (id.size() != 15 || id.rfind("sb-", 0) != 0 ||
            id.find_first_not_of(kHex, 3) != std::string::npos)
            throw SandboxError(SandboxFault::invalid, "bad_request",
                               "a sandbox id is sb- and 12 hex digits", "id");
        std::lock_guard lock(mutex_);
        if (sandboxes_.count(id))
            throw SandboxError(SandboxFault::conflict, "sandbox_exists",
                               "sandbox " + id + " exists already", "id");
    }
    // Counted as starting from here until it is registered (or given up): a pooled one's place
    // since take_pooled took it, a new one's from the capacity check on.
    struct StartingGuard {
        SandboxManager* m;
        bool held = false;
        std::uint64_t disk_mb = 0;
        ~StartingGuard() {
            if (!held) return;
            std::lock_guard lock(m->mutex_);
            --m->starting_;
            m->starting_disk_mb_ -= disk_mb;
        }
    } guard{this};
    std::shared_ptr<Sandbox> sandbox = copy_dir.empty() ? take_pooled(request, config) : nullptr;
    if (sandbox) {
        guard.held = true;
        ready_or_kill(*sandbox, config.ready);  // it was ready when pooled: quick
    } else {
        const std::uint64_t disk_mb = config.limits.disk_mb;
        // Outside the lock: a statvfs may wait on a slow disk.
        const std::uint64_t free_mb =
            options_.disk_overcommit > 0 && disk_mb ? free_disk_mb(options_.state_dir) : 0;
        // Pooled ones whose places (or disk promises) this create takes.
        std::vector<std::shared_ptr<Sandbox>> evicted;
        {
            std::lock_guard lock(mutex_);
            const auto places_full = [&] {
                return sandboxes_.size() + starting_ + pooled_count_locked() >=
                       options_.max_sandboxes;
            };
            while (places_full() || !disk_fits_locked(disk_mb, free_mb)) {
                auto one = take_evictable_locked();
                if (!one) break;
                evicted.push_back(std::move(one));
            }
            const auto refuse = [&](const std::function<void()>& raise) {
                for (auto& back : evicted)  // nothing was made: they wait on
                    pool_[{back->config().runtime_name, back->config().template_name}].push_back(
                        std::move(back));
                raise();
            };
            if (places_full())
                refuse([&] {
                    throw SandboxError(SandboxFault::over_capacity, "too_many_sandboxes",
                                       "this server runs at most " +
                                           std::to_string(options_.max_sandboxes) +
                                           " sandboxes; kill one first");
                });
            if (!disk_fits_locked(disk_mb, free_mb))
                refuse([&] {
                    check_disk_commitment(
                        {promised_disk_mb_locked(), disk_mb, free_mb, options_.disk_overcommit});
                });
            ++starting_;
            starting_disk_mb_ += disk_mb;
            guard.held = true;
            guard.disk_mb = disk_mb;
        }
        for (auto& one : evicted) {
            std::fprintf(stderr, "deskboxd: pooled sandbox %s ended to make room for a create\n",
                         one->id().c_str());
            one->shutdown(false);
        }
        sandbox = start_sandbox(request, config, definition, id, copy_dir);
        ready_or_kill(*sandbox, config.ready);
    }
    if (request.contains("record") && request["record"] != false)
        sandbox->media().start_recording(request["record"].is_object()
                                             ? read_recording_request(request["record"], "record")
                                             : RecordingRequest{});
    std::lock_guard lock(mutex_);
    sandboxes_[sandbox->id()] = sandbox;
    return sandbox;
}

std::shared_ptr<Sandbox> SandboxManager::start_sandbox(const nlohmann::json& request,
                                                       SandboxConfig config,
                                                       const nlohmann::json& definition,
                                                       const std::string& id,
                                                       const std::filesystem::path& copy_dir) {
    runtime::Runtime& runtime = runtime_for(config.runtime_name);
    auto rootfs = template_rootfs(config.template_name);
    try {
        runtime.check_template(rootfs);
    } catch (const runtime::RuntimeError& e) {
        throw SandboxError(SandboxFault::conflict, "template_not_built", e.what(), "template");
    }
    config.id = id.empty() ? "sb-" + random::hex(6) : id;
    runtime::SandboxSpec spec = spec_for(config, definition, runtime.agent_channel_arg());
    spec.template_rootfs = rootfs;
    spec.agent_dir = agent_dir_;
    spec.egress_ca = !options_.egress_ca_pem.empty();
    spec.state_root = options_.state_dir;
    auto volume_leases = acquire_volumes(config, runtime);
    for (const auto& lease : volume_leases)
        spec.volumes.push_back({lease.host_path(), lease.use().path, lease.use().read_only});

    config.recordings_dir = recordings_dir();
    auto sandbox =
        std::make_shared<Sandbox>(config, options_.state_dir / "audit" / (config.id + ".jsonl"));
    sandbox->attach_volumes(std::move(volume_leases));
    runtime::StartPhases phases;
    {
        runtime::PhaseClock clock(phases);
        // Containers: a user namespace with its own host ids, and the network namespace it
        // owns for the sandbox's network (runc joins both).
        std::unique_ptr<runtime::SandboxNamespaces> namespaces;
        if (runtime.needs_user_namespace() && options_.user_namespaces) {
            try {
                namespaces =
                    std::make_unique<runtime::SandboxNamespaces>(runtime::SandboxNamespaces::create(
                        namespaces_dir(config.id), host_id_slots_.acquire()));
            } catch (const runtime::RuntimeError& e) {
                throw SandboxError(SandboxFault::unavailable, "sandbox_start_failed", e.what());
            }
            spec.user_namespace = namespaces->user_path();
            spec.host_id_base = namespaces->host_base();
            clock.mark("namespaces");
        }
        auto net = make_network(config, namespaces ? namespaces->net_path().string() : "");
        clock.mark("network");
        sandbox->attach_namespaces(std::move(namespaces));
        spec.network = config.network.enabled();
        spec.attachment = attachment_for(net);
        sandbox->attach_network(std::move(net));
    }
    sandbox->set_start_phases(std::move(phases));
    sandbox->set_audit_listener(options_.audit_listener);
    sandbox->set_max_saved_lifetime(options_.max_timeout);
    sandbox->audit("create", request);
    const auto timeout = runtime.boot_timeout(options_.agent_timeout);
    if (!copy_dir.empty()) {
        boot_from_copy(*sandbox, runtime, spec, copy_dir, timeout);
    } else if (auto* template_snapshots = config.fast_start && spec.volumes.empty()
                                              ? runtime.template_snapshots()
                                              : nullptr) {
        const ReadyCondition template_ready = template_ready_condition(definition);
        sandbox->boot(
            [&]() -> std::unique_ptr<runtime::SandboxInstance> {
                // The template VM gets a NIC like its copies, on a network of its own that
                // reaches nothing.
                runtime::SandboxSpec template_spec = spec;
                if (spec.network) template_spec.attachment = throwaway_attachment();
                auto dir = template_snapshots->template_snapshot_for(
                    template_spec, [&](runtime::SandboxInstance& vm) {
                        wait_for_desktop(vm, timeout, template_ready);
                    });
                try {
                    return template_snapshots->restore_template_snapshot(spec, dir);
                } catch (const runtime::RuntimeError& e) {
                    // A template snapshot that does not load is dropped (the next create
                    // makes a new one); this create boots instead.
                    std::fprintf(stderr, "deskboxd: template snapshot %s unusable, removed: %s\n",
                                 dir.c_str(), e.what());
                    std::error_code ec;
                    std::filesystem::remove_all(dir, ec);
                    return runtime.start(spec);
                }
            },
            timeout, /*fresh_identity=*/true);
    } else {
        sandbox->boot([&] { return runtime.start(spec); }, timeout);
    }
    return sandbox;
}

nlohmann::json SandboxManager::change_network(Sandbox& sandbox, const NetworkChange& change) {
    return sandbox.change_network(change, [this](const network::NetworkPolicy& policy) {
        check_policy_references(policy, "rules");
    });
}

void SandboxManager::check_policy_references(const network::NetworkPolicy& policy,
                                             const std::string& field) const {
    for (const auto& name : policy.rules().secret_names())
        if (!secrets_->exists(name))
            throw SandboxError(SandboxFault::invalid, "secret_not_found",
                               "a rule names secret:" + name +
                                   ", which does not exist (set it with POST /v1/secrets)",
                               field);
    const auto& named = options_.network.named_egress_proxies;
    if (policy.proxy() && !named.count(*policy.proxy())) {
        std::string known;
        for (const auto& [name, proxy] : named) known += (known.empty() ? "" : ", ") + name;
        throw invalid_field(field == "rules" ? "proxy" : "network.proxy",
                            "no egress proxy is named '" + *policy.proxy() + "' (this server has " +
                                (known.empty() ? std::string("none") : known) + ")");
    }
}

std::vector<volumes::VolumeLease> SandboxManager::acquire_volumes(const SandboxConfig& config,
                                                                  const runtime::Runtime& runtime) {
    std::vector<volumes::VolumeLease> leases;
    if (config.volumes.empty()) return leases;
    const auto access = runtime.volume_access();
    if (access == runtime::VolumeAccess::none)
        throw SandboxError(SandboxFault::invalid, "unsupported",
                           std::string("the ") + runtime.name() + " runtime cannot mount volumes",
                           "volumes");
    for (std::size_t i = 0; i < config.volumes.size(); ++i) {
        const auto& want = config.volumes[i];
        try {
            leases.push_back(
                volumes_->acquire(want.name, {config.id, want.path, want.read_only,
                                              access == runtime::VolumeAccess::disk_image}));
        } catch (const volumes::VolumeError& e) {
            const SandboxError error = to_sandbox_error(e);
            throw SandboxError(error.fault(), error.code(), error.what(),
                               "volumes[" + std::to_string(i) + "]." + e.field());
        }
    }
    return leases;
}

std::filesystem::path SandboxManager::namespaces_dir(const std::string& id) const {
    return options_.state_dir / "namespaces" / id;
}

std::shared_ptr<network::SandboxNetwork> SandboxManager::make_network(
    const SandboxConfig& config, const std::string& existing_netns) {
    const auto attach = runtime_for(config.runtime_name).network_attach();
    if (attach == runtime::NetworkAttach::none) return nullptr;
    const bool microvm = attach == runtime::NetworkAttach::tap;
    // A microVM without a network has no NIC and nothing on the host; a container always has
    // a namespace of ours (loopback only when off), which exposed ports reach it through.
    if (microvm && !config.network.enabled()) return nullptr;
    network::SandboxNetwork::Options o;
    o.sandbox_id = config.id;
    o.policy = config.network;
    o.kind =
        microvm ? network::SandboxNetwork::Kind::microvm : network::SandboxNetwork::Kind::container;
    o.egress_kbps = config.egress_kbps;
    (microvm ? o.existing_router : o.existing_netns) = existing_netns;
    try {
        return network_->create(std::move(o));
    } catch (const std::exception& e) {
        throw SandboxError(SandboxFault::failed, "network_setup_failed",
                           "cannot set up the sandbox's network: " + std::string(e.what()),
                           "network");
    }
}

runtime::NetworkAttachment SandboxManager::attachment_for(
    const std::shared_ptr<network::SandboxNetwork>& net) {
    runtime::NetworkAttachment a;
    if (!net) return a;
    if (net->kind() == network::SandboxNetwork::Kind::container) {
        a.netns_path = net->container_netns_path();
        a.resolv_conf = net->resolv_conf();
    } else if (net->has_interface()) {
        std::weak_ptr<network::SandboxNetwork> weak = net;
        a.open_tap = [weak] {
            auto alive = weak.lock();
            if (!alive) throw network::NetworkError("the sandbox's network is gone");
            return alive->open_tap();
        };
    }
    return a;
}

runtime::NetworkAttachment SandboxManager::throwaway_attachment() {
    auto made = std::make_shared<std::shared_ptr<network::SandboxNetwork>>();
    runtime::NetworkAttachment a;
    a.open_tap = [this, made] {
        if (!*made) {
            network::SandboxNetwork::Options o;
            o.sandbox_id = "template";
            o.policy = network::NetworkPolicy::parse({{"allow", nlohmann::json::array()}});
            o.kind = network::SandboxNetwork::Kind::microvm;
            *made = network_->create(std::move(o));
        }
        return (*made)->open_tap();
    };
    return a;
}

std::shared_ptr<Sandbox> SandboxManager::find(const std::string& id) const {
    std::lock_guard lock(mutex_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end())
        throw SandboxError(SandboxFault::not_found, "not_found", "no sandbox '" + id + "'", "id");
    return it->second;
}

std::vector<std::shared_ptr<Sandbox>> SandboxManager::list() const {
    std::lock_guard lock(mutex_);
    std::vector<std::shared_ptr<Sandbox>> out;
    for (auto& [id, s] : sandboxes_) out.push_back(s);
    return out;
}

nlohmann::json SandboxManager::kill(const std::string& id) {
    std::shared_ptr<Sandbox> sandbox;
    {
        std::lock_guard lock(mutex_);
        auto it = sandboxes_.find(id);
        if (it == sandboxes_.end())
            throw SandboxError(SandboxFault::not_found, "not_found", "no sandbox '" + id + "'",
                               "id");
        sandbox = it->second;
        sandboxes_.erase(it);
    }
    sandbox->audit("kill", nlohmann::json::object());
    sandbox->kill();
    nlohmann::json described = sandbox->describe(false);
    sandbox.reset();
    // Its frames and encoders were freed on whichever threads ran them; give the pages
    // back, or a burst of sandboxes leaves the server holding their peak for good.
    ::malloc_trim(0);
    return described;
}

void SandboxManager::set_timeout(const std::string& id, const nlohmann::json& body) {
    auto sandbox = find(id);
    RequestReader reader(body);
    const auto s = reader.integer("timeout_s", 1, options_.max_timeout.count());
    if (!s) throw invalid_field("timeout_s", "expected an integer number of seconds");
    reader.finish();
    sandbox->set_timeout(std::chrono::seconds(*s));
    sandbox->audit("timeout", body);
}

std::map<std::string, std::size_t> SandboxManager::count_by_state() const {
    std::map<std::string, std::size_t> counts = {
        {"starting", 0}, {"running", 0}, {"paused", 0}, {"error", 0}};
    std::lock_guard lock(mutex_);
    counts["starting"] = starting_;
    counts["pooled"] = pooled_count_locked();
    for (auto& [id, s] : sandboxes_) ++counts[to_string(s->status())];
    return counts;
}

void SandboxManager::reaper_loop() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
        reaper_wake_.wait_for(lock, std::chrono::milliseconds(500));
        if (stopping_) break;
        auto now = SystemClock::now();
        std::vector<std::shared_ptr<Sandbox>> expired;
        for (auto& [id, s] : sandboxes_)
            if (s->expires_at() <= now) expired.push_back(s);
        lock.unlock();
        for (auto& s : list()) s->check_health();
        for (auto& s : expired) {
            if (s->config().pause_on_timeout && s->status() == SandboxStatus::running) {
                try {
                    // Saved to disk where the runtime can: a paused sandbox then holds no memory.
                    const bool snapshot = s->can_snapshot();
                    s->pause(snapshot, PauseReason::timeout);
                    // pause() gave it the paused ones' long wait, with the state.
                    s->audit("timeout", {{"action", snapshot ? "snapshot" : "pause"}});
                } catch (const std::exception&) {
                }
            } else if (!s->config().pause_on_timeout || s->status() != SandboxStatus::paused) {
                s->audit("timeout", {{"action", "kill"}});
                try {
                    kill(s->id());
                } catch (const SandboxError&) {
                }
            }
        }
        lock.lock();
    }
}

}  // namespace deskbox::server
