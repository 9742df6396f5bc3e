#include "server/network/dns_memory.hpp"

#include <algorithm>

namespace deskbox::network {

void DnsMemory::remember(const std::string& name, const IpAddress& raw, std::chrono::seconds ttl) {
    IpAddress address = canonical(raw);
    auto now = Clock::now();
    auto expiry = now + std::clamp(ttl, kMinimumHold, kMaximumHold);
    std::lock_guard lock(mutex_);
    expire_locked(now);
    auto [it, inserted] = entries_.insert({Key{name, address}, expiry});
    if (!inserted) {
        it->second = std::max(it->second, expiry);
        return;
    }
    by_address_.insert({address, name});
    if (entries_.size() > kMaxEntries) {
        // Drop the entry closest to expiring.
        auto oldest =
            std::min_element(entries_.begin(), entries_.end(),
                             [](const auto& a, const auto& b) { return a.second < b.second; });
        auto range = by_address_.equal_range(oldest->first.address);
        for (auto r = range.first; r != range.second; ++r)
            if (r->second == oldest->first.name) {
                by_address_.erase(r);
                break;
            }
        entries_.erase(oldest);
    }
}

void DnsMemory::expire_locked(Clock::time_point now) const {
    for (auto it = entries_.begin(); it != entries_.end();) {
        if (it->second > now) {
            ++it;
            continue;
        }
        auto range = by_address_.equal_range(it->first.address);
        for (auto r = range.first; r != range.second; ++r)
            if (r->second == it->first.name) {
                by_address_.erase(r);
                break;
            }
        it = entries_.erase(it);
    }
}

bool DnsMemory::resolves_to(const std::string& name, const IpAddress& address) const {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(Key{name, canonical(address)});
    return it != entries_.end() && it->second > Clock::now();
}

std::optional<std::string> DnsMemory::name_of(const IpAddress& address) const {
    std::lock_guard lock(mutex_);
    expire_locked(Clock::now());
    auto it = by_address_.find(canonical(address));
    if (it == by_address_.end()) return std::nullopt;
    return it->second;
}

}  // namespace deskbox::network
