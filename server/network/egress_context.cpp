#include "server/network/egress_context.hpp"

namespace deskbox::network {

EgressContext::EgressContext(NetworkCore& core_ref, std::string id, NetworkPolicy p,
                             std::uint64_t egress_bytes_per_second, AuditSink sink)
    : core(core_ref),
      sandbox_id(std::move(id)),
      limiter(std::make_shared<RateLimiter>(egress_bytes_per_second)),
      policy_(std::make_shared<const NetworkPolicy>(std::move(p))),
      audit_(std::move(sink)) {}

std::shared_ptr<const NetworkPolicy> EgressContext::policy() const {
    std::lock_guard lock(policy_mutex_);
    return policy_;
}

void EgressContext::replace_policy(NetworkPolicy policy, std::uint64_t egress_bytes_per_second) {
    {
        std::lock_guard lock(policy_mutex_);
        policy_ = std::make_shared<const NetworkPolicy>(std::move(policy));
    }
    limiter->set_rate(egress_bytes_per_second);
    std::vector<std::shared_ptr<Closeable>> open;
    {
        std::lock_guard lock(registry_mutex_);
        for (const auto& [ticket, weak] : registry_)
            if (auto object = weak.lock()) open.push_back(std::move(object));
    }
    for (const auto& object : open) object->recheck_policy();
}

ConnectionSlot EgressContext::take_slot(std::size_t cap) {
    std::size_t now = slots_.load();
    do {
        if (now >= cap) return {};
    } while (!slots_.compare_exchange_weak(now, now + 1));
    return ConnectionSlot(&slots_);
}

void EgressContext::audit(const std::string& kind, const nlohmann::json& detail) {
    std::lock_guard lock(audit_mutex_);
    if (audit_ && !stopped_) audit_(kind, detail);
}

void EgressContext::set_audit(AuditSink sink) {
    std::lock_guard lock(audit_mutex_);
    if (!stopped_) audit_ = std::move(sink);
}

std::uint64_t EgressContext::enroll(std::weak_ptr<Closeable> object) {
    std::lock_guard lock(registry_mutex_);
    std::uint64_t ticket = next_ticket_++;
    registry_[ticket] = std::move(object);
    return ticket;
}

void EgressContext::leave(std::uint64_t ticket) {
    if (ticket == 0) return;  // not enrolled, or left already
    std::lock_guard lock(registry_mutex_);
    registry_.erase(ticket);
    if (registry_.empty()) registry_empty_.notify_all();
}

std::size_t EgressContext::open_count() const {
    std::lock_guard lock(registry_mutex_);
    return registry_.size();
}

void EgressContext::stop(std::chrono::milliseconds wait) {
    {
        std::lock_guard lock(audit_mutex_);
        stopped_ = true;
        audit_ = nullptr;
    }
    std::vector<std::shared_ptr<Closeable>> open;
    {
        std::lock_guard lock(registry_mutex_);
        for (auto& [ticket, weak] : registry_)
            if (auto object = weak.lock()) open.push_back(std::move(object));
    }
    for (auto& object : open) object->close();
    open.clear();  // the last owner may be us: the object's destructor leaves the registry
    std::unique_lock lock(registry_mutex_);
    registry_empty_.wait_for(lock, wait, [this] { return registry_.empty(); });
}

std::string destination_label(const std::optional<std::string>& name, const IpAddress& address) {
    return name ? *name : address.to_string();
}

}  // namespace deskbox::network
