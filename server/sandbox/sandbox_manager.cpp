#include "server/sandbox/sandbox_manager.hpp"

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

#include "common/child_process.hpp"
#include "common/random.hpp"
#include "server/runtime/container/mounts.hpp"

namespace deskbox::server {
namespace {

// The template VM is saved once its desktop is up: the agent answered and the screen
// arrived. The host's session ends before the save (restored copies get their own).
void wait_for_desktop(runtime::SandboxInstance& sandbox, std::chrono::milliseconds timeout) {
    UniqueFd fd = sandbox.connect_agent(timeout);
    int raw = fd.release();
    auto channel = std::make_unique<protocol::Channel>(raw, raw);
    protocol::handshake(*channel, "host");
    protocol::RpcClient client(std::move(channel));
    client.start();
    client.call("screen.sync", {{"settle_ms", 500}, {"max_ms", 5000}}, {},
                std::chrono::seconds(60));
    client.close();
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
    const auto all = runtimes_.all();
    if (options_.user_namespaces &&
        std::any_of(all.begin(), all.end(),
                    [](const runtime::Runtime* r) { return r->needs_user_namespace(); })) {
        if (auto problem = runtime::host_id_range_problem(options_.host_ids); !problem.empty())
            throw std::runtime_error("cannot give sandboxes their own host ids: " + problem);
        runtime::open_the_way_to_sandboxes(options_.state_dir);
    }
    if (!options_.microvm_pool.empty()) {
        auto* pool_runtime = runtimes_.find(kPoolRuntime);
        if (!pool_runtime || !pool_runtime->template_snapshots())
            throw std::runtime_error(std::string("a pool needs the ") + kPoolRuntime +
                                     " runtime with template snapshots");
    }
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
    // Set before any thread starts: setenv is not safe next to concurrent getenv.
    if (!options_.template_cache.empty())
        ::setenv("DESKBOX_CACHE", options_.template_cache.c_str(), 1);
    network_ = std::make_unique<network::NetworkService>(options_.network);
    reaper_ = std::thread([this] { reaper_loop(); });
    if (!options_.microvm_pool.empty()) pool_filler_ = std::thread([this] { pool_loop(); });
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

std::vector<std::string> SandboxManager::adopt_each(const std::vector<std::string>& ids,
                                                    const std::string& runtime_name,
                                                    std::chrono::milliseconds reattach_timeout,
                                                    const AdoptOne& take) {
    std::vector<std::string> adopted;
    for (const auto& id : ids) {
        const auto audit_path = options_.state_dir / "audit" / (id + ".jsonl");
        nlohmann::json record;
        {
            std::ifstream in(Sandbox::record_path(options_.state_dir, id));
            if (!in) continue;  // never ran (a crash during its start): a plain leftover
            record = nlohmann::json::parse(in, nullptr, false);
        }
        try {
            if (!record.is_object() || record.value("runtime", "") != runtime_name)
                throw std::runtime_error("its server record is not a " + runtime_name + "'s");
            SandboxConfig net_config;
            net_config.id = id;
            net_config.runtime_name = runtime_name;
            net_config.network = network::NetworkPolicy::parse(record.at("network"));
            net_config.egress_kbps = record.value("egress_kbps", std::uint64_t{0});
            auto sandbox = take(id, record, net_config, audit_path);
            sandbox->set_max_saved_lifetime(options_.max_timeout);
            // A working agent answers soon; a dead one must not hold up the start for long.
            // On failure the sandbox's destructor kills it: nothing is left to clean.
            sandbox->reattach(reattach_timeout);
            sandbox->audit("adopt",
                           {{"reason", "server restart"}, {"state", to_string(sandbox->status())}});
            std::lock_guard lock(mutex_);
            sandboxes_[id] = std::move(sandbox);
            adopted.push_back(id);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "deskboxd: cannot adopt %s %s, removing it: %s\n",
                         runtime_name.c_str(), id.c_str(), e.what());
            Sandbox::append_audit(audit_path, id, "cleanup",
                                  {{"reason", std::string("cannot adopt: ") + e.what()}});
        }
    }
    return adopted;
}

std::vector<std::string> SandboxManager::adopt_running() {
    std::vector<std::string> adopted;
    for (auto* runtime : runtimes_.all()) {
        const std::string name = runtime->name();
        auto* adoption = runtime->running_adoption();
        if (!adoption) continue;  // this runtime's sandboxes end with their server
        const auto boot_timeout = runtime->boot_timeout(options_.agent_timeout);
        auto ids = adopt_each(
            adoption->adoption_candidates(options_.state_dir), name,
            std::min(boot_timeout, adoption->reconnect_timeout()),
            [&](const std::string& id, const nlohmann::json& record,
                const SandboxConfig& net_config, const std::filesystem::path& audit_path) {
                // Nobody holds its tokens: the new server's pool makes its own.
                if (record.value("pooled", false))
                    throw std::runtime_error("it was made for the pool and never handed out");
                auto instance = adoption->adopt_left_running(
                    options_.state_dir, id, runtime::limits_from_json(record.at("limits")));
                std::unique_ptr<runtime::SandboxNamespaces> namespaces;
                if (record.contains("host_id_base"))
                    namespaces = std::make_unique<runtime::SandboxNamespaces>(
                        runtime::SandboxNamespaces::open(
                            namespaces_dir(id), host_id_slots_.claim(record["host_id_base"])));
                // Its network lives on: a container's own namespace, or the router a microVM's
                // tap kept alive. The new network takes it over as it is.
                UniqueFd netns = instance->adopted_network_namespace();
                auto net = make_network(
                    net_config, netns ? "/proc/self/fd/" + std::to_string(netns.get()) : "");
                if (auto* snapshots = instance->snapshots())
                    snapshots->set_network_attachment(attachment_for(net));  // a later restore's
                auto sandbox =
                    Sandbox::adopt_running(record, std::move(instance), audit_path, boot_timeout);
                sandbox->attach_network(std::move(net));
                sandbox->attach_namespaces(std::move(namespaces));
                return sandbox;
            });
        adopted.insert(adopted.end(), ids.begin(), ids.end());
    }
    return adopted;
}

std::vector<std::string> SandboxManager::adopt_snapshots() {
    std::vector<std::string> adopted;
    for (auto* runtime : runtimes_.all()) {
        const std::string name = runtime->name();
        auto* adoption = runtime->snapshot_adoption();
        if (!adoption) continue;
        for (const auto& id : adoption->list_snapshotted(options_.state_dir)) {
            std::unique_ptr<runtime::SandboxInstance> instance;
            try {
                instance = adoption->adopt_saved(options_.state_dir, id);
                std::ifstream in(Sandbox::record_path(options_.state_dir, id));
                if (!in) throw std::runtime_error("no server record next to the snapshot");
                auto record = nlohmann::json::parse(in);
                // The network of the last server went with it: a new one, same policy.
                SandboxConfig net_config;
                net_config.id = id;
                net_config.runtime_name = name;
                net_config.network = network::NetworkPolicy::parse(record.at("network"));
                net_config.egress_kbps = record.value("egress_kbps", std::uint64_t{0});
                auto net = make_network(net_config);
                if (auto* snapshots = instance->snapshots())
                    snapshots->set_network_attachment(attachment_for(net));
                auto sandbox = Sandbox::adopt(record, std::move(instance),
                                              options_.state_dir / "audit" / (id + ".jsonl"),
                                              runtime->boot_timeout(options_.agent_timeout));
                sandbox->attach_network(std::move(net));
                sandbox->set_max_saved_lifetime(options_.max_timeout);
                sandbox->audit("adopt", {{"reason", "server restart"}});
                std::lock_guard lock(mutex_);
                sandboxes_[id] = std::move(sandbox);
                adopted.push_back(id);
            } catch (const std::exception& e) {
                // Unusable: removed like any leftover (the instance's destructor tears it down).
                std::fprintf(stderr, "deskboxd: cannot adopt snapshot %s, removing it: %s\n",
                             id.c_str(), e.what());
                if (instance) {
                    instance.reset();
                } else {
                    try {
                        runtime->cleanup_leftover(options_.state_dir, id);
                    } catch (const std::exception&) {
                    }
                }
            }
        }
    }
    return adopted;
}

std::vector<std::string> SandboxManager::clean_leftovers() {
    std::vector<std::string> cleaned;
    for (auto* runtime : runtimes_.all())
        for (const auto& id : runtime->list_leftovers(options_.state_dir)) {
            try {
                runtime->cleanup_leftover(options_.state_dir, id);
                cleaned.push_back(id);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "deskboxd: could not clean leftover %s: %s\n", id.c_str(),
                             e.what());
            }
        }
    // Pinned namespaces of sandboxes that were not adopted (their processes are gone now).
    std::set<std::string> alive;
    {
        std::lock_guard lock(mutex_);
        for (const auto& [id, sandbox] : sandboxes_) alive.insert(id);
    }
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(options_.state_dir / "namespaces", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
        const std::string id = it->path().filename();
        if (alive.count(id)) continue;
        try {
            for (const auto& mount : runtime::mounts_under(it->path())) runtime::unmount_all(mount);
            std::filesystem::remove_all(it->path());
        } catch (const std::exception& e) {
            std::fprintf(stderr, "deskboxd: could not remove the namespaces of %s: %s\n",
                         id.c_str(), e.what());
        }
    }
    return cleaned;
}

runtime::Runtime& SandboxManager::runtime_for(const std::string& name) const {
    if (auto* runtime = runtimes_.find(name)) return *runtime;
    throw bad_request("runtime", "unknown runtime '" + name + "' (" + runtimes_.names() + ")");
}

std::vector<std::string> SandboxManager::template_names() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (auto& e : std::filesystem::directory_iterator(options_.images_dir / "templates", ec))
        if (std::filesystem::exists(e.path() / "template.json"))
            names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
}

