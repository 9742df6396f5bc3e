// One sandbox's egress state, shared by its TCP proxy, UDP relay and DNS server (internal to
// server/network): the policy, counters, DNS memory, rate limit and audit sink, plus a registry
// of everything with a socket open, so that stopping the sandbox's network closes all of it
// and waits until it is gone.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "server/network/dns_memory.hpp"
#include "server/network/egress_stats.hpp"
#include "server/network/netns.hpp"
#include "server/network/network_core.hpp"
#include "server/network/network_policy.hpp"
#include "server/network/rate_limiter.hpp"

namespace deskbox::network {

using AuditSink = std::function<void(const std::string& kind, const nlohmann::json& detail)>;

// Something with sockets on an I/O thread that stop() must close.
class Closeable {
  public:
    virtual ~Closeable() = default;
    // Thread-safe: posts to the object's own strand, which closes its sockets and leaves the
    // registry (so stop() waits for sockets to close, not for lookups in flight).
    virtual void close() = 0;
    // Thread-safe: the sandbox's policy changed (EgressContext::replace_policy); what it holds
    // open that the new policy forbids is cut, on its own strand.
    virtual void recheck_policy() {}
};

// One of a sandbox's TCP connection slots (NetworkOptions::max_connections, sized by deskboxd's
// fd budget), held by an egress connection or DNS-over-TCP session while it lives.
class ConnectionSlot {
  public:
    ConnectionSlot() = default;
    explicit ConnectionSlot(std::atomic<std::size_t>* count) : count_(count) {}
    ~ConnectionSlot() { release(); }
    ConnectionSlot(ConnectionSlot&& other) noexcept
        : count_(std::exchange(other.count_, nullptr)) {}
    ConnectionSlot& operator=(ConnectionSlot&& other) noexcept {
        if (this != &other) {
            release();
            count_ = std::exchange(other.count_, nullptr);
        }
        return *this;
    }
    explicit operator bool() const { return count_ != nullptr; }

  private:
    void release() {
        if (count_) count_->fetch_sub(1);
        count_ = nullptr;
    }
    std::atomic<std::size_t>* count_ = nullptr;
};

struct EgressContext {
    EgressContext(NetworkCore& core, std::string sandbox_id, NetworkPolicy policy,
                  std::uint64_t egress_bytes_per_second, AuditSink audit);

    NetworkCore& core;
    const std::string sandbox_id;
    EgressStats stats;
    DnsMemory dns_memory;
    // Every flow's limiter (limits.egress_kbps): rate 0 is no limit; a live change sets its rate.
    const std::shared_ptr<RateLimiter> limiter;
    NetworkNamespace* router = nullptr;  // where per-flow UDP sockets are made

    // The policy in force now: decisions take a copy (a live change may replace it meanwhile).
    std::shared_ptr<const NetworkPolicy> policy() const;
    // A live change: new decisions follow `policy` and `egress_bytes_per_second` (0: no limit)
    // at once, and everything enrolled rechecks what it holds open.
    void replace_policy(NetworkPolicy policy, std::uint64_t egress_bytes_per_second);

    bool stopped() const { return stopped_; }
    // A slot if fewer than `cap` TCP connections hold one; else an empty slot (refuse it).
    ConnectionSlot take_slot(std::size_t cap);
    std::size_t slots_taken() const { return slots_; }
    void audit(const std::string& kind, const nlohmann::json& detail);
    void set_audit(AuditSink sink);

    // Registry: objects add themselves when they start, and leave once their sockets are closed
    // (their close(), or their destructor); tickets are never 0.
    std::uint64_t enroll(std::weak_ptr<Closeable> object);
    void leave(std::uint64_t ticket);
    std::size_t open_count() const;
    // Stops: no more audit lines, closes everything enrolled and waits (bounded) until it left.
    void stop(std::chrono::milliseconds wait);

  private:
    mutable std::mutex policy_mutex_;
    std::shared_ptr<const NetworkPolicy> policy_;
    std::atomic<bool> stopped_{false};
    std::atomic<std::size_t> slots_{0};
    std::mutex audit_mutex_;
    AuditSink audit_;
    mutable std::mutex registry_mutex_;
    std::condition_variable registry_empty_;
    std::map<std::uint64_t, std::weak_ptr<Closeable>> registry_;
    std::uint64_t next_ticket_ = 1;
};

// A destination's name for counters: the name if there is one, else the address.
std::string destination_label(const std::optional<std::string>& name, const IpAddress& address);

}  // namespace deskbox::network
