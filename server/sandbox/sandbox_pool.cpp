// SandboxManager's pool (--microvm-pool): microVMs of a template restored ahead of time, so a
// create that asks for nothing else takes one instead of waiting for a restore.
#include "server/sandbox/sandbox_manager.hpp"

#include <cstdio>
#include <set>

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

std::shared_ptr<Sandbox> SandboxManager::take_pooled(const nlohmann::json& request,
                                                     const SandboxConfig& config) {
    // Pooled sandboxes run the template's defaults; these fields change nothing inside.
    static const std::set<std::string> kPoolable = {
        "template", "runtime",        "timeout_s",  "metadata", "on_timeout",
        "record",   "api_resolution", "fast_start", "ready",    "auto_resume"};
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
            if (pool_[{pool_runtime_, name}].size() < size && free_places_locked() > 0) {
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
            nlohmann::json request = {{"template", wanted}, {"runtime", pool_runtime_}};
            auto [config, definition] = parse_create(request);
            config.pooled = true;
            const ReadyCondition ready = config.ready;  // the template's
            sandbox = start_sandbox(request, std::move(config), definition);
            try {
                sandbox->wait_ready(ready);
            } catch (...) {
                sandbox->kill();
                sandbox.reset();
                throw;
            }
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
            pool_[{pool_runtime_, wanted}].push_back(std::move(sandbox));
        }
    }
}

}  // namespace deskbox::server