nlohmann::json SandboxManager::template_definition(const std::string& name) const {
    auto path = options_.images_dir / "templates" / name / "template.json";
    std::ifstream in(path);
    if (!in) throw bad_request("template", "unknown template '" + name + "'");
    return nlohmann::json::parse(in);
}

std::filesystem::path SandboxManager::template_rootfs(const std::string& name) const {
    {
        // Asking the build tool costs a Python start per create. A definition edited while the
        // server runs takes effect after a restart, or once its old build is pruned.
        std::lock_guard lock(mutex_);
        auto it = rootfs_cache_.find(name);
        if (it != rootfs_cache_.end() && std::filesystem::exists(it->second / "usr"))
            return it->second;
    }
    // The build tool owns the content hash; ask it where the rootfs is.
    std::vector<std::string> argv = {"python3", (options_.images_dir / "build.py").string(),
                                     "--print-path", name};
    auto r = run_process(argv, std::chrono::seconds(30));
    std::string path = r.out;
    while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
    if (auto nl = path.rfind('\n'); nl != std::string::npos) path = path.substr(nl + 1);
    if (r.status.exit_code != 0 || path.empty())
        throw ApiError(500, "template_error", "template '" + name + "': " + r.err);
    if (!std::filesystem::exists(std::filesystem::path(path) / "usr"))
        throw ApiError(409, "template_not_built",
                       "template '" + name + "' is not built; run: images/build.py " + name,
                       "template");
    std::lock_guard lock(mutex_);
    rootfs_cache_[name] = path;
    return path;
}

