// SandboxManager's pool: sandboxes of a template started ahead of time to a ready desktop, so a
// create that fits one takes it instead of waiting for a start.
//  - --microvm-pool: microVMs restored from the template snapshot; a create that asks for
//    nothing but the template's defaults takes one (fields that change nothing inside).
//  - --container-pool: runc containers. A create fits one when everything fixed at start is
//    the pooled one's (resolution, dpi, env, limits, no volumes, VNC, network on or off); the
//    network policy and egress limit, timeout, metadata, API resolution and readiness are
//    applied at the claim. Pooled containers wait with a network that allows nothing, so a
//    desktop nobody claimed yet reaches nowhere.
// Identity: a pooled sandbox's id, hostname (its id), machine-id and tokens were made for it
// alone and never shown to anyone before the claim; the tokens are drawn again at the claim.
// Capacity: pooled sandboxes hold places of max_sandboxes and disk commitment like any other;
// a create that finds the server full while some wait ends one (take_evictable_locked) rather
// than refusing.
#include "server/sandbox/sandbox_manager.hpp"

#include <cstdio>
#include <set>

#include "server/runtime/container/runtime_state.hpp"
#include "server/sandbox/disk_commitment.hpp"

namespace deskbox::server {

std::size_t SandboxManager::pooled_count_locked() const {
    std::size_t n = 0;
    for (const auto& [name, ready] : pool_) n += ready.size();
    return n;
}

std::size_t SandboxManager::free_places_locked() const {
    const std::size_t used = sandboxes_.size() + starting_ + pooled_count_locked();
    return used < options_.max_sandboxes ? options_.max_sandboxes - used : 0;
}

std::uint64_t SandboxManager::promised_disk_mb_locked() const {
    std::uint64_t promised = starting_disk_mb_;
    for (const auto& [id, sandbox] : sandboxes_) promised += sandbox->config().limits.disk_mb;
    for (const auto& [key, ready] : pool_)
        for (const auto& sandbox : ready) promised += sandbox->config().limits.disk_mb;
    return promised;
}

bool SandboxManager::disk_fits_locked(std::uint64_t disk_mb, std::uint64_t free_mb) const {
    try {
        check_disk_commitment(
            {promised_disk_mb_locked(), disk_mb, free_mb, options_.disk_overcommit});
        return true;
    } catch (const SandboxError&) {
        return false;
    }
}

bool SandboxManager::fits_pool(const nlohmann::json& request, const SandboxConfig& asked,
                               const SandboxConfig& pooled) const {
    if (asked.runtime_name != runtime::kContainerRuntimeName) {
        // Pooled microVMs run the template's defaults; these fields change nothing inside.
        static const std::set<std::string> kPoolable = {
            "template", "runtime",        "timeout_s",  "metadata", "on_timeout",
            "record",   "api_resolution", "fast_start", "ready",    "auto_resume"};
        // They were restored from template snapshots: a create that asks for a boot takes none.
        if (!asked.fast_start) return false;
        for (auto& [key, value] : request.items())
            if (!kPoolable.count(key)) return false;
        return true;
    }
    // What the container's processes, mounts and cgroup were started with.
    return asked.width == pooled.width && asked.height == pooled.height &&
           asked.dpi == pooled.dpi && asked.env == pooled.env &&
           runtime::limits_to_json(asked.limits) == runtime::limits_to_json(pooled.limits) &&
           asked.volumes.empty() && pooled.volumes.empty() && asked.vnc == pooled.vnc &&
           asked.workdir == pooled.workdir && asked.from_snapshot.empty() &&
           asked.network.enabled() == pooled.network.enabled();
}

std::shared_ptr<Sandbox> SandboxManager::take_pooled(const nlohmann::json& request,
                                                     const SandboxConfig& config) {
    while (true) {
        std::shared_ptr<Sandbox> sandbox;
        {
            std::lock_guard lock(mutex_);
            auto it = pool_.find({config.runtime_name, config.template_name});
            // Every member of one pool was made from the same request: the first answers for all.
            if (it == pool_.end() || it->second.empty() ||
                !fits_pool(request, config, it->second.front()->config()))
                return nullptr;
            sandbox = std::move(it->second.front());
            it->second.erase(it->second.begin());
            // Its place is this create's now: held as starting until the create registers it,
            // so the refill never takes it.
            ++starting_;
        }
        pool_wake_.notify_all();  // refill
        if (sandbox->check_health() == SandboxStatus::running) {
            try {
                sandbox->claim(config);
                sandbox->audit("create", request);
                return sandbox;  // its place stays counted as starting until create registers it
            } catch (const std::exception& e) {
                std::fprintf(stderr, "deskboxd: claiming pooled sandbox %s: %s; dropped\n",
                             sandbox->id().c_str(), e.what());
            }
        } else {
            std::fprintf(stderr, "deskboxd: pooled sandbox %s broke (%s); dropped\n",
                         sandbox->id().c_str(), sandbox->error_reason().c_str());
        }
        sandbox->kill();
        std::lock_guard lock(mutex_);
        --starting_;
    }
}

std::shared_ptr<Sandbox> SandboxManager::take_evictable_locked() {
    // The fullest pool gives one up: the others keep what they hold.
    std::vector<std::shared_ptr<Sandbox>>* fullest = nullptr;
    for (auto& [key, ready] : pool_)
        if (!ready.empty() && (!fullest || ready.size() > fullest->size())) fullest = &ready;
    if (!fullest) return nullptr;
    auto evicted = std::move(fullest->back());
    fullest->pop_back();
    return evicted;
}

std::shared_ptr<Sandbox> SandboxManager::make_pooled(const PoolTarget& target) {
    try {
        nlohmann::json request = {{"template", target.template_name}, {"runtime", target.runtime}};
        auto [config, definition] = parse_create(request);
        config.pooled = true;
        // A container waits reaching nothing; the claim applies the create's policy. (A pooled
        // microVM keeps the server's default: what its template snapshot's copies get.)
        if (target.runtime == runtime::kContainerRuntimeName && config.network.enabled())
            config.network = network::NetworkPolicy::parse({{"allow", nlohmann::json::array()}});
        const ReadyCondition ready = config.ready;  // the template's
        auto sandbox = start_sandbox(request, std::move(config), definition);
        try {
            sandbox->wait_ready(ready);
        } catch (...) {
            sandbox->kill();
            throw;
        }
        return sandbox;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deskboxd: filling the %s pool of %s: %s\n",
                     target.template_name.c_str(), target.runtime.c_str(), e.what());
        return nullptr;
    }
}

