// What one sandbox sent out: connections allowed and blocked per destination name (or address
// when there was no name), bytes each way, DNS answers given and refused. Shown by inspect and
// /metrics; bounded in size whatever the sandbox does.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deskbox::network {

struct DestinationCounts {
    std::uint64_t allowed = 0, blocked = 0, bytes_out = 0, bytes_in = 0;
    std::uint64_t cut = 0;    // allowed, then cut (a later request refused, a policy change)
    std::string last_reason;  // of the last block or cut
};

// Why deskboxd itself refused a connection the policy would have let through.
enum class RefusedReason {
    over_cap,  // the sandbox already holds its share of deskboxd's fds (--egress-max-connections)
    no_fds,    // deskboxd is out of fds (or memory) for the relay
};
const char* refused_reason_name(RefusedReason reason);

struct EgressTotals {
    std::uint64_t allowed = 0, blocked = 0, bytes_out = 0, bytes_in = 0, cut = 0;
    std::uint64_t refused_over_cap = 0, refused_no_fds = 0;
    std::uint64_t dns_answered = 0, dns_refused = 0, udp_flows = 0, udp_blocked = 0;
    std::uint64_t active = 0;  // TCP connections open now
};

class EgressStats {
  public:
    // Names kept apart; past this, new ones count as "(other)".
    static constexpr std::size_t kMaxDestinations = 256;

    void connection(const std::string& destination, bool allowed, const std::string& reason = {});
    void transferred(const std::string& destination, std::uint64_t out, std::uint64_t in);
    void bytes_live(std::uint64_t out, std::uint64_t in);  // totals while a connection runs
    // An allowed connection cut later: a request on it the policy refuses, or a policy change.
    void cut(const std::string& destination, const std::string& reason);
    void dns(bool answered);
    void udp_flow(bool allowed);
    void refused(RefusedReason reason);
    void opened() { ++active_; }
    void closed() { --active_; }

    EgressTotals totals() const;
    // The `n` destinations with the most connections, busiest first.
    std::vector<std::pair<std::string, DestinationCounts>> top(std::size_t n) const;
    nlohmann::json to_json(std::size_t destinations = 50) const;

  private:
    DestinationCounts& entry_locked(const std::string& destination);

    mutable std::mutex mutex_;
    std::map<std::string, DestinationCounts> destinations_;
    std::uint64_t allowed_ = 0, blocked_ = 0, dns_answered_ = 0, dns_refused_ = 0, udp_flows_ = 0,
                  udp_blocked_ = 0, refused_over_cap_ = 0, refused_no_fds_ = 0, cut_ = 0;
    std::atomic<std::uint64_t> bytes_out_{0}, bytes_in_{0}, active_{0};
};

}  // namespace deskbox::network