CreateRequest SandboxManager::parse_create(const nlohmann::json& request) const {
    CreateDefaults defaults;
    defaults.template_name = options_.default_template;
    defaults.runtime_name = options_.default_runtime;
    defaults.timeout = options_.default_timeout;
    defaults.max_timeout = options_.max_timeout;
    defaults.disk_mb = options_.default_disk_mb;
    defaults.network = options_.default_network;
    return parse_create_request(
        request, defaults, [this](const std::string& name) { return template_definition(name); });
}

std::shared_ptr<Sandbox> SandboxManager::create(const nlohmann::json& request) {
    auto [config, definition] = parse_create(request);
    runtime_for(config.runtime_name);  // an unknown runtime is a 400 before anything else
    std::shared_ptr<Sandbox> sandbox = take_pooled(request, config);
    if (!sandbox) {
        {
            std::lock_guard lock(mutex_);
            if (sandboxes_.size() + starting_ >= options_.max_sandboxes)
                throw ApiError(429, "too_many_sandboxes",
                               "this server runs at most " +
                                   std::to_string(options_.max_sandboxes) +
                                   " sandboxes; kill one first");
            ++starting_;
        }
        struct StartingGuard {
            SandboxManager* m;
            ~StartingGuard() {
                std::lock_guard lock(m->mutex_);
                --m->starting_;
            }
        } guard{this};
        sandbox = start_sandbox(request, config, definition);
    }
    if (request.contains("record") && request["record"] != false)
        sandbox->start_recording(request["record"].is_object() ? request["record"]
                                                               : nlohmann::json::object());
    std::lock_guard lock(mutex_);
    sandboxes_[sandbox->id()] = sandbox;
    return sandbox;
}

