// What a sandbox may reach on the network: the `network` field of a create request, parsed and
// validated, and the decisions made from it (pure functions, no sockets), shared by the DNS
// filter, the TCP egress proxy and the UDP relay of both runtimes.
//
//   false                         no interface but loopback
//   true                          the internet: public unicast addresses, TCP and UDP
//   {"allow": [..], "deny": [..]} only what `allow` names, minus what `deny` names; without
//                                 `allow`, the internet minus `deny`; "rules": credential
//                                 rules (credential_rules.hpp)
// An entry is a domain ("example.org": that name only), a wildcard ("*.example.org": every name
// below example.org, not example.org itself), an IP address or a CIDR range.
//
// Whatever the policy: the host (every address it has), loopback, link-local (169.254.169.254),
// multicast and the sandbox's own link are never reached. Special ranges (RFC 1918, CGNAT, ULA,
// benchmarking, documentation ...) are reached only when an allow entry names the address or a
// range holding it; a domain that resolves into them stays blocked (DNS rebinding).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/network/credential_rules.hpp"
#include "server/network/ip_range.hpp"

namespace deskbox::network {

// Bad policy input; field() is the dotted path of the offending value ("network.allow[2]").
class PolicyError : public std::invalid_argument {
  public:
    PolicyError(std::string field, const std::string& reason)
        : std::invalid_argument(field + ": " + reason), field_(std::move(field)) {}
    const std::string& field() const { return field_; }

  private:
    std::string field_;
};

struct PolicyEntry {
    enum class Kind { domain, wildcard, range };
    Kind kind = Kind::domain;
    std::string domain;  // lower case, no trailing dot; a wildcard's is the part after "*."
    IpRange range;       // Kind::range

    bool matches_name(std::string_view normalized_name) const;
    std::string to_string() const;  // as written in a policy ("*.example.org", "10.0.0.0/8")
};

constexpr std::size_t kMaxPolicyEntries = 256;  // per list

// One entry of `allow` or `deny` (also a credential rule's domain). Throws PolicyError.
PolicyEntry parse_policy_entry(const nlohmann::json& value, const std::string& field);

// Lower case without a trailing dot if `name` is a valid DNS host name (letters, digits, '-'
// and '_', labels of 1..63, at most 253 characters), else nullopt.
std::optional<std::string> normalize_host_name(std::string_view name);

// The protocol the egress proxy saw a connection open with.
enum class WireProtocol { http, tls, other };

// One outgoing connection (or UDP flow) as the egress path sees it.
struct Destination {
    IpAddress address;
    std::uint16_t port = 0;
    WireProtocol protocol = WireProtocol::other;
    // The name the client asked for (HTTP Host, TLS SNI), normalized; nullopt when it sent none
    // or an IP literal.
    std::optional<std::string> name;
    // `name` resolves to `address` (the sandbox's own DNS answers, or a fresh lookup).
    bool name_resolves_to_address = false;
    // DNS gave `address` to this sandbox for a name the policy allows (for protocols that carry
    // no name).
    bool learned_from_dns = false;
};

// What the host knows about addresses beyond the table of special ranges.
struct HostView {
    std::function<bool(const IpAddress&)> is_host;  // one of the host's own addresses
    // Special ranges an operator declares to be the internet here (a lab network, a test
    // internet in 198.18.0.0/15): treated as public unicast.
    std::vector<IpRange> public_ranges;
};

struct Verdict {
    bool allowed = false;
    std::string reason;  // why, in a few words: "denied by *.example.org", "the host's address"
};

class NetworkPolicy {
  public:
    // Loopback only.
    static NetworkPolicy closed();
    // The internet.
    static NetworkPolicy open();
    // Parses `value` (bool or {"allow","deny","rules"}). Throws PolicyError naming `field`'s
    // part (`field`.allow[2]; allow[2] when `field` is empty).
    static NetworkPolicy parse(const nlohmann::json& value, const std::string& field = "network");

    bool enabled() const { return enabled_; }
    // No allow list: every public address (minus deny).
    bool allows_internet() const { return enabled_ && !allow_.has_value(); }
    const std::vector<PolicyEntry>& allow() const;
    const std::vector<PolicyEntry>& deny() const { return deny_; }
    // Domain entries decide something: the proxy must learn each connection's name first.
    bool has_name_rules() const;
    // The allow list names domains (so DNS answers some names).
    bool allows_names() const;
    // Credential rules (credential_rules.hpp): headers the proxy sets on requests.
    const CredentialRules& rules() const { return rules_; }
    // The egress proxy by the name the operator gave it (--egress-proxy NAME=URL); nullopt:
    // the server's default (--egress-proxy URL), or none.
    const std::optional<std::string>& proxy() const { return proxy_; }
    // The proxy must read plain-HTTP connections request by request: a name decides (each
    // request's Host is checked) or rules set headers.
    bool inspects_http() const { return has_name_rules() || !rules_.empty(); }

    // The same value parse() takes (true/false, or the object with normalized entries).
    nlohmann::json to_json() const;
    // For inspect: the policy and the rules that hold whatever it says.
    nlohmann::json describe() const;

    // May the sandbox resolve `name` (normalized)? DNS answers nothing else.
    Verdict name_verdict(std::string_view name) const;
    // May a DNS answer give the sandbox `address`? (Special and never-reached addresses are
    // stripped from answers unless allowed by address.)
    Verdict answer_verdict(const IpAddress& address, const HostView& host) const;
    // The part of decide() the address alone settles; nullopt when the connection's name (or
    // what DNS gave the sandbox) still decides, so the proxy must look at its first bytes.
    std::optional<Verdict> decide_by_address(const IpAddress& address, const HostView& host) const;
    // The egress decision for one connection.
    Verdict decide(const Destination& destination, const HostView& host) const;

  private:
    Verdict address_verdict(const IpAddress& address, const HostView& host,
                            bool& explicitly_allowed) const;
    const PolicyEntry* allowing_range(const IpAddress& address) const;
    const PolicyEntry* denying_range(const IpAddress& address) const;
    const PolicyEntry* denying_name(std::string_view name) const;
    const PolicyEntry* allowing_name(std::string_view name) const;

    bool enabled_ = false;
    std::optional<std::vector<PolicyEntry>> allow_;  // nullopt: the internet
    std::vector<PolicyEntry> deny_;
    CredentialRules rules_;
    std::optional<std::string> proxy_;
};

}  // namespace deskbox::network
