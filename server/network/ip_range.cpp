#include "server/network/ip_range.hpp"

#include <array>
#include <charconv>
#include <cstdint>
#include <vector>

namespace deskbox::network {
namespace {

std::optional<IpAddress> parse_exact(std::string_view text) {
    if (text.empty() || text.size() > 64) return std::nullopt;
    boost::system::error_code ec;
    auto address = boost::asio::ip::make_address(std::string(text), ec);
    if (ec) return std::nullopt;
    // Scoped IPv6 (fe80::1%eth0) names an interface of the host: not a policy term.
    if (address.is_v6() && address.to_v6().scope_id() != 0) return std::nullopt;
    return address;
}

bool prefix_matches(const IpAddress& base, int prefix, const IpAddress& address) {
    if (base.is_v4() != address.is_v4()) return false;
    if (base.is_v4()) {
        if (prefix == 0) return true;
        std::uint32_t mask = prefix >= 32 ? 0xffffffffu : ~(0xffffffffu >> prefix);
        return (base.to_v4().to_uint() & mask) == (address.to_v4().to_uint() & mask);
    }
    auto a = base.to_v6().to_bytes(), b = address.to_v6().to_bytes();
    int bits = prefix;
    for (std::size_t i = 0; i < a.size() && bits > 0; ++i, bits -= 8) {
        std::uint8_t mask = bits >= 8 ? 0xff : static_cast<std::uint8_t>(0xff << (8 - bits));
        if ((a[i] & mask) != (b[i] & mask)) return false;
    }
    return true;
}

IpAddress masked(const IpAddress& address, int prefix) {
    if (address.is_v4()) {
        std::uint32_t mask = prefix == 0    ? 0
                             : prefix >= 32 ? 0xffffffffu
                                            : ~(0xffffffffu >> prefix);
        return boost::asio::ip::address_v4(address.to_v4().to_uint() & mask);
    }
    auto bytes = address.to_v6().to_bytes();
    int bits = prefix;
    for (auto& byte : bytes) {
        if (bits >= 8) {
            bits -= 8;
            continue;
        }
        byte &= static_cast<std::uint8_t>(bits <= 0 ? 0 : 0xff << (8 - bits));
        bits = 0;
    }
    return boost::asio::ip::address_v6(bytes);
}

struct SpecialRange {
    const char* range;
    AddressKind kind;
    const char* what;
};

// IANA's special-purpose registries (RFC 6890 and successors). `never` ones are the host's or
// nobody's; `special` ones are real networks that are not the internet (a LAN, a carrier's, a
// lab's), reachable only when a policy names them by address.
constexpr SpecialRange kSpecialRanges[] = {
    {"0.0.0.0/8", AddressKind::never, "\"this network\""},
    {"127.0.0.0/8", AddressKind::never, "loopback"},
    {"169.254.0.0/16", AddressKind::never, "link-local (cloud metadata lives here)"},
    {"224.0.0.0/4", AddressKind::never, "multicast"},
    {"255.255.255.255/32", AddressKind::never, "broadcast"},
    {"10.0.0.0/8", AddressKind::special, "private (RFC 1918)"},
    {"172.16.0.0/12", AddressKind::special, "private (RFC 1918)"},
    {"192.168.0.0/16", AddressKind::special, "private (RFC 1918)"},
    {"100.64.0.0/10", AddressKind::special, "shared address space (CGNAT)"},
    {"192.0.0.0/24", AddressKind::special, "IETF protocol assignments"},
    {"192.0.2.0/24", AddressKind::special, "documentation (TEST-NET-1)"},
    {"192.88.99.0/24", AddressKind::special, "6to4 relay anycast"},
    {"198.18.0.0/15", AddressKind::special, "benchmarking"},
    {"198.51.100.0/24", AddressKind::special, "documentation (TEST-NET-2)"},
    {"203.0.113.0/24", AddressKind::special, "documentation (TEST-NET-3)"},
    {"240.0.0.0/4", AddressKind::special, "reserved"},
    {"::/128", AddressKind::never, "unspecified"},
    {"::1/128", AddressKind::never, "loopback"},
    {"fe80::/10", AddressKind::never, "link-local"},
    {"ff00::/8", AddressKind::never, "multicast"},
    {"::/96", AddressKind::special, "IPv4-compatible (deprecated)"},
    {"::ffff:0:0:0/96", AddressKind::special, "IPv4-translated"},
    {"64:ff9b::/96", AddressKind::special, "NAT64 (reaches IPv4 behind a translator)"},
    {"64:ff9b:1::/48", AddressKind::special, "local NAT64"},
    {"100::/64", AddressKind::special, "discard-only"},
    {"2001::/23", AddressKind::special, "IETF protocol assignments"},
    {"2001:db8::/32", AddressKind::special, "documentation"},
    {"2002::/16", AddressKind::special, "6to4 (embeds an IPv4 address)"},
    {"3fff::/20", AddressKind::special, "documentation"},
    {"5f00::/16", AddressKind::special, "segment routing"},
    {"fc00::/7", AddressKind::special, "unique local (ULA)"},
    {"fec0::/10", AddressKind::special, "site-local (deprecated)"},
};

struct ParsedSpecial {
    IpRange range;
    AddressClass cls;
};

const std::vector<ParsedSpecial>& special_ranges() {
    static const std::vector<ParsedSpecial> table = [] {
        std::vector<ParsedSpecial> out;
        for (const auto& s : kSpecialRanges)
            out.push_back({*parse_ip_range(s.range), AddressClass{s.kind, s.range, s.what}});
        return out;
    }();
    return table;
}

}  // namespace

IpAddress canonical(const IpAddress& address) {
    if (address.is_v6() && address.to_v6().is_v4_mapped())
        return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, address.to_v6());
    return address;
}