void SandboxManager::pool_loop() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
        // Outside the lock: a statvfs may wait on a slow disk.
        lock.unlock();
        const std::uint64_t free_mb = options_.disk_overcommit > 0 && options_.default_disk_mb
                                          ? free_disk_mb(options_.state_dir)
                                          : 0;
        lock.lock();
        if (stopping_) break;
        const PoolTarget* wanted = nullptr;
        // A pooled sandbox promises the default disk cap like any create (disk_commitment.hpp).
        if (free_places_locked() > 0 && disk_fits_locked(options_.default_disk_mb, free_mb))
            for (const auto& target : pool_targets_)
                if (pool_[{target.runtime, target.template_name}].size() < target.size) {
                    wanted = &target;
                    break;
                }
        if (!wanted) {
            pool_wake_.wait_for(lock, std::chrono::seconds(2));
            continue;
        }
        ++starting_;
        lock.unlock();
        std::shared_ptr<Sandbox> sandbox = make_pooled(*wanted);
        lock.lock();
        --starting_;
        if (!sandbox) {
            pool_wake_.wait_for(lock, std::chrono::seconds(10), [this] { return stopping_; });
        } else if (stopping_) {
            lock.unlock();
            sandbox->kill();
            lock.lock();
        } else {
            pool_[{wanted->runtime, wanted->template_name}].push_back(std::move(sandbox));
        }
    }
}

}  // namespace deskbox::server
