// IP addresses and CIDR ranges (IPv4 and IPv6) for network policies, and the table of special
// ranges a sandbox never reaches unless a policy names them.
#pragma once

#include <boost/asio/ip/address.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace deskbox::network {

using IpAddress = boost::asio::ip::address;

// An address, with IPv4-mapped IPv6 (::ffff:a.b.c.d) turned into the IPv4 address it carries, so
// that a policy on 10.0.0.0/8 cannot be walked around by writing the address the other way.
IpAddress canonical(const IpAddress& address);

// `base/prefix`; the base has no bits set past the prefix.
struct IpRange {
    IpAddress base;
    int prefix = 0;

    bool contains(const IpAddress& address) const;
    std::string to_string() const;  // "10.0.0.0/8", "2001:db8::/32", "1.2.3.4/32"
    bool operator==(const IpRange&) const = default;
};

// Parses "1.2.3.4", "10.0.0.0/8", "2001:db8::/32", "::1". A bare address is a /32 (/128).
// nullopt if `text` is not an address or range; `error` (if given) then says why, e.g. "host
// bits set past /8 (did you mean 10.0.0.0/8?)".
std::optional<IpRange> parse_ip_range(std::string_view text, std::string* error = nullptr);
// Parses one address (no prefix), nullopt if it is not one.
std::optional<IpAddress> parse_ip_address(std::string_view text);

// What an address is, as far as sandbox egress cares.
enum class AddressKind {
    public_unicast,  // the internet
    special,         // RFC 1918, CGNAT, ULA, benchmark, documentation, 6to4 ...: only if allowed
    never,           // loopback, link-local (169.254.169.254), multicast, unspecified, broadcast
};
struct AddressClass {
    AddressKind kind = AddressKind::public_unicast;
    const char* range = "";  // the special range it falls in, e.g. "10.0.0.0/8"
    const char* what = "";   // e.g. "private (RFC 1918)"
};
AddressClass classify(const IpAddress& address);

}  // namespace deskbox::network