std::shared_ptr<Sandbox> SandboxManager::start_sandbox(const nlohmann::json& request,
                                                       SandboxConfig config,
                                                       const nlohmann::json& definition) {
    runtime::Runtime& runtime = runtime_for(config.runtime_name);
    auto rootfs = template_rootfs(config.template_name);
    try {
        runtime.check_template(rootfs);
    } catch (const runtime::RuntimeError& e) {
        throw ApiError(409, "template_not_built", e.what(), "template");
    }
    config.id = "sb-" + random::hex(6);
    runtime::SandboxSpec spec;
    spec.id = config.id;
    spec.template_rootfs = rootfs;
    spec.agent_dir = agent_dir_;
    spec.width = config.width;
    spec.height = config.height;
    spec.dpi = config.dpi;
    spec.limits = config.limits;
    spec.hostname = config.id;
    spec.state_root = options_.state_dir;
    spec.env = {{"HOME", "/home/user"}, {"USER", "user"}, {"LANG", "C.UTF-8"}};
    if (definition.contains("env"))
        for (auto& [k, v] : definition["env"].items()) spec.env[k] = v;
    for (auto& [k, v] : config.env) spec.env[k] = v;
    spec.entry = {"/opt/deskbox/bin/deskbox-agent",
                  "--init",
                  "--channel",
                  runtime.agent_channel_arg(),
                  "--size",
                  std::to_string(config.width) + "x" + std::to_string(config.height),
                  "--dpi",
                  std::to_string(config.dpi)};
    if (definition.contains("session")) {
        const auto& s = definition["session"];
        if (s.contains("window_manager")) {
            std::string wm;
            for (auto& w : s["window_manager"])
                wm += (wm.empty() ? "" : " ") + w.get<std::string>();
            spec.entry.insert(spec.entry.end(), {"--wm", wm.empty() ? "none" : wm});
        }
        for (auto& app : s.value("autostart", nlohmann::json::array())) {
            std::string line;
            for (auto& w : app) line += (line.empty() ? "" : " ") + w.get<std::string>();
            spec.entry.insert(spec.entry.end(), {"--autostart", line});
        }
    }
    for (auto& [k, v] : spec.env) spec.entry.insert(spec.entry.end(), {"--env", k + "=" + v});
    // images/build.py checked the type; a hand-edited definition is read leniently.
    if (auto security = definition.find("security");
        security != definition.end() && security->is_object())
        spec.nested_user_namespaces = security->value("nested_user_namespaces", false) == true;

    config.recordings_dir = recordings_dir();
    auto sandbox =
        std::make_shared<Sandbox>(config, options_.state_dir / "audit" / (config.id + ".jsonl"));
    {
        // Containers: a user namespace with its own host ids, and the network namespace it
        // owns for the sandbox's network (runc joins both).
        std::unique_ptr<runtime::SandboxNamespaces> namespaces;
        if (runtime.needs_user_namespace() && options_.user_namespaces) {
            try {
                namespaces =
                    std::make_unique<runtime::SandboxNamespaces>(runtime::SandboxNamespaces::create(
                        namespaces_dir(config.id), host_id_slots_.acquire()));
            } catch (const runtime::RuntimeError& e) {
                throw ApiError(503, "sandbox_start_failed", e.what());
            }
            spec.user_namespace = namespaces->user_path();
            spec.host_id_base = namespaces->host_base();
        }
        auto net = make_network(config, namespaces ? namespaces->net_path().string() : "");
        sandbox->attach_namespaces(std::move(namespaces));
        spec.network = config.network.enabled();
        spec.attachment = attachment_for(net);
        sandbox->attach_network(std::move(net));
    }
    sandbox->set_max_saved_lifetime(options_.max_timeout);
    sandbox->audit("create", request);
    const auto timeout = runtime.boot_timeout(options_.agent_timeout);
    if (auto* template_snapshots = config.fast_start ? runtime.template_snapshots() : nullptr) {
        sandbox->boot(
            [&]() -> std::unique_ptr<runtime::SandboxInstance> {
                // The template VM gets a NIC like its copies, on a network of its own that
                // reaches nothing.
                runtime::SandboxSpec template_spec = spec;
                if (spec.network) template_spec.attachment = throwaway_attachment();
                auto dir = template_snapshots->template_snapshot_for(
                    template_spec,
                    [&](runtime::SandboxInstance& vm) { wait_for_desktop(vm, timeout); });
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
        throw ApiError(500, "network_setup_failed",
                       "cannot set up the sandbox's network: " + std::string(e.what()), "network");
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

std::size_t SandboxManager::pooled_count_locked() const {
    std::size_t n = 0;
    for (const auto& [name, ready] : pool_) n += ready.size();
    return n;
}

std::shared_ptr<Sandbox> SandboxManager::take_pooled(const nlohmann::json& request,
                                                     const SandboxConfig& config) {
    // Pooled sandboxes run the template's defaults; these fields change nothing inside.
    static const std::set<std::string> kPoolable = {"template",       "runtime",    "timeout_s",
                                                    "metadata",       "on_timeout", "record",
                                                    "api_resolution", "fast_start"};
    // They were restored from template snapshots: a create that asks for a boot takes none.
    if (!config.fast_start) return nullptr;
    for (auto& [key, value] : request.items())
        if (!kPoolable.count(key)) return nullptr;
    while (true) {
        std::shared_ptr<Sandbox> sandbox;
        {
            std::lock_guard lock(mutex_);
            auto it = pool_.find({config.runtime_name, config.template_name});
            if (it == pool_.end() || it->second.empty()) return nullptr;
            sandbox = std::move(it->second.front());
            it->second.erase(it->second.begin());
        }
        pool_wake_.notify_all();  // refill
        if (sandbox->check_health() == SandboxStatus::running) {
            sandbox->claim(config);
            sandbox->audit("create", request);
            return sandbox;
        }
        std::fprintf(stderr, "deskboxd: pooled sandbox %s broke (%s); dropped\n",
                     sandbox->id().c_str(), sandbox->error_reason().c_str());
        sandbox->kill();
    }
}

void SandboxManager::pool_loop() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
        std::string wanted;
        for (const auto& [name, size] : options_.microvm_pool)
            if (pool_[{kPoolRuntime, name}].size() < size &&
                sandboxes_.size() + starting_ + pooled_count_locked() < options_.max_sandboxes) {
                wanted = name;
                break;
            }
        if (wanted.empty()) {
            pool_wake_.wait_for(lock, std::chrono::seconds(2));
            continue;
        }
        ++starting_;
        lock.unlock();
        std::shared_ptr<Sandbox> sandbox;
        try {
            nlohmann::json request = {{"template", wanted}, {"runtime", kPoolRuntime}};
            auto [config, definition] = parse_create(request);
            config.pooled = true;
            sandbox = start_sandbox(request, std::move(config), definition);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "deskboxd: filling the %s pool: %s\n", wanted.c_str(), e.what());
        }
        lock.lock();
        --starting_;
        if (!sandbox) {
            pool_wake_.wait_for(lock, std::chrono::seconds(10), [this] { return stopping_; });
        } else if (stopping_) {
            lock.unlock();
            sandbox->kill();
            lock.lock();
        } else {
            pool_[{kPoolRuntime, wanted}].push_back(std::move(sandbox));
        }
    }
}

std::shared_ptr<Sandbox> SandboxManager::find(const std::string& id) const {
    std::lock_guard lock(mutex_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) throw ApiError(404, "not_found", "no sandbox '" + id + "'", "id");
    return it->second;
}

std::vector<std::shared_ptr<Sandbox>> SandboxManager::list() const {
    std::lock_guard lock(mutex_);
    std::vector<std::shared_ptr<Sandbox>> out;
    for (auto& [id, s] : sandboxes_) out.push_back(s);
    return out;
}

void SandboxManager::kill(const std::string& id) {
    std::shared_ptr<Sandbox> sandbox;
    {
        std::lock_guard lock(mutex_);
        auto it = sandboxes_.find(id);
        if (it == sandboxes_.end())
            throw ApiError(404, "not_found", "no sandbox '" + id + "'", "id");
        sandbox = it->second;
        sandboxes_.erase(it);
    }
    sandbox->audit("kill", nlohmann::json::object());
    sandbox->kill();
    sandbox.reset();
    // Its frames and encoders were freed on whichever threads ran them; give the pages
    // back, or a burst of sandboxes leaves the server holding their peak for good.
    ::malloc_trim(0);
}

void SandboxManager::set_timeout(const std::string& id, const nlohmann::json& body) {
    auto sandbox = find(id);
    if (!body.is_object() || !body.contains("timeout_s") || !body["timeout_s"].is_number_integer())
        throw bad_request("timeout_s", "expected an integer number of seconds");
    long long s = body["timeout_s"];
    if (s < 1 || s > options_.max_timeout.count())
        throw bad_request("timeout_s",
                          "must be in 1.." + std::to_string(options_.max_timeout.count()));
    for (auto& [k, v] : body.items())
        if (k != "timeout_s") throw bad_request(k, "unknown field");
    sandbox->set_timeout(std::chrono::seconds(s));
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
                    s->pause(snapshot);
                    s->audit("timeout", {{"action", snapshot ? "snapshot" : "pause"}});
                    s->set_timeout(options_.max_timeout);  // paused ones wait for a resume or kill
                } catch (const std::exception&) {
                }
            } else if (!s->config().pause_on_timeout || s->status() != SandboxStatus::paused) {
                s->audit("timeout", {{"action", "kill"}});
                try {
                    kill(s->id());
                } catch (const ApiError&) {
                }
            }
        }
        lock.lock();
    }
}

}  // namespace deskbox::server
