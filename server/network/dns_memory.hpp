// The names a sandbox's DNS answers gave out and the addresses they named, so the egress proxy
// can check that a connection's Host/SNI really resolves to the address it went to, and tell
// which name a nameless connection (or UDP flow) is for. Entries outlive their TTL (clients
// cache longer than they should) but not a day; the table is bounded.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "server/network/ip_range.hpp"

namespace deskbox::network {

class DnsMemory {
  public:
    using Clock = std::chrono::steady_clock;
    static constexpr std::size_t kMaxEntries = 4096;
    static constexpr std::chrono::seconds kMinimumHold{600};
    static constexpr std::chrono::seconds kMaximumHold{86400};

    void remember(const std::string& name, const IpAddress& address, std::chrono::seconds ttl);
    bool resolves_to(const std::string& name, const IpAddress& address) const;
    // A name this sandbox was given `address` for, if any.
    std::optional<std::string> name_of(const IpAddress& address) const;

  private:
    void expire_locked(Clock::time_point now) const;

    struct Key {
        std::string name;
        IpAddress address;
        bool operator<(const Key& o) const {
            return name != o.name ? name < o.name : address < o.address;
        }
    };
    mutable std::mutex mutex_;
    mutable std::map<Key, Clock::time_point> entries_;  // -> expiry
    mutable std::multimap<IpAddress, std::string> by_address_;
};

}  // namespace deskbox::network