bool IpRange::contains(const IpAddress& address) const {
    return prefix_matches(base, prefix, canonical(address));
}

std::string IpRange::to_string() const {
    return base.to_string() + "/" + std::to_string(prefix);
}

std::optional<IpAddress> parse_ip_address(std::string_view text) {
    auto address = parse_exact(text);
    if (!address) return std::nullopt;
    return canonical(*address);
}

std::optional<IpRange> parse_ip_range(std::string_view text, std::string* error) {
    auto fail = [&](std::string why) -> std::optional<IpRange> {
        if (error) *error = std::move(why);
        return std::nullopt;
    };
    auto slash = text.find('/');
    auto address = parse_exact(text.substr(0, slash));
    if (!address) return fail("not an IP address or CIDR range");
    const bool mapped = address->is_v6() && address->to_v6().is_v4_mapped();
    int max_prefix = address->is_v4() ? 32 : 128;
    int prefix = max_prefix;
    if (slash != std::string_view::npos) {
        auto digits = text.substr(slash + 1);
        auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), prefix);
        if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() ||
            prefix < 0 || prefix > max_prefix)
            return fail("prefix length must be 0.." + std::to_string(max_prefix));
    }
    if (mapped) {  // ::ffff:10.0.0.0/104 is 10.0.0.0/8
        if (prefix < 96) return fail("an IPv4-mapped range needs a prefix of at least /96");
        address = canonical(*address);
        prefix -= 96;
    }
    IpAddress base = masked(*address, prefix);
    if (base != *address)
        return fail("host bits set past /" + std::to_string(prefix) + " (did you mean " +
                    base.to_string() + "/" + std::to_string(prefix) + "?)");
    return IpRange{base, prefix};
}

AddressClass classify(const IpAddress& raw) {
    IpAddress address = canonical(raw);
    // The most specific range wins (2001:db8::/32 is not inside 2001::/23, but ordering by
    // prefix keeps the rule simple if ranges ever nest).
    const ParsedSpecial* best = nullptr;
    for (const auto& s : special_ranges())
        if (s.range.contains(address) && (!best || s.range.prefix > best->range.prefix)) best = &s;
    if (best) return best->cls;
    // IPv6 global unicast is 2000::/3; anything else unlisted is not the internet either.
    static const IpRange global_unicast = *parse_ip_range("2000::/3");
    if (address.is_v6() && !global_unicast.contains(address))
        return AddressClass{AddressKind::special, "outside 2000::/3", "not global unicast"};
    return AddressClass{};
}

}  // namespace deskbox::network
