// SandboxManager at start: taking over the sandboxes a previous deskboxd left running or saved
// to snapshots (same ids, tokens and deadlines), and removing what a crashed one left behind.
#include "server/sandbox/sandbox_manager.hpp"

#include <cstdio>
#include <fstream>

#include "server/runtime/container/mounts.hpp"

namespace deskbox::server {

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
            sandbox->set_audit_listener(options_.audit_listener);
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
                // Its volumes stayed mounted (or its disks attached): new leases take them over.
                sandbox->attach_volumes(acquire_volumes(sandbox->config(), *runtime));
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
                // A saved microVM's disks include its volumes: held for its resume.
                sandbox->attach_volumes(acquire_volumes(sandbox->config(), *runtime));
                sandbox->set_audit_listener(options_.audit_listener);
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
    // Volumes the previous server left mounted for sandboxes that were not adopted.
    volumes_->release_unused();
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

}  // namespace deskbox::server
