#include "server/usage/usage_sampler.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "server/sandbox/sandbox_manager.hpp"

namespace deskbox::server::usage {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr Millis kPruneEveryMs = 3600 * 1000;

Millis to_millis(std::chrono::system_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

// How far a counter moved since `before`; a counter that went back was started again (a
// restored microVM's QEMU, an adopted sandbox's new network) and moved its whole value.
std::uint64_t advance(std::uint64_t now, std::uint64_t before) {
    return now >= before ? now - before : now;
}

}  // namespace

Millis now_millis() {
    return to_millis(std::chrono::system_clock::now());
}

UsageService::UsageService(SandboxManager& manager, const std::filesystem::path& state_dir,
                           UsageOptions options)
    : manager_(manager), options_(options), ledger_(state_dir / "usage", options.keep) {
    if (options_.sample_interval.count() > 0) thread_ = std::thread([this] { loop(); });
}

UsageService::~UsageService() {
    {
        std::lock_guard lock(stop_mutex_);
        stopping_ = true;
    }
    stop_wake_.notify_all();
    if (thread_.joinable()) thread_.join();
}

std::optional<UsageSample> UsageService::latest(const std::string& id) const {
    std::lock_guard lock(mutex_);
    auto it = last_.find(id);
    if (it == last_.end()) return std::nullopt;
    return it->second;
}

void UsageService::loop() {
    std::unique_lock lock(stop_mutex_);
    while (!stopping_) {
        lock.unlock();
        try {
            sample_all();
        } catch (const std::exception& e) {
            // A full disk or an unreadable counter: the next round tries again.
            std::fprintf(stderr, "deskboxd: usage sampling: %s\n", e.what());
        }
        lock.lock();
        stop_wake_.wait_for(lock, options_.sample_interval, [this] { return stopping_; });
    }
}

UsageSample UsageService::first_sample(const Sandbox& sandbox) {
    if (auto history = ledger_.history(sandbox.id())) {
        if (!history->samples.empty() && !history->ended_at) return history->samples.back();
        if (!history->ended_at) {
            UsageSample zero;
            zero.at = history->start.at;
            return zero;
        }
    }
    const auto& config = sandbox.config();
    SandboxStart start;
    start.id = sandbox.id();
    start.template_name = config.template_name;
    start.runtime = config.runtime_name;
    start.metadata = config.metadata;
    start.vcpus = config.limits.cpus;
    start.memory_mb = config.limits.memory_mb;
    start.disk_mb = config.limits.disk_mb;
    start.at = to_millis(sandbox.created_at());
    ledger_.record_start(start);
    UsageSample zero;
    zero.at = start.at;
    return zero;
}

UsageSample UsageService::next_sample(const Sandbox& sandbox, const UsageSample& last,
                                      Millis now) const {
    const runtime::ResourceUsage used = sandbox.usage();
    const auto& limits = sandbox.config().limits;
    UsageSample s;
    s.at = now;
    s.paused = sandbox.status() == SandboxStatus::paused;
    s.memory_resident_bytes = used.memory_resident_bytes.value_or(0);
    s.memory_reserved_bytes = used.memory_max_bytes.value_or(limits.memory_mb << 20);
    s.disk_bytes = used.disk_bytes.value_or(0);
    s.raw = last.raw;
    s.totals = last.totals;
    const double dt = std::max<Millis>(0, now - last.at) / 1000.0;
    if (used.cpu_ns) {
        const std::uint64_t cpu = advance(*used.cpu_ns, last.raw.cpu_ns.value_or(0));
        s.totals.cpu_seconds += cpu / 1e9;
        s.cpu_percent = dt > 0 ? cpu / 1e9 / dt * 100.0 : 0;
        s.raw.cpu_ns = used.cpu_ns;
    } else if (s.paused) {
        s.raw.cpu_ns.reset();  // no process (a saved microVM): the next one counts from 0
    }  // else a read that failed (no fd free): the counter is still the one last seen
    if (auto network = sandbox.network()) {
        const auto net = network->totals();
        s.net_out_bytes = advance(net.bytes_out, last.raw.net_out);
        s.net_in_bytes = advance(net.bytes_in, last.raw.net_in);
        s.raw.net_out = net.bytes_out;
        s.raw.net_in = net.bytes_in;
        s.totals.egress_bytes += s.net_out_bytes;
        s.totals.ingress_bytes += s.net_in_bytes;
    }
    s.totals.lifetime_seconds += dt;
    s.totals.memory_gib_seconds += s.memory_resident_bytes / kGiB * dt;
    s.totals.disk_gib_seconds += s.disk_bytes / kGiB * dt;
    s.totals.disk_peak_bytes = std::max(s.totals.disk_peak_bytes, s.disk_bytes);
    if (s.paused) {
        s.totals.paused_seconds += dt;
    } else {
        s.totals.vcpu_seconds += limits.cpus * dt;
        s.totals.memory_reserved_gib_seconds += s.memory_reserved_bytes / kGiB * dt;
    }
    return s;
}

void UsageService::sample_one(const Sandbox& sandbox, Millis now) {
    std::optional<UsageSample> last;
    {
        std::lock_guard lock(mutex_);
        if (auto it = last_.find(sandbox.id()); it != last_.end()) last = it->second;
    }
    if (!last) last = first_sample(sandbox);
    UsageSample next = next_sample(sandbox, *last, now);
    ledger_.record_sample(sandbox.id(), next);
    std::lock_guard lock(mutex_);
    last_[sandbox.id()] = std::move(next);
}

void UsageService::sandbox_ending(const Sandbox& sandbox) {
    if (sandbox.config().pooled || options_.sample_interval.count() == 0) return;
    std::lock_guard round(round_mutex_);
    const Millis now = now_millis();
    try {
        sample_one(sandbox, now);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deskboxd: usage sampling: %s\n", e.what());
    }
    {
        std::lock_guard lock(mutex_);
        last_.erase(sandbox.id());
    }
    ledger_.record_end(sandbox.id(), now);
}

void UsageService::sample_all() {
    std::lock_guard round(round_mutex_);
    const Millis now = now_millis();
    std::set<std::string> seen;
    for (const auto& sandbox : manager_.list()) {
        seen.insert(sandbox->id());  // listed: not ended, whatever it is doing
        const auto status = sandbox->status();
        if (status != SandboxStatus::running && status != SandboxStatus::paused) continue;
        if (sandbox->config().pooled) continue;  // made ahead: not anybody's usage yet
        sample_one(*sandbox, now);
    }
    // Gone since the last round, or open in the ledger with no server running them.
    for (const auto& id : ledger_.open_ids()) {
        if (seen.count(id)) continue;
        std::optional<Millis> ended;
        {
            std::lock_guard lock(mutex_);
            if (auto it = last_.find(id); it != last_.end()) {
                ended = now;
                last_.erase(it);
            }
        }
        if (!ended)
            if (auto history = ledger_.history(id)) ended = history->last_at();
        ledger_.record_end(id, ended.value_or(now));
    }
    if (now - last_prune_ >= kPruneEveryMs) {
        ledger_.prune(now);
        last_prune_ = now;
    }
}

}  // namespace deskbox::server::usage
