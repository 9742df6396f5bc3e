#include "server/network/egress_stats.hpp"

#include <algorithm>

namespace deskbox::network {

DestinationCounts& EgressStats::entry_locked(const std::string& destination) {
    auto it = destinations_.find(destination);
    if (it != destinations_.end()) return it->second;
    if (destinations_.size() >= kMaxDestinations) return destinations_["(other)"];
    return destinations_[destination];
}

void EgressStats::connection(const std::string& destination, bool allowed,
                             const std::string& reason) {
    std::lock_guard lock(mutex_);
    auto& e = entry_locked(destination);
    if (allowed) {
        ++e.allowed;
        ++allowed_;
    } else {
        ++e.blocked;
        ++blocked_;
        e.last_reason = reason;
    }
}

void EgressStats::transferred(const std::string& destination, std::uint64_t out, std::uint64_t in) {
    std::lock_guard lock(mutex_);
    auto& e = entry_locked(destination);
    e.bytes_out += out;
    e.bytes_in += in;
}

void EgressStats::bytes_live(std::uint64_t out, std::uint64_t in) {
    bytes_out_ += out;
    bytes_in_ += in;
}

void EgressStats::cut(const std::string& destination, const std::string& reason) {
    std::lock_guard lock(mutex_);
    auto& e = entry_locked(destination);
    ++e.cut;
    ++cut_;
    e.last_reason = reason;
}

void EgressStats::dns(bool answered) {
    std::lock_guard lock(mutex_);
    ++(answered ? dns_answered_ : dns_refused_);
}

void EgressStats::udp_flow(bool allowed) {
    std::lock_guard lock(mutex_);
    ++(allowed ? udp_flows_ : udp_blocked_);
}

const char* refused_reason_name(RefusedReason reason) {
    return reason == RefusedReason::over_cap ? "over_cap" : "no_fds";
}

void EgressStats::refused(RefusedReason reason) {
    std::lock_guard lock(mutex_);
    ++(reason == RefusedReason::over_cap ? refused_over_cap_ : refused_no_fds_);
}

EgressTotals EgressStats::totals() const {
    std::lock_guard lock(mutex_);
    EgressTotals t;
    t.allowed = allowed_;
    t.blocked = blocked_;
    t.cut = cut_;
    t.bytes_out = bytes_out_;
    t.bytes_in = bytes_in_;
    t.dns_answered = dns_answered_;
    t.dns_refused = dns_refused_;
    t.udp_flows = udp_flows_;
    t.udp_blocked = udp_blocked_;
    t.active = active_;
    t.refused_over_cap = refused_over_cap_;
    t.refused_no_fds = refused_no_fds_;
    return t;
}

std::vector<std::pair<std::string, DestinationCounts>> EgressStats::top(std::size_t n) const {
    std::vector<std::pair<std::string, DestinationCounts>> all;
    {
        std::lock_guard lock(mutex_);
        all.assign(destinations_.begin(), destinations_.end());
    }
    std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
        return a.second.allowed + a.second.blocked > b.second.allowed + b.second.blocked;
    });
    if (all.size() > n) all.resize(n);
    return all;
}

nlohmann::json EgressStats::to_json(std::size_t destinations) const {
    auto t = totals();
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [name, c] : top(destinations)) {
        nlohmann::json d = {{"destination", name},      {"allowed", c.allowed},
                            {"blocked", c.blocked},     {"cut", c.cut},
                            {"bytes_out", c.bytes_out}, {"bytes_in", c.bytes_in}};
        if (!c.last_reason.empty()) d["last_blocked_reason"] = c.last_reason;
        list.push_back(std::move(d));
    }
    return {{"connections",
             {{"allowed", t.allowed},
              {"blocked", t.blocked},
              {"cut", t.cut},
              {"open", t.active},
              {"refused", {{"over_cap", t.refused_over_cap}, {"no_fds", t.refused_no_fds}}}}},
            {"bytes", {{"out", t.bytes_out}, {"in", t.bytes_in}}},
            {"dns", {{"answered", t.dns_answered}, {"refused", t.dns_refused}}},
            {"udp_flows", {{"allowed", t.udp_flows}, {"blocked", t.udp_blocked}}},
            {"destinations", list}};
}

}  // namespace deskbox::network
