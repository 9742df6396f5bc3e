// DNS messages as the sandbox DNS filter handles them, on ldns: read a sandbox's query, answer
// it ourselves (NXDOMAIN for names the policy refuses, an empty answer for record types a
// sandbox does not get), and rewrite an upstream answer so that only what the policy allows
// reaches the sandbox: A records of allowed addresses, no AAAA/HTTPS/SVCB (address hints), no
// additional section (glue addresses for other names).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/network/ip_range.hpp"

namespace deskbox::network {

inline constexpr std::uint16_t kDnsTypeA = 1;
inline constexpr std::uint16_t kDnsTypeAAAA = 28;
inline constexpr std::uint16_t kDnsRcodeServfail = 2;
inline constexpr std::uint16_t kDnsRcodeNxdomain = 3;
inline constexpr std::uint16_t kDnsRcodeRefused = 5;
inline constexpr std::size_t kMaxDnsMessage = 65535;

struct DnsQuery {
    std::uint16_t id = 0;
    std::string name;  // normalized (lower case, no trailing dot); may be "" for the root
    std::uint16_t type = 0;
    std::uint16_t qclass = 0;
    bool recursion_desired = true;
};

// nullopt (with `error`) unless `wire` is a standard query with exactly one question.
std::optional<DnsQuery> parse_dns_query(std::string_view wire, std::string* error = nullptr);

// Our own answer to `query_wire` (which parse_dns_query accepted): `rcode` and no records.
std::string dns_answer_without_records(std::string_view query_wire, std::uint16_t rcode);

// A query for `name`/`type` with id `id`, recursion desired (for the proxy's own lookups).
std::string make_dns_query(const std::string& name, std::uint16_t type, std::uint16_t id);

struct DnsAddress {
    std::string name;  // the owner of the A record (the question or a CNAME target)
    IpAddress address;
    std::uint32_t ttl = 0;
};

struct FilteredDnsAnswer {
    std::string wire;                  // what the sandbox gets
    std::vector<DnsAddress> kept;      // A records passed on
    std::vector<DnsAddress> stripped;  // A records the policy refused
    std::vector<std::string> cnames;   // names the question led to
    std::uint16_t rcode = 0;
    bool truncated = false;  // TC: ask again over TCP
};

// Rewrites `response_wire` from the upstream for `query`. nullopt (with `error`) if it is not an
// answer to that query (wrong id or question) or not DNS at all. `id` of the answer becomes
// `answer_id` (the sandbox's own id; the upstream saw a random one).
std::optional<FilteredDnsAnswer> filter_dns_answer(
    std::string_view response_wire, const DnsQuery& query, std::uint16_t upstream_id,
    std::uint16_t answer_id, const std::function<bool(const IpAddress&)>& address_allowed,
    std::string* error = nullptr);

}  // namespace deskbox::network
