// The pure parts of the sandbox network egress filter (server/network), without sockets: IP
// ranges and their classes, the policy and its decisions, TLS/HTTP sniffing, DNS query parsing
// and answer filtering, the DNS memory, egress counters and the rate limiter. Test data comes
// from real tools in-process: an OpenSSL client writes the ClientHellos, ldns builds the DNS
// messages.
#include <gtest/gtest.h>

// ldns defines `true`, `false` and `bool` as macros unless stdbool.h came first.
#include <stdbool.h>

#include <ldns/ldns.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/network/dns_memory.hpp"
#include "server/network/dns_message.hpp"
#include "server/network/egress_stats.hpp"
#include "server/network/ip_range.hpp"
#include "server/network/network_policy.hpp"
#include "server/network/rate_limiter.hpp"
#include "server/network/sniff.hpp"

namespace deskbox::network {
namespace {

using nlohmann::json;

// ------------------------------------------------------------------ helpers

// An address as written, IPv4-mapped IPv6 left as it is (parse_ip_address would unmap it).
IpAddress raw_ip(const std::string& text) {
    return boost::asio::ip::make_address(text);
}

IpRange range(std::string_view text) {
    std::string error;
    auto r = parse_ip_range(text, &error);
    if (!r) throw std::invalid_argument(std::string(text) + ": " + error);
    return *r;
}

NetworkPolicy policy(const char* json_text) {
    return NetworkPolicy::parse(json::parse(json_text));
}

struct ParseFailure {
    std::string field;
    std::string what;
};

// The PolicyError that parsing `value` throws; a test failure if it parses.
ParseFailure parse_failure(const json& value, const std::string& field = "network") {
    try {
        NetworkPolicy::parse(value, field);
    } catch (const PolicyError& e) {
        return {e.field(), e.what()};
    }
    ADD_FAILURE() << "parsed without error: " << value.dump();
    return {};
}

HostView host_with(std::vector<std::string> host_addresses,
                   std::vector<std::string> public_ranges = {}) {
    HostView view;
    view.is_host = [addresses = std::move(host_addresses)](const IpAddress& a) {
        for (const auto& text : addresses)
            if (raw_ip(text) == a) return true;
        return false;
    };
    for (const auto& text : public_ranges) view.public_ranges.push_back(range(text));
    return view;
}

Destination destination(const std::string& address, std::optional<std::string> name = std::nullopt,
                        bool resolves = false, WireProtocol protocol = WireProtocol::tls,
                        bool learned = false) {
    Destination d;
    d.address = raw_ip(address);
    d.port = 443;
    d.protocol = protocol;
    d.name = std::move(name);
    d.name_resolves_to_address = resolves;
    d.learned_from_dns = learned;
    return d;
}

// --- TLS: ClientHellos written by a real OpenSSL client, and surgery on them.

struct SslCtxFree {
    void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct SslFree {
    void operator()(SSL* s) const { SSL_free(s); }
};

// The first bytes a real OpenSSL client sends (its ClientHello in TLS records). `max_version`
// 0 is OpenSSL's default (TLS 1.3).
std::string openssl_client_hello(const char* server_name, int max_version = 0) {
    std::unique_ptr<SSL_CTX, SslCtxFree> ctx(SSL_CTX_new(TLS_client_method()));
    if (!ctx) throw std::runtime_error("SSL_CTX_new failed");
    if (max_version != 0 && SSL_CTX_set_max_proto_version(ctx.get(), max_version) != 1)
        throw std::runtime_error("SSL_CTX_set_max_proto_version failed");
    std::unique_ptr<SSL, SslFree> ssl(SSL_new(ctx.get()));
    if (!ssl) throw std::runtime_error("SSL_new failed");
    BIO* in = BIO_new(BIO_s_mem());
    BIO* out = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl.get(), in, out);  // the SSL owns both now
    if (server_name && SSL_set_tlsext_host_name(ssl.get(), server_name) != 1)
        throw std::runtime_error("SSL_set_tlsext_host_name failed");
    SSL_set_connect_state(ssl.get());
    int rc = SSL_connect(ssl.get());
    if (rc > 0 || SSL_get_error(ssl.get(), rc) != SSL_ERROR_WANT_READ)
        throw std::runtime_error("SSL_connect did not wait for the server");
    std::string bytes(BIO_ctrl_pending(out), '\0');
    if (bytes.empty() || BIO_read(out, bytes.data(), static_cast<int>(bytes.size())) !=
                             static_cast<int>(bytes.size()))
        throw std::runtime_error("no ClientHello in the write BIO");
    return bytes;
}

std::string u16(std::size_t n) {
    return {static_cast<char>((n >> 8) & 0xff), static_cast<char>(n & 0xff)};
}
std::string u24(std::size_t n) {
    return static_cast<char>((n >> 16) & 0xff) + u16(n);
}

// The handshake bytes a run of TLS records carries.
std::string handshake_of(std::string_view records) {
    std::string out;
    while (records.size() >= 5) {
        std::size_t len =
            (static_cast<std::uint8_t>(records[3]) << 8) | static_cast<std::uint8_t>(records[4]);
        out.append(records.substr(5, len));
        records.remove_prefix(std::min(records.size(), 5 + len));
    }
    return out;
}

// `handshake` framed as TLS handshake records, a new record starting at each of `cuts`.
std::string in_records(std::string_view handshake, std::vector<std::size_t> cuts = {}) {
    std::string out;
    std::size_t start = 0;
    cuts.push_back(handshake.size());
    for (std::size_t cut : cuts) {
        std::string_view piece = handshake.substr(start, cut - start);
        out += "\x16\x03\x01" + u16(piece.size());
        out.append(piece);
        start = cut;
    }
    return out;
}

// `handshake` in records of at most `size` bytes each.
std::string in_records_of(std::string_view handshake, std::size_t size) {
    std::vector<std::size_t> cuts;
    for (std::size_t at = size; at < handshake.size(); at += size) cuts.push_back(at);
    return in_records(handshake, cuts);
}

// A ClientHello taken apart at its extensions, to edit them.
struct ClientHello {
    std::string fixed;  // version, random, session id, cipher suites, compression methods
    std::vector<std::pair<std::uint16_t, std::string>> extensions;

    static ClientHello from_handshake(std::string_view handshake) {
        auto byte = [&](std::size_t at) { return static_cast<std::uint8_t>(handshake.at(at)); };
        if (byte(0) != 1) throw std::runtime_error("not a ClientHello");
        std::size_t end = 4 + ((byte(1) << 16) | (byte(2) << 8) | byte(3));
        std::size_t pos = 4 + 2 + 32;
        pos += 1 + byte(pos);                           // session id
        pos += 2 + ((byte(pos) << 8) | byte(pos + 1));  // cipher suites
        pos += 1 + byte(pos);                           // compression methods
        ClientHello hello;
        hello.fixed = std::string(handshake.substr(4, pos - 4));
        pos += 2;  // extensions length
        while (pos < end) {
            std::uint16_t type = static_cast<std::uint16_t>((byte(pos) << 8) | byte(pos + 1));
            std::size_t len = (byte(pos + 2) << 8) | byte(pos + 3);
            hello.extensions.emplace_back(type, std::string(handshake.substr(pos + 4, len)));
            pos += 4 + len;
        }
        return hello;
    }

    std::string to_handshake() const {
        std::string exts;
        for (const auto& [type, body] : extensions) exts += u16(type) + u16(body.size()) + body;
        std::string body = fixed + u16(exts.size()) + exts;
        return "\x01" + u24(body.size()) + body;
    }

    std::string* extension(std::uint16_t type) {
        for (auto& [t, body] : extensions)
            if (t == type) return &body;
        return nullptr;
    }
};

constexpr std::uint16_t kServerNameExtension = 0;
constexpr std::uint16_t kPaddingExtension = 21;

// A server_name extension body with these (name type, name) entries.
std::string server_name_body(const std::vector<std::pair<std::uint8_t, std::string>>& entries) {
    std::string list;
    for (const auto& [type, name] : entries)
        list += static_cast<char>(type) + u16(name.size()) + name;
    return u16(list.size()) + list;
}

// OpenSSL's TLS 1.3 ClientHello for example.org with its server_name replaced by `sni_body`.
std::string hello_with_server_name(const std::string& sni_body) {
    auto hello = ClientHello::from_handshake(handshake_of(openssl_client_hello("example.org")));
    std::string* sni = hello.extension(kServerNameExtension);
    if (!sni) throw std::runtime_error("OpenSSL sent no server_name");
    *sni = sni_body;
    return in_records(hello.to_handshake());
}

// OpenSSL's ClientHello for example.org grown by a padding extension to about `size` bytes.
std::string padded_handshake(std::size_t size) {
    auto hello = ClientHello::from_handshake(handshake_of(openssl_client_hello("example.org")));
    hello.extensions.emplace_back(kPaddingExtension, std::string(size, '\0'));
    return hello.to_handshake();
}

// --- DNS: messages built with ldns.

struct LdnsPacketFree {
    void operator()(ldns_pkt* p) const { ldns_pkt_free(p); }
};
using LdnsPacket = std::unique_ptr<ldns_pkt, LdnsPacketFree>;

std::string ldns_text(char* text) {
    std::string out = text ? text : "";
    std::free(text);
    return out;
}

LdnsPacket ldns_query(const char* name, ldns_rr_type type, std::uint16_t id) {
    ldns_rdf* owner = ldns_dname_new_frm_str(name);
    if (!owner) throw std::runtime_error(std::string("ldns cannot read the name ") + name);
    LdnsPacket p(ldns_pkt_query_new(owner, type, LDNS_RR_CLASS_IN, LDNS_RD));
    if (!p) throw std::runtime_error("ldns_pkt_query_new failed");
    ldns_pkt_set_id(p.get(), id);
    return p;
}

// Adds a record in zone-file syntax to `section` (a question is "name. IN TYPE").
void push(ldns_pkt* p, ldns_pkt_section section, const std::string& text) {
    ldns_rr* rr = nullptr;
    ldns_status status = section == LDNS_SECTION_QUESTION
                             ? ldns_rr_new_question_frm_str(&rr, text.c_str(), nullptr, nullptr)
                             : ldns_rr_new_frm_str(&rr, text.c_str(), 0, nullptr, nullptr);
    if (status != LDNS_STATUS_OK)
        throw std::runtime_error("ldns cannot read '" + text +
                                 "': " + ldns_get_errorstr_by_id(status));
    ldns_pkt_push_rr(p, section, rr);
}

// An upstream resolver's answer to `question` ("example.org. IN A"), no records yet.
LdnsPacket ldns_answer(const std::string& question, std::uint16_t id) {
    LdnsPacket p(ldns_pkt_new());
    ldns_pkt_set_id(p.get(), id);
    ldns_pkt_set_qr(p.get(), true);
    ldns_pkt_set_rd(p.get(), true);
    ldns_pkt_set_ra(p.get(), true);
    push(p.get(), LDNS_SECTION_QUESTION, question);
    return p;
}

std::string to_wire(const ldns_pkt* p) {
    std::uint8_t* bytes = nullptr;
    std::size_t size = 0;
    if (ldns_pkt2wire(&bytes, p, &size) != LDNS_STATUS_OK)
        throw std::runtime_error("ldns_pkt2wire failed");
    std::string out(reinterpret_cast<char*>(bytes), size);
    std::free(bytes);
    return out;
}

LdnsPacket from_wire(std::string_view wire) {
    ldns_pkt* p = nullptr;
    ldns_status status =
        ldns_wire2pkt(&p, reinterpret_cast<const std::uint8_t*>(wire.data()), wire.size());
    if (status != LDNS_STATUS_OK)
        throw std::runtime_error(std::string("ldns cannot read the message: ") +
                                 ldns_get_errorstr_by_id(status));
    return LdnsPacket(p);
}

// Each record of `list` as "owner TYPE rdata" ("example.org. A 93.184.216.34").
std::vector<std::string> records(const ldns_rr_list* list) {
    std::vector<std::string> out;
    for (std::size_t i = 0; list && i < ldns_rr_list_rr_count(list); ++i) {
        const ldns_rr* rr = ldns_rr_list_rr(list, i);
        std::string line = ldns_text(ldns_rdf2str(ldns_rr_owner(rr))) + " " +
                           ldns_text(ldns_rr_type2str(ldns_rr_get_type(rr)));
        for (std::size_t f = 0; f < ldns_rr_rd_count(rr); ++f)
            line += " " + ldns_text(ldns_rdf2str(ldns_rr_rdf(rr, f)));
        out.push_back(line);
    }
    return out;
}

// DNS names compare without case (and ldns's name compression keeps the case it saw first).
std::vector<std::string> lower(std::vector<std::string> lines) {
    for (auto& line : lines)
        for (char& c : line) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return lines;
}

std::vector<std::string> addresses(const std::vector<DnsAddress>& list) {
    std::vector<std::string> out;
    for (const auto& a : list)
        out.push_back(a.name + " " + a.address.to_string() + " " + std::to_string(a.ttl));
    return out;
}

DnsQuery parsed_query(const ldns_pkt* query) {
    std::string error;
    auto q = parse_dns_query(to_wire(query), &error);
    if (!q) throw std::runtime_error("parse_dns_query refused the query: " + error);
    return *q;
}

const auto kAnyAddress = [](const IpAddress&) { return true; };

// ------------------------------------------------------------------ IP ranges

TEST(IpRangeTest, BareAddressesAreSingleHostRanges) {
    EXPECT_EQ(range("1.2.3.4"), (IpRange{raw_ip("1.2.3.4"), 32}));
    EXPECT_EQ(range("2001:db8::1"), (IpRange{raw_ip("2001:db8::1"), 128}));
    EXPECT_EQ(range("1.2.3.4").to_string(), "1.2.3.4/32");
    EXPECT_TRUE(range("1.2.3.4").contains(raw_ip("1.2.3.4")));
    EXPECT_FALSE(range("1.2.3.4").contains(raw_ip("1.2.3.5")));
}

TEST(IpRangeTest, ContainsHonoursThePrefixBoundaries) {
    auto ten = range("10.0.0.0/8");
    EXPECT_EQ(ten.to_string(), "10.0.0.0/8");
    EXPECT_TRUE(ten.contains(raw_ip("10.0.0.0")));
    EXPECT_TRUE(ten.contains(raw_ip("10.255.255.255")));
    EXPECT_FALSE(ten.contains(raw_ip("11.0.0.0")));
    EXPECT_FALSE(ten.contains(raw_ip("9.255.255.255")));
    auto cgnat = range("100.64.0.0/10");
    EXPECT_TRUE(cgnat.contains(raw_ip("100.127.255.255")));
    EXPECT_FALSE(cgnat.contains(raw_ip("100.128.0.0")));
    // A prefix that does not end on a byte boundary, in IPv6.
    auto half = range("2001:db8:8000::/33");
    EXPECT_EQ(half.to_string(), "2001:db8:8000::/33");
    EXPECT_TRUE(half.contains(raw_ip("2001:db8:ffff::1")));
    EXPECT_FALSE(half.contains(raw_ip("2001:db8:7fff::1")));
}

TEST(IpRangeTest, ZeroPrefixCoversItsOwnFamilyOnly) {
    EXPECT_TRUE(range("0.0.0.0/0").contains(raw_ip("255.1.2.3")));
    EXPECT_FALSE(range("0.0.0.0/0").contains(raw_ip("2001:db8::1")));
    EXPECT_TRUE(range("::/0").contains(raw_ip("2001:db8::1")));
    EXPECT_FALSE(range("::/0").contains(raw_ip("1.2.3.4")));
}

TEST(IpRangeTest, ContainsSeesIPv4MappedAddressesAsIPv4) {
    EXPECT_TRUE(range("10.0.0.0/8").contains(raw_ip("::ffff:10.1.2.3")));
    EXPECT_FALSE(range("10.0.0.0/8").contains(raw_ip("::ffff:11.1.2.3")));
}

TEST(IpRangeTest, HostBitsPastThePrefixAreRejectedNamingTheRangeMeant) {
    std::string error;
    EXPECT_FALSE(parse_ip_range("10.0.0.1/8", &error));
    EXPECT_EQ(error, "host bits set past /8 (did you mean 10.0.0.0/8?)");
    EXPECT_FALSE(parse_ip_range("2001:db8::1/32", &error));
    EXPECT_EQ(error, "host bits set past /32 (did you mean 2001:db8::/32?)");
    EXPECT_FALSE(parse_ip_range("192.168.1.1/23", &error));
    EXPECT_EQ(error, "host bits set past /23 (did you mean 192.168.0.0/23?)");
}

TEST(IpRangeTest, IPv4MappedRangesBecomeIPv4Ranges) {
    EXPECT_EQ(range("::ffff:10.0.0.0/104"), range("10.0.0.0/8"));
    EXPECT_EQ(range("::ffff:1.2.3.4"), range("1.2.3.4"));
    std::string error;
    EXPECT_FALSE(parse_ip_range("::ffff:0.0.0.0/95", &error));
    EXPECT_EQ(error, "an IPv4-mapped range needs a prefix of at least /96");
    EXPECT_FALSE(parse_ip_range("::ffff:10.0.0.1/104", &error));
    EXPECT_EQ(error, "host bits set past /8 (did you mean 10.0.0.0/8?)");
}

TEST(IpRangeTest, MalformedTextIsRejectedWithAReason) {
    for (const char* text :
         {"", "example.org", "10.0.0", "256.0.0.1", "1.2.3.4 ", "/8", "::g", "fe80::1%1"}) {
        std::string error;
        EXPECT_FALSE(parse_ip_range(text, &error)) << text;
        EXPECT_EQ(error, "not an IP address or CIDR range") << text;
    }
    for (const char* text : {"10.0.0.0/", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/8x",
                             "10.0.0.0/ 8", "10.0.0.0/8/8"}) {
        std::string error;
        EXPECT_FALSE(parse_ip_range(text, &error)) << text;
        EXPECT_EQ(error, "prefix length must be 0..32") << text;
    }
    std::string error;
    EXPECT_FALSE(parse_ip_range("::/129", &error));
    EXPECT_EQ(error, "prefix length must be 0..128");
    EXPECT_FALSE(parse_ip_range(std::string(65, '1')));  // no error out-parameter: no crash
}

TEST(IpAddressTest, ParseUnmapsIPv4MappedAndRejectsRangesAndScopes) {
    EXPECT_EQ(parse_ip_address("::ffff:10.0.0.1"), raw_ip("10.0.0.1"));
    EXPECT_EQ(parse_ip_address("2001:db8::1"), raw_ip("2001:db8::1"));
    EXPECT_FALSE(parse_ip_address("10.0.0.0/8"));
    EXPECT_FALSE(parse_ip_address("fe80::1%1"));  // an interface of the host
    EXPECT_FALSE(parse_ip_address("example.org"));
    EXPECT_FALSE(parse_ip_address(""));
    EXPECT_EQ(canonical(raw_ip("::ffff:127.0.0.1")), raw_ip("127.0.0.1"));
    EXPECT_EQ(canonical(raw_ip("::1")), raw_ip("::1"));
}

TEST(ClassifyTest, SortsAddressesIntoPublicSpecialAndNever) {
    struct Case {
        const char* address;
        AddressKind kind;
        const char* range;
    };
    const Case cases[] = {
        {"8.8.8.8", AddressKind::public_unicast, ""},
        {"93.184.216.34", AddressKind::public_unicast, ""},
        {"2606:4700::1111", AddressKind::public_unicast, ""},
        {"10.1.2.3", AddressKind::special, "10.0.0.0/8"},
        {"172.16.0.1", AddressKind::special, "172.16.0.0/12"},
        {"172.31.255.255", AddressKind::special, "172.16.0.0/12"},
        {"172.32.0.0", AddressKind::public_unicast, ""},
        {"192.168.1.1", AddressKind::special, "192.168.0.0/16"},
        {"100.64.0.1", AddressKind::special, "100.64.0.0/10"},
        {"100.128.0.1", AddressKind::public_unicast, ""},
        {"198.18.0.1", AddressKind::special, "198.18.0.0/15"},
        {"198.19.255.255", AddressKind::special, "198.18.0.0/15"},
        {"198.20.0.1", AddressKind::public_unicast, ""},
        {"192.0.2.1", AddressKind::special, "192.0.2.0/24"},
        {"240.0.0.1", AddressKind::special, "240.0.0.0/4"},
        {"fc00::1", AddressKind::special, "fc00::/7"},
        {"fdff:ffff::1", AddressKind::special, "fc00::/7"},
        {"2001:db8::1", AddressKind::special, "2001:db8::/32"},
        {"2001::1", AddressKind::special, "2001::/23"},
        {"64:ff9b::808:808", AddressKind::special, "64:ff9b::/96"},
        {"::ffff:10.0.0.1", AddressKind::special, "10.0.0.0/8"},
        {"127.0.0.1", AddressKind::never, "127.0.0.0/8"},
        {"127.255.0.1", AddressKind::never, "127.0.0.0/8"},
        {"169.254.169.254", AddressKind::never, "169.254.0.0/16"},
        {"0.0.0.0", AddressKind::never, "0.0.0.0/8"},
        {"224.0.0.251", AddressKind::never, "224.0.0.0/4"},
        {"255.255.255.255", AddressKind::never, "255.255.255.255/32"},
        {"::", AddressKind::never, "::/128"},
        {"::1", AddressKind::never, "::1/128"},
        {"fe80::1", AddressKind::never, "fe80::/10"},
        {"ff02::1", AddressKind::never, "ff00::/8"},
        {"::ffff:127.0.0.1", AddressKind::never, "127.0.0.0/8"},
    };
    for (const auto& c : cases) {
        auto cls = classify(raw_ip(c.address));
        EXPECT_EQ(cls.kind, c.kind) << c.address;
        EXPECT_STREQ(cls.range, c.range) << c.address;
    }
}

// ------------------------------------------------------------------ policy parsing

TEST(NormalizeHostNameTest, LowerCasesAndDropsOneTrailingDot) {
    EXPECT_EQ(normalize_host_name("Example.ORG."), "example.org");
    EXPECT_EQ(normalize_host_name("xn--r8jz45g.jp"), "xn--r8jz45g.jp");
    EXPECT_EQ(normalize_host_name("_dmarc.Example.org"), "_dmarc.example.org");
    EXPECT_EQ(normalize_host_name("localhost"), "localhost");
    EXPECT_FALSE(normalize_host_name("example.org.."));
    EXPECT_FALSE(normalize_host_name("."));
    EXPECT_FALSE(normalize_host_name(""));
    EXPECT_FALSE(normalize_host_name(".example.org"));
    EXPECT_FALSE(normalize_host_name("a..b"));
}

TEST(NormalizeHostNameTest, EnforcesLabelAndNameLengths) {
    EXPECT_TRUE(normalize_host_name(std::string(63, 'a') + ".org"));
    EXPECT_FALSE(normalize_host_name(std::string(64, 'a') + ".org"));
    // 63+1+63+1+63+1+61 = 253 characters, the most a name may have (a trailing dot aside).
    std::string longest = std::string(63, 'a') + "." + std::string(63, 'b') + "." +
                          std::string(63, 'c') + "." + std::string(61, 'd');
    ASSERT_EQ(longest.size(), 253u);
    EXPECT_EQ(normalize_host_name(longest), longest);
    EXPECT_EQ(normalize_host_name(longest + "."), longest);
    EXPECT_FALSE(normalize_host_name(longest + "d"));
}

TEST(NormalizeHostNameTest, RejectsCharactersOutsideHostNames) {
    for (const char* name : {"exa mple.org", "example.org:443", "*.example.org", "ex/ample.org",
                             "[::1]", "caf\xc3\xa9.example"})
        EXPECT_FALSE(normalize_host_name(name)) << name;
    EXPECT_FALSE(normalize_host_name(std::string_view("a\0b", 3)));
}

TEST(NetworkPolicyParseTest, BooleansMeanClosedOrTheInternet) {
    auto closed = NetworkPolicy::parse(false);
    EXPECT_FALSE(closed.enabled());
    EXPECT_FALSE(closed.allows_internet());
    EXPECT_EQ(closed.to_json(), json(false));
    auto open = NetworkPolicy::parse(true);
    EXPECT_TRUE(open.enabled());
    EXPECT_TRUE(open.allows_internet());
    EXPECT_TRUE(open.allow().empty());
    EXPECT_TRUE(open.deny().empty());
    EXPECT_EQ(open.to_json(), json(true));
    EXPECT_EQ(NetworkPolicy::closed().to_json(), json(false));
    EXPECT_EQ(NetworkPolicy::open().to_json(), json(true));
}

TEST(NetworkPolicyParseTest, ObjectWithoutAllowIsTheInternetMinusDeny) {
    auto empty = policy("{}");
    EXPECT_TRUE(empty.enabled());
    EXPECT_TRUE(empty.allows_internet());
    EXPECT_EQ(empty.to_json(), json(true));

    auto minus = policy(R"({"deny": ["ads.example"]})");
    EXPECT_TRUE(minus.allows_internet());
    ASSERT_EQ(minus.deny().size(), 1u);
    EXPECT_EQ(minus.deny()[0].domain, "ads.example");

    // An empty allow list is not the internet: it allows nothing.
    auto nothing = policy(R"({"allow": []})");
    EXPECT_TRUE(nothing.enabled());
    EXPECT_FALSE(nothing.allows_internet());
    EXPECT_EQ(nothing.to_json(), json::parse(R"({"allow": []})"));
}

TEST(NetworkPolicyParseTest, ParsesEveryKindOfEntryNormalized) {
    auto p = policy(R"({"allow": ["Example.ORG.", "*.CDN.example.net", "1password.com",
                                  "10.0.0.0/8", "93.184.216.34", "2001:DB8::/32",
                                  "::ffff:10.0.0.0/104"],
                        "deny": ["*.ads.example.net", "10.9.0.0/16"]})");
    ASSERT_EQ(p.allow().size(), 7u);
    EXPECT_EQ(p.allow()[0].kind, PolicyEntry::Kind::domain);
    EXPECT_EQ(p.allow()[0].domain, "example.org");
    EXPECT_EQ(p.allow()[1].kind, PolicyEntry::Kind::wildcard);
    EXPECT_EQ(p.allow()[1].domain, "cdn.example.net");
    EXPECT_EQ(p.allow()[1].to_string(), "*.cdn.example.net");
    // A name may start with a digit: only what parses as an address is one.
    EXPECT_EQ(p.allow()[2].kind, PolicyEntry::Kind::domain);
    EXPECT_EQ(p.allow()[2].domain, "1password.com");
    EXPECT_EQ(p.allow()[3].kind, PolicyEntry::Kind::range);
    EXPECT_EQ(p.allow()[3].range, range("10.0.0.0/8"));
    EXPECT_EQ(p.allow()[4].range, range("93.184.216.34/32"));
    EXPECT_EQ(p.allow()[4].to_string(), "93.184.216.34");  // a single address written as one
    EXPECT_EQ(p.allow()[5].to_string(), "2001:db8::/32");
    EXPECT_EQ(p.allow()[6].to_string(), "10.0.0.0/8");
    ASSERT_EQ(p.deny().size(), 2u);
    EXPECT_EQ(p.deny()[0].to_string(), "*.ads.example.net");
    EXPECT_EQ(p.deny()[1].to_string(), "10.9.0.0/16");
}

TEST(NetworkPolicyParseTest, ErrorsNameTheOffendingField) {
    struct Case {
        const char* policy;
        const char* field;
        const char* says;
    };
    const Case cases[] = {
        {"42", "network", "expected true, false or"},
        {R"("yes")", "network", "expected true, false or"},
        {"null", "network", "expected true, false or"},
        {"[]", "network", "expected true, false or"},
        {R"({"allow": "example.org"})", "network.allow", "expected an array of strings"},
        {R"({"deny": {"a": 1}})", "network.deny", "expected an array of strings"},
        {R"({"allow": ["a.example", "b.example", 5]})", "network.allow[2]", "expected a string"},
        {R"({"allow": ["a.example", null]})", "network.allow[1]", "expected a string"},
        {R"({"deny": [["x"]]})", "network.deny[0]", "expected a string"},
        {R"({"allow": [""]})", "network.allow[0]", "empty entry"},
        {R"({"allow": ["exa mple.org"]})", "network.allow[0]", "is not a domain"},
        {R"({"allow": ["ok.example", "a_b c"]})", "network.allow[1]", "is not a domain"},
        {R"({"allow": ["10.0.0.1/8"]})", "network.allow[0]", "did you mean 10.0.0.0/8?"},
        {R"({"deny": ["ok.example", "300.1.1.1"]})", "network.deny[1]", "not an IP address"},
        {R"({"allow": ["10.0.0.0/33"]})", "network.allow[0]", "prefix length must be 0..32"},
        {R"({"allow": ["fe80::1%1"]})", "network.allow[0]", "not an IP address"},
        {R"({"allow": ["example.*"]})", "network.allow[0]", "only allowed as the first label"},
        {R"({"allow": ["www.*.example.org"]})", "network.allow[0]", "only allowed as the first"},
        {R"({"allow": ["*example.org"]})", "network.allow[0]", "only allowed as the first label"},
        {R"({"allow": ["*"]})", "network.allow[0]", "only allowed as the first label"},
        {R"({"allow": ["*.*.example.org"]})", "network.allow[0]", "is not a domain"},
        {R"({"allow": ["*.org"]})", "network.allow[0]", "at least two labels"},
        {R"({"allow": [], "allowed": []})", "network.allowed",
         "unknown field (allow, deny, rules, proxy)"},
        {R"({"mode": "internet"})", "network.mode", "unknown field"},
    };
    for (const auto& c : cases) {
        auto failure = parse_failure(json::parse(c.policy));
        EXPECT_EQ(failure.field, c.field) << c.policy;
        EXPECT_EQ(failure.what.rfind(std::string(c.field) + ": ", 0), 0u)
            << c.policy << " -> " << failure.what;
        EXPECT_NE(failure.what.find(c.says), std::string::npos)
            << c.policy << " -> " << failure.what;
    }
}

TEST(NetworkPolicyParseTest, ErrorsQuoteTheEntryWithoutControlCharacters) {
    auto failure = parse_failure(json{{"allow", json::array({"bad\nname example"})}});
    EXPECT_NE(failure.what.find("'bad?name example'"), std::string::npos) << failure.what;
    auto long_failure = parse_failure(json{{"allow", json::array({std::string(300, '!')})}});
    EXPECT_NE(long_failure.what.find(std::string(80, '!') + "...'"), std::string::npos);
    EXPECT_EQ(long_failure.what.find(std::string(81, '!')), std::string::npos);
}

TEST(NetworkPolicyParseTest, FieldNamesStartWithTheCallersName) {
    auto failure = parse_failure(json::parse(R"({"deny": ["ok.example", 1]})"), "sandbox.network");
    EXPECT_EQ(failure.field, "sandbox.network.deny[1]");
}

TEST(NetworkPolicyParseTest, AtMostMaxEntriesPerList) {
    json allow = json::array();
    for (std::size_t i = 0; i < kMaxPolicyEntries; ++i)
        allow.push_back("host" + std::to_string(i) + ".example");
    auto full = NetworkPolicy::parse(json{{"allow", allow}, {"deny", allow}});
    EXPECT_EQ(full.allow().size(), kMaxPolicyEntries);
    EXPECT_EQ(full.deny().size(), kMaxPolicyEntries);

    allow.push_back("one-too-many.example");
    auto failure = parse_failure(json{{"allow", allow}});
    EXPECT_EQ(failure.field, "network.allow");
    EXPECT_NE(failure.what.find("at most 256 entries"), std::string::npos) << failure.what;
    EXPECT_EQ(parse_failure(json{{"deny", allow}}).field, "network.deny");
}

TEST(NetworkPolicyParseTest, ToJsonRoundTripsThroughParse) {
    for (const char* text :
         {"true", "false", R"({"allow": []})", R"({"deny": ["ads.example", "10.9.0.0/16"]})",
          R"({"allow": ["Example.ORG.", "*.cdn.example", "10.0.0.0/8", "1.2.3.4", "fd00::/8",
                           "::ffff:192.168.0.0/112"], "deny": ["bad.cdn.example"]})"}) {
        auto first = policy(text);
        json written = first.to_json();
        auto second = NetworkPolicy::parse(written);
        EXPECT_EQ(second.to_json(), written) << text;
        EXPECT_EQ(second.enabled(), first.enabled()) << text;
        EXPECT_EQ(second.allows_internet(), first.allows_internet()) << text;
        ASSERT_EQ(second.allow().size(), first.allow().size()) << text;
        for (std::size_t i = 0; i < first.allow().size(); ++i)
            EXPECT_EQ(second.allow()[i].to_string(), first.allow()[i].to_string()) << text;
    }
    // What to_json writes is the normalized form.
    EXPECT_EQ(policy(R"({"allow": ["Example.ORG.", "::ffff:192.168.0.0/112"]})").to_json(),
              json::parse(R"({"allow": ["example.org", "192.168.0.0/16"]})"));
    EXPECT_EQ(policy(R"({"deny": []})").to_json(), json(true));
}

TEST(NetworkPolicyParseTest, HasNameRulesOnlyWithDomainOrWildcardEntries) {
    EXPECT_FALSE(NetworkPolicy::open().has_name_rules());
    EXPECT_FALSE(NetworkPolicy::closed().has_name_rules());
    EXPECT_FALSE(policy(R"({"allow": ["10.0.0.0/8"], "deny": ["10.1.0.0/16"]})").has_name_rules());
    EXPECT_TRUE(policy(R"({"allow": ["example.org"]})").has_name_rules());
    EXPECT_TRUE(policy(R"({"deny": ["*.ads.example"]})").has_name_rules());
}

TEST(NetworkPolicyTest, DescribeSaysTheMode) {
    EXPECT_EQ(NetworkPolicy::closed().describe()["mode"], "off");
    EXPECT_EQ(NetworkPolicy::closed().describe()["enabled"], false);
    auto internet = policy(R"({"deny": ["ads.example"]})").describe();
    EXPECT_EQ(internet["mode"], "internet");
    EXPECT_EQ(internet["deny"], json::array({"ads.example"}));
    auto allowlist = policy(R"({"allow": ["example.org"]})").describe();
    EXPECT_EQ(allowlist["mode"], "allowlist");
    EXPECT_EQ(allowlist["allow"], json::array({"example.org"}));
}

// ------------------------------------------------------------------ policy decisions

TEST(PolicyEntryTest, WildcardMatchesNamesBelowTheDomainOnly) {
    auto p = policy(R"({"allow": ["*.example.org", "exact.example"]})");
    const auto& wildcard = p.allow()[0];
    EXPECT_TRUE(wildcard.matches_name("www.example.org"));
    EXPECT_TRUE(wildcard.matches_name("a.b.example.org"));
    EXPECT_FALSE(wildcard.matches_name("example.org"));
    EXPECT_FALSE(wildcard.matches_name("badexample.org"));
    EXPECT_FALSE(wildcard.matches_name(".example.org.evil"));
    EXPECT_FALSE(wildcard.matches_name("org"));
    const auto& exact = p.allow()[1];
    EXPECT_TRUE(exact.matches_name("exact.example"));
    EXPECT_FALSE(exact.matches_name("www.exact.example"));
    EXPECT_FALSE(policy(R"({"allow": ["10.0.0.0/8"]})").allow()[0].matches_name("10.0.0.0/8"));
}

TEST(NetworkPolicyTest, NameVerdictFollowsAllowAndDeny) {
    EXPECT_FALSE(NetworkPolicy::closed().name_verdict("example.org").allowed);
    EXPECT_EQ(NetworkPolicy::closed().name_verdict("example.org").reason, "the network is off");

    auto internet = policy(R"({"deny": ["*.ads.example"]})");
    EXPECT_TRUE(internet.name_verdict("anything.test").allowed);
    EXPECT_EQ(internet.name_verdict("anything.test").reason, "the internet");
    EXPECT_FALSE(internet.name_verdict("x.ads.example").allowed);
    EXPECT_EQ(internet.name_verdict("x.ads.example").reason, "denied by *.ads.example");
    EXPECT_TRUE(internet.name_verdict("ads.example").allowed);

    auto allowlist = policy(R"({"allow": ["example.org", "*.example.org", "10.0.0.0/8"],
                                "deny": ["ads.example.org"]})");
    EXPECT_EQ(allowlist.name_verdict("example.org").reason, "allowed by example.org");
    EXPECT_TRUE(allowlist.name_verdict("www.example.org").allowed);
    EXPECT_EQ(allowlist.name_verdict("www.example.org").reason, "allowed by *.example.org");
    // Deny wins over an allow that also matches.
    EXPECT_FALSE(allowlist.name_verdict("ads.example.org").allowed);
    EXPECT_EQ(allowlist.name_verdict("ads.example.org").reason, "denied by ads.example.org");
    EXPECT_FALSE(allowlist.name_verdict("example.net").allowed);
    EXPECT_EQ(allowlist.name_verdict("example.net").reason, "not in the allow list");
    // An address range allows no names.
    EXPECT_FALSE(allowlist.name_verdict("10.0.0.1").allowed);
}

TEST(NetworkPolicyTest, AnswerVerdictPassesOnlyAddressesTheSandboxMayReach) {
    HostView host = host_with({"203.0.113.9"});
    auto allowlist = policy(R"({"allow": ["example.org", "192.168.7.0/24", "127.0.0.1",
                                          "203.0.113.0/24"],
                                "deny": ["8.8.4.0/24"]})");
    EXPECT_TRUE(allowlist.answer_verdict(raw_ip("93.184.216.34"), host).allowed);
    EXPECT_TRUE(allowlist.answer_verdict(raw_ip("192.168.7.1"), host).allowed);
    EXPECT_FALSE(allowlist.answer_verdict(raw_ip("192.168.8.1"), host).allowed);
    EXPECT_FALSE(allowlist.answer_verdict(raw_ip("10.0.0.1"), host).allowed);
    EXPECT_FALSE(allowlist.answer_verdict(raw_ip("127.0.0.1"), host).allowed);
    EXPECT_FALSE(allowlist.answer_verdict(raw_ip("169.254.169.254"), host).allowed);
    EXPECT_FALSE(allowlist.answer_verdict(raw_ip("8.8.4.4"), host).allowed);
    EXPECT_TRUE(allowlist.answer_verdict(raw_ip("203.0.113.8"), host).allowed);
    EXPECT_FALSE(allowlist.answer_verdict(raw_ip("203.0.113.9"), host).allowed);
    EXPECT_EQ(allowlist.answer_verdict(raw_ip("203.0.113.9"), host).reason,
              "an address of the host");
    EXPECT_FALSE(NetworkPolicy::closed().answer_verdict(raw_ip("93.184.216.34"), host).allowed);
}

constexpr const char* kAllowlist = R"({
    "allow": ["example.org", "*.example.org", "93.184.216.34", "10.1.0.0/16", "100.64.0.0/10",
              "fd00::/8", "127.0.0.1", "169.254.169.254", "::1", "ff00::/8", "10.0.2.0/24"],
    "deny": ["ads.example.org", "10.1.2.0/24"]})";
constexpr const char* kInternetMinus = R"({"deny": ["*.tracker.example", "8.8.4.0/24"]})";

TEST(NetworkPolicyDecideTest, TableOfDestinations) {
    using P = WireProtocol;
    struct Case {
        const char* policy;
        const char* address;
        std::optional<std::string> name;
        bool resolves;
        WireProtocol protocol;
        bool learned;
        bool allowed;
        const char* reason;  // a part of the verdict's reason
    };
    const std::optional<std::string> none;
    const Case cases[] = {
        // The internet: public addresses, whatever the name says.
        {"true", "93.184.216.34", none, false, P::tls, false, true, "the internet"},
        {"true", "2606:4700::1111", none, false, P::tls, false, true, "the internet"},
        {"true", "1.1.1.1", "not-resolving.test", false, P::http, false, true, "the internet"},
        // Special ranges stay closed on the internet (DNS rebinding, the LAN).
        {"true", "10.0.0.1", none, false, P::tls, false, false, "(10.0.0.0/8)"},
        {"true", "192.168.1.1", "router.test", true, P::http, false, false, "192.168.0.0/16"},
        {"true", "100.64.1.1", none, false, P::other, true, false, "(100.64.0.0/10)"},
        {"true", "198.18.0.1", none, false, P::tls, false, false, "(198.18.0.0/15)"},
        {"true", "fd12::1", none, false, P::tls, false, false, "(fc00::/7)"},
        // Never reached.
        {"true", "127.0.0.1", none, false, P::tls, false, false, "loopback address"},
        {"true", "169.254.169.254", none, false, P::http, false, false, "link-local"},
        {"true", "::1", none, false, P::tls, false, false, "loopback address"},
        {"true", "ff02::1", none, false, P::other, false, false, "multicast address"},
        {"true", "255.255.255.255", none, false, P::other, false, false, "broadcast address"},
        {"true", "0.0.0.0", none, false, P::tls, false, false, "this network"},
        {"true", "10.0.2.2", none, false, P::tls, false, false, "the sandbox's own link"},
        {"true", "10.0.2.3", none, false, P::other, false, false, "the sandbox's own link"},
        // The internet minus deny.
        {kInternetMinus, "1.1.1.1", "x.tracker.example", true, P::tls, false, false,
         "denied by *.tracker.example"},
        {kInternetMinus, "1.1.1.1", "tracker.example", true, P::tls, false, true, "the internet"},
        {kInternetMinus, "8.8.4.4", none, false, P::tls, false, false, "denied by 8.8.4.0/24"},
        {kInternetMinus, "8.8.8.8", none, false, P::tls, false, true, "the internet"},
        // An allow list: a name must be allowed and resolve to the address.
        {kAllowlist, "1.1.1.1", "example.org", true, P::tls, false, true, "allowed by example.org"},
        {kAllowlist, "1.1.1.1", "www.example.org", true, P::http, false, true,
         "allowed by *.example.org"},
        {kAllowlist, "1.1.1.1", "example.org", false, P::tls, false, false,
         "'example.org' does not resolve to 1.1.1.1"},
        {kAllowlist, "1.1.1.1", "example.net", true, P::tls, false, false,
         "'example.net' is not in the allow list"},
        {kAllowlist, "1.1.1.1", "ads.example.org", true, P::tls, false, false,
         "denied by ads.example.org"},
        {kAllowlist, "1.1.1.1", none, false, P::tls, false, false,
         "1.1.1.1 is not in the allow list"},
        // An allowed name resolving into a special range stays blocked (DNS rebinding).
        {kAllowlist, "10.2.0.1", "example.org", true, P::tls, false, false, "(10.0.0.0/8)"},
        {kAllowlist, "fc00::1", "example.org", true, P::tls, false, false, "(fc00::/7)"},
        // Addresses allowed explicitly: any name (or none) but a denied one.
        {kAllowlist, "93.184.216.34", none, false, P::tls, false, true, "allowed by 93.184.216.34"},
        {kAllowlist, "93.184.216.34", "example.net", false, P::http, false, true,
         "allowed by 93.184.216.34"},
        {kAllowlist, "93.184.216.34", "ads.example.org", true, P::tls, false, false,
         "denied by ads.example.org"},
        {kAllowlist, "10.1.3.3", none, false, P::other, false, true, "allowed by 10.1.0.0/16"},
        {kAllowlist, "10.1.2.3", none, false, P::other, false, false, "denied by 10.1.2.0/24"},
        {kAllowlist, "100.64.0.1", none, false, P::tls, false, true, "allowed by 100.64.0.0/10"},
        {kAllowlist, "fd00::1", none, false, P::tls, false, true, "allowed by fd00::/8"},
        // Allowing a never-reached address by name changes nothing.
        {kAllowlist, "127.0.0.1", none, false, P::tls, false, false, "loopback address"},
        {kAllowlist, "169.254.169.254", none, false, P::http, false, false, "link-local"},
        {kAllowlist, "::1", none, false, P::tls, false, false, "loopback address"},
        {kAllowlist, "ff02::1", none, false, P::other, false, false, "multicast address"},
        {kAllowlist, "10.0.2.15", none, false, P::tls, false, false, "the sandbox's own link"},
        // An address DNS gave for an allowed name: only for protocols that carry no name.
        {kAllowlist, "1.1.1.1", none, false, P::other, true, true,
         "an address DNS gave for an allowed name"},
        {kAllowlist, "1.1.1.1", none, false, P::tls, true, false, "is not in the allow list"},
        {kAllowlist, "1.1.1.1", none, false, P::http, true, false, "is not in the allow list"},
        {kAllowlist, "1.1.1.1", none, false, P::other, false, false, "is not in the allow list"},
        {kAllowlist, "1.1.1.1", "example.net", true, P::other, true, false,
         "is not in the allow list"},
        // The network off.
        {"false", "93.184.216.34", "example.org", true, P::tls, false, false, "the network is off"},
        {"false", "127.0.0.1", none, false, P::tls, false, false, "the network is off"},
    };
    HostView host;  // no host addresses, no public ranges (and no is_host function at all)
    for (const auto& c : cases) {
        SCOPED_TRACE(std::string(c.policy) + " -> " + c.address + " " + c.name.value_or("-"));
        auto v = policy(c.policy).decide(
            destination(c.address, c.name, c.resolves, c.protocol, c.learned), host);
        EXPECT_EQ(v.allowed, c.allowed) << v.reason;
        EXPECT_NE(v.reason.find(c.reason), std::string::npos) << v.reason;
    }
}

TEST(NetworkPolicyDecideTest, IPv4MappedAddressesAreDecidedAsIPv4) {
    HostView host = host_with({"203.0.113.9"});
    auto internet = NetworkPolicy::open();
    auto v = internet.decide(destination("::ffff:10.0.0.1"), host);
    EXPECT_FALSE(v.allowed);
    EXPECT_NE(v.reason.find("10.0.0.0/8"), std::string::npos) << v.reason;
    EXPECT_FALSE(internet.decide(destination("::ffff:127.0.0.1"), host).allowed);
    EXPECT_FALSE(internet.decide(destination("::ffff:169.254.169.254"), host).allowed);
    EXPECT_EQ(internet.decide(destination("::ffff:10.0.2.2"), host).reason,
              "the sandbox's own link");
    EXPECT_EQ(internet.decide(destination("::ffff:203.0.113.9"), host).reason,
              "an address of the host");
    EXPECT_TRUE(internet.decide(destination("::ffff:93.184.216.34"), host).allowed);

    auto allowlist = policy(R"({"allow": ["10.0.0.0/8"], "deny": ["10.9.0.0/16"]})");
    EXPECT_TRUE(allowlist.decide(destination("::ffff:10.0.0.1"), host).allowed);
    EXPECT_FALSE(allowlist.decide(destination("::ffff:10.9.0.1"), host).allowed);
    // Mapped the other way round: the policy wrote the mapped form, the connection did not.
    auto mapped_policy = policy(R"({"allow": ["::ffff:10.0.0.0/104"]})");
    EXPECT_TRUE(mapped_policy.decide(destination("10.0.0.1"), host).allowed);
}

TEST(NetworkPolicyDecideTest, HostAddressesAreNeverReachedEvenWhenAllowedByRange) {
    HostView host = host_with({"8.8.8.8", "192.168.1.10", "2001:4860::8888"});
    auto allowlist = policy(R"({"allow": ["0.0.0.0/0", "::/0", "example.org"]})");
    for (const char* address : {"8.8.8.8", "192.168.1.10", "2001:4860::8888", "::ffff:8.8.8.8"}) {
        auto v = allowlist.decide(destination(address, "example.org", true), host);
        EXPECT_FALSE(v.allowed) << address;
        EXPECT_EQ(v.reason, "an address of the host") << address;
        EXPECT_FALSE(NetworkPolicy::open().decide(destination(address), host).allowed) << address;
    }
    // Its neighbours are reachable: 0.0.0.0/0 names every special range too.
    EXPECT_TRUE(allowlist.decide(destination("8.8.8.9"), host).allowed);
    EXPECT_TRUE(allowlist.decide(destination("192.168.1.11"), host).allowed);
    // ... but not the never-reached ones, nor the sandbox's own link.
    EXPECT_FALSE(allowlist.decide(destination("127.0.0.1"), host).allowed);
    EXPECT_FALSE(allowlist.decide(destination("10.0.2.2"), host).allowed);
    EXPECT_FALSE(allowlist.decide(destination("fe80::1"), host).allowed);
}

TEST(NetworkPolicyDecideTest, PublicRangesMakeASpecialRangePublic) {
    HostView lab = host_with({}, {"198.18.0.0/15", "127.0.0.0/8"});
    auto internet = NetworkPolicy::open();
    EXPECT_TRUE(internet.decide(destination("198.18.0.5"), lab).allowed);
    EXPECT_TRUE(internet.answer_verdict(raw_ip("198.19.1.1"), lab).allowed);
    EXPECT_FALSE(internet.decide(destination("198.18.0.5"), HostView{}).allowed);
    // Only the special ranges named; never-reached ones stay so whatever the operator says.
    EXPECT_FALSE(internet.decide(destination("10.0.0.1"), lab).allowed);
    EXPECT_FALSE(internet.decide(destination("127.0.0.1"), lab).allowed);

    auto allowlist = policy(R"({"allow": ["example.org"]})");
    EXPECT_TRUE(allowlist.decide(destination("198.18.0.5", "example.org", true), lab).allowed);
    EXPECT_FALSE(
        allowlist.decide(destination("198.18.0.5", "example.org", true), HostView{}).allowed);
    EXPECT_FALSE(allowlist.decide(destination("198.18.0.5", "example.net", true), lab).allowed);
}

// decide_by_address() settles a connection before its first bytes exactly when nothing those
// bytes (a name) or DNS could tell would change decide()'s answer.
TEST(NetworkPolicyDecideByAddressTest, SettlesExactlyWhatNoNameCouldChange) {
    const char* policies[] = {
        "false",
        "true",
        R"({"deny": ["*.tracker.example"]})",
        R"({"deny": ["8.8.4.0/24"]})",
        R"({"allow": ["example.org", "93.184.216.34", "10.1.0.0/16"]})",
        R"({"allow": ["example.org", "93.184.216.34"], "deny": ["ads.example.org"]})",
        R"({"allow": ["93.184.216.34"]})",
        R"({"allow": []})",
    };
    const char* addresses[] = {"1.1.1.1", "93.184.216.34",       "10.1.2.3", "10.9.9.9",
                               "8.8.4.4", "127.0.0.1",           "10.0.2.2", "192.0.2.1",
                               "fd00::1", "::ffff:93.184.216.34"};
    const std::optional<std::string> names[] = {std::nullopt, "example.org", "ads.example.org",
                                                "x.tracker.example", "unlisted.test"};
    HostView host = host_with({"192.0.2.1"});
    for (const char* text : policies) {
        auto p = policy(text);
        for (const char* address : addresses) {
            SCOPED_TRACE(std::string(text) + " -> " + address);
            auto early = p.decide_by_address(raw_ip(address), host);
            std::set<bool> outcomes;
            for (const auto& name : names)
                for (auto protocol : {WireProtocol::http, WireProtocol::tls, WireProtocol::other})
                    for (bool resolves : {false, true})
                        for (bool learned : {false, true}) {
                            auto v = p.decide(
                                destination(address, name, resolves, protocol, learned), host);
                            outcomes.insert(v.allowed);
                            if (early) {
                                EXPECT_EQ(v.allowed, early->allowed) << name.value_or("-");
                                EXPECT_EQ(v.reason, early->reason) << name.value_or("-");
                            }
                        }
            if (!early) {
                EXPECT_EQ(outcomes.size(), 2u) << "deferred, yet every connection gets the same";
            }
        }
    }
}

TEST(NetworkPolicyDecideByAddressTest, ExamplesOfEachAnswer) {
    HostView host;
    auto open = NetworkPolicy::open().decide_by_address(raw_ip("1.1.1.1"), host);
    ASSERT_TRUE(open);
    EXPECT_TRUE(open->allowed);
    EXPECT_EQ(open->reason, "the internet");
    auto special = NetworkPolicy::open().decide_by_address(raw_ip("10.0.0.1"), host);
    ASSERT_TRUE(special);
    EXPECT_FALSE(special->allowed);
    // A denied name may still arrive: the proxy must look.
    EXPECT_FALSE(policy(kInternetMinus).decide_by_address(raw_ip("1.1.1.1"), host));
    // The allow list decides by name.
    EXPECT_FALSE(policy(kAllowlist).decide_by_address(raw_ip("1.1.1.1"), host));
    auto explicit_allow =
        policy(R"({"allow": ["93.184.216.34"]})").decide_by_address(raw_ip("93.184.216.34"), host);
    ASSERT_TRUE(explicit_allow);
    EXPECT_TRUE(explicit_allow->allowed);
    EXPECT_EQ(explicit_allow->reason, "allowed by 93.184.216.34");
}

// ------------------------------------------------------------------ sniffing TLS

void expect_sni(const SniffResult& r, const std::string& name) {
    EXPECT_TRUE(r.complete);
    EXPECT_EQ(r.protocol, WireProtocol::tls);
    EXPECT_FALSE(r.malformed) << r.detail;
    EXPECT_EQ(r.name, name);
    EXPECT_EQ(r.literal, "");
    EXPECT_EQ(r.detail, "sni");
}

void expect_malformed_tls(const SniffResult& r, const std::string& detail) {
    EXPECT_TRUE(r.complete);
    EXPECT_EQ(r.protocol, WireProtocol::tls);
    EXPECT_TRUE(r.malformed);
    EXPECT_FALSE(r.name);
    EXPECT_EQ(r.detail, detail);
}

// Every proper prefix of `bytes` needs more; all of it completes.
void expect_incomplete_until_the_end(const std::string& bytes) {
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        auto r = sniff_client_start(std::string_view(bytes).substr(0, n));
        ASSERT_FALSE(r.complete) << "complete after " << n << " of " << bytes.size() << " bytes";
        ASSERT_FALSE(r.malformed) << n << ": " << r.detail;
    }
    EXPECT_TRUE(sniff_client_start(bytes).complete);
}

TEST(SniffTlsTest, Tls13ClientHelloGivesItsServerName) {
    auto hello = openssl_client_hello("WWW.Example.ORG");
    expect_sni(sniff_client_start(hello), "www.example.org");
    expect_sni(sniff_tls_client_hello(hello), "www.example.org");
}

TEST(SniffTlsTest, Tls12OnlyClientHelloGivesItsServerName) {
    auto hello = openssl_client_hello("api.example.net", TLS1_2_VERSION);
    // A TLS 1.2-only client offers no supported_versions extension (43).
    ASSERT_FALSE(ClientHello::from_handshake(handshake_of(hello)).extension(43));
    expect_sni(sniff_client_start(hello), "api.example.net");
}

TEST(SniffTlsTest, ClientHelloWithoutSniHasNoName) {
    for (int version : {0, TLS1_2_VERSION}) {
        auto r = sniff_client_start(openssl_client_hello(nullptr, version));
        EXPECT_TRUE(r.complete);
        EXPECT_EQ(r.protocol, WireProtocol::tls);
        EXPECT_FALSE(r.malformed) << r.detail;
        EXPECT_FALSE(r.name);
        EXPECT_EQ(r.literal, "");
        EXPECT_EQ(r.detail, "no server_name");
    }
}

TEST(SniffTlsTest, IpAddressAsSniIsALiteralNotAName) {
    auto r = sniff_client_start(openssl_client_hello("93.184.216.34"));
    EXPECT_TRUE(r.complete);
    EXPECT_FALSE(r.malformed) << r.detail;
    EXPECT_FALSE(r.name);
    EXPECT_EQ(r.literal, "93.184.216.34");
}

TEST(SniffTlsTest, EveryPrefixOfAClientHelloNeedsMoreBytes) {
    for (auto [sni, version] : std::vector<std::pair<const char*, int>>{
             {"example.org", 0}, {"example.org", TLS1_2_VERSION}, {nullptr, 0}}) {
        SCOPED_TRACE(std::string(sni ? sni : "(no sni)") + " " + std::to_string(version));
        expect_incomplete_until_the_end(openssl_client_hello(sni, version));
    }
}

TEST(SniffTlsTest, ClientHelloSplitAcrossTwoRecordsAtAnyPoint) {
    std::string handshake = handshake_of(openssl_client_hello("split.example.org"));
    for (std::size_t cut = 1; cut < handshake.size(); ++cut) {
        SCOPED_TRACE("cut at " + std::to_string(cut));
        expect_sni(sniff_client_start(in_records(handshake, {cut})), "split.example.org");
    }
    // Inside the 4-byte handshake header is the hardest place: feed it byte by byte too.
    expect_incomplete_until_the_end(in_records(handshake, {2}));
    expect_incomplete_until_the_end(in_records(handshake, {handshake.size() / 2}));
}

TEST(SniffTlsTest, ClientHelloInOneByteRecords) {
    std::string handshake = handshake_of(openssl_client_hello("tiny.example.org"));
    std::string records = in_records_of(handshake, 1);
    ASSERT_LT(records.size(), kMaxSniffBytes);
    expect_sni(sniff_client_start(records), "tiny.example.org");
}

TEST(SniffTlsTest, ClientHelloLargerThanOneRecord) {
    // Post-quantum key shares make hellos this large; a record holds at most 16 KiB.
    std::string handshake = padded_handshake(20000);
    std::string records = in_records_of(handshake, 16384);
    ASSERT_GT(handshake.size(), 16384u);
    expect_sni(sniff_client_start(records), "example.org");
    EXPECT_FALSE(sniff_client_start(records.substr(0, records.size() - 1)).complete);
}

TEST(SniffTlsTest, BytesAfterTheClientHelloAreIgnored) {
    std::string hello = openssl_client_hello("example.org");
    expect_sni(sniff_client_start(hello + "\x17\x03\x03\x00\x05hello"), "example.org");
    // Another handshake message in the same record after the hello.
    std::string handshake = handshake_of(hello);
    expect_sni(sniff_client_start(in_records(handshake + "\x14\x00\x00\x00")), "example.org");
}

TEST(SniffTlsTest, TwoHostNamesInServerNameAreMalformed) {
    auto r = sniff_client_start(
        hello_with_server_name(server_name_body({{0, "allowed.example"}, {0, "evil.example"}})));
    expect_malformed_tls(r, "two host names in server_name");
    auto literal_then_name = sniff_client_start(
        hello_with_server_name(server_name_body({{0, "1.2.3.4"}, {0, "evil.example"}})));
    EXPECT_TRUE(literal_then_name.malformed);
    EXPECT_FALSE(literal_then_name.name);
}

TEST(SniffTlsTest, OtherServerNameTypesAreSkipped) {
    auto r = sniff_client_start(
        hello_with_server_name(server_name_body({{7, "ignored"}, {0, "real.example"}})));
    expect_sni(r, "real.example");
}

TEST(SniffTlsTest, TwoServerNameExtensionsAreMalformed) {
    auto hello = ClientHello::from_handshake(handshake_of(openssl_client_hello("a.example")));
    hello.extensions.emplace_back(kServerNameExtension, server_name_body({{0, "b.example"}}));
    expect_malformed_tls(sniff_client_start(in_records(hello.to_handshake())),
                         "two server_name extensions");
}

TEST(SniffTlsTest, ServerNameThatIsNotAHostNameIsMalformed) {
    expect_malformed_tls(
        sniff_client_start(hello_with_server_name(server_name_body({{0, "example.org:443"}}))),
        "server_name is not a host name");
    auto spaced =
        sniff_client_start(hello_with_server_name(server_name_body({{0, "exa mple.org"}})));
    EXPECT_TRUE(spaced.malformed);
    EXPECT_FALSE(spaced.name);
    auto empty = sniff_client_start(hello_with_server_name(server_name_body({{0, ""}})));
    EXPECT_TRUE(empty.malformed);
    EXPECT_FALSE(empty.name);
}

TEST(SniffTlsTest, BadServerNameExtensionLengthsAreMalformed) {
    // List length says more than the extension holds.
    expect_malformed_tls(
        sniff_client_start(hello_with_server_name(u16(40) + '\0' + u16(3) + "a.b")),
        "bad server_name extension");
    // An entry's length runs past the list.
    expect_malformed_tls(sniff_client_start(hello_with_server_name(u16(6) + '\0' + u16(9) + "a.b")),
                         "bad server_name entry");
}

TEST(SniffTlsTest, TruncatedClientHelloBodyIsMalformed) {
    std::string handshake = handshake_of(openssl_client_hello("example.org"));
    // A hello that ends inside its random: consistent lengths, too little content.
    std::string body = handshake.substr(4, 20);
    expect_malformed_tls(sniff_client_start(in_records("\x01" + u24(body.size()) + body)),
                         "truncated ClientHello");
    // An extensions length that promises more than follows.
    auto hello = ClientHello::from_handshake(handshake);
    std::string whole = hello.to_handshake();
    std::string fixed_then_bad = hello.fixed + u16(5000) + whole.substr(4 + hello.fixed.size() + 2);
    expect_malformed_tls(
        sniff_client_start(in_records("\x01" + u24(fixed_then_bad.size()) + fixed_then_bad)),
        "bad ClientHello extensions length");
    // An extension cut short.
    std::string cut = hello.fixed + u16(6) + u16(0) + u16(40) + "ab";
    expect_malformed_tls(sniff_client_start(in_records("\x01" + u24(cut.size()) + cut)),
                         "truncated extension");
    // No extensions at all (SSL 3-style): complete, no name.
    auto bare = sniff_client_start(in_records("\x01" + u24(hello.fixed.size()) + hello.fixed));
    EXPECT_TRUE(bare.complete);
    EXPECT_FALSE(bare.malformed);
    EXPECT_FALSE(bare.name);
    EXPECT_EQ(bare.detail, "no extensions");
}

TEST(SniffTlsTest, GarbageRecordsAreMalformed) {
    using namespace std::string_literals;
    expect_malformed_tls(sniff_client_start("\x16\x02\x00\x00\x05hello"s),
                         "not a TLS handshake record");
    expect_malformed_tls(sniff_tls_client_hello("\x17\x03\x03\x00\x05hello"s),
                         "not a TLS handshake record");
    expect_malformed_tls(sniff_client_start("\x16\x03\x01\x00\x00"s), "bad TLS record length");
    expect_malformed_tls(sniff_client_start("\x16\x03\x01\x48\x01"s), "bad TLS record length");
    // A ServerHello where a ClientHello belongs.
    expect_malformed_tls(sniff_client_start("\x16\x03\x03\x00\x04\x02\x00\x00\x00"s),
                         "first handshake message is not a ClientHello");
    // A second record that is not a handshake record.
    std::string handshake = handshake_of(openssl_client_hello("example.org"));
    std::string first = in_records(handshake.substr(0, 10));
    expect_malformed_tls(sniff_client_start(first + "\x15\x03\x03\x00\x02\x02\x28"s),
                         "not a TLS handshake record");
}

TEST(SniffTlsTest, ClientHelloLargerThanTheSniffLimitIsMalformed) {
    // The length in the handshake header alone says it is too large.
    std::string header = "\x01" + u24(kMaxSniffBytes);
    expect_malformed_tls(sniff_client_start(in_records(header)),
                         "ClientHello larger than the sniff limit");
    // A hello within the limit, dribbled in one-byte records until the bytes pass it.
    std::string handshake = padded_handshake(8000);
    std::string records = in_records_of(handshake, 1);
    ASSERT_GT(records.size(), kMaxSniffBytes);
    expect_malformed_tls(sniff_client_start(records.substr(0, kMaxSniffBytes)),
                         "ClientHello larger than the sniff limit");
    EXPECT_FALSE(sniff_client_start(records.substr(0, kMaxSniffBytes - 1)).complete);
}

// ------------------------------------------------------------------ sniffing HTTP

SniffResult sniff_head(const std::string& head) {
    return sniff_client_start(head);
}

void expect_http_name(const SniffResult& r, const std::string& name) {
    EXPECT_TRUE(r.complete);
    EXPECT_EQ(r.protocol, WireProtocol::http);
    EXPECT_FALSE(r.malformed) << r.detail;
    EXPECT_EQ(r.name, name);
    EXPECT_EQ(r.literal, "");
}

void expect_malformed_http(const SniffResult& r, const std::string& detail_part) {
    EXPECT_TRUE(r.complete);
    EXPECT_EQ(r.protocol, WireProtocol::http);
    EXPECT_TRUE(r.malformed);
    EXPECT_NE(r.detail.find(detail_part), std::string::npos) << r.detail;
}

TEST(SniffHttpTest, AnyContentLengthIsAHeadNotAMalformedRequest) {
    // Beast's default body limit (1 MB) made every larger upload "malformed" under an allow list.
    auto r = sniff_http_request(
        "POST /upload HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5000000000\r\n\r\n");
    EXPECT_TRUE(r.complete);
    EXPECT_FALSE(r.malformed) << r.detail;
    EXPECT_EQ(r.name, "a.example");
}

TEST(SniffHttpTest, HostGivesTheNameWithoutItsPort) {
    auto r =
        sniff_head("GET /index.html HTTP/1.1\r\nHost: WWW.Example.org:8080\r\nAccept: */*\r\n\r\n");
    expect_http_name(r, "www.example.org");
    EXPECT_EQ(r.detail, "host");
    expect_http_name(
        sniff_head("POST /api HTTP/1.1\r\nHost: example.org.\r\nContent-Length: 5\r\n\r\nhello"),
        "example.org");
    expect_http_name(sniff_http_request("GET / HTTP/1.1\r\nhost: example.org\r\n\r\n"),
                     "example.org");
}

TEST(SniffHttpTest, IpLiteralHostsAreLiteralsNotNames) {
    auto v6 = sniff_head("GET / HTTP/1.1\r\nHost: [2001:db8::1]:8080\r\n\r\n");
    EXPECT_TRUE(v6.complete);
    EXPECT_FALSE(v6.malformed) << v6.detail;
    EXPECT_FALSE(v6.name);
    EXPECT_EQ(v6.literal, "2001:db8::1");
    auto v6_no_port = sniff_head("GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n");
    EXPECT_EQ(v6_no_port.literal, "::1");
    auto v4 = sniff_head("GET / HTTP/1.1\r\nHost: 93.184.216.34:80\r\n\r\n");
    EXPECT_FALSE(v4.malformed) << v4.detail;
    EXPECT_FALSE(v4.name);
    EXPECT_EQ(v4.literal, "93.184.216.34");
}

TEST(SniffHttpTest, Http10WithoutHostHasNoName) {
    auto r = sniff_head("GET / HTTP/1.0\r\nUser-Agent: old\r\n\r\n");
    EXPECT_TRUE(r.complete);
    EXPECT_EQ(r.protocol, WireProtocol::http);
    EXPECT_FALSE(r.malformed) << r.detail;
    EXPECT_FALSE(r.name);
    EXPECT_EQ(r.literal, "");
    EXPECT_EQ(r.detail, "no Host");
}

TEST(SniffHttpTest, TwoHostHeadersAreMalformed) {
    expect_malformed_http(
        sniff_head("GET / HTTP/1.1\r\nHost: allowed.example\r\nHost: evil.example\r\n\r\n"),
        "more than one Host header");
    // Even when both say the same.
    expect_malformed_http(
        sniff_head("GET / HTTP/1.1\r\nHost: a.example\r\nhost: a.example\r\n\r\n"),
        "more than one Host header");
}

TEST(SniffHttpTest, HostThatIsNotAHostNameIsMalformed) {
    expect_malformed_http(sniff_head("GET / HTTP/1.1\r\nHost: exa mple.org\r\n\r\n"),
                          "not a host name");
    expect_malformed_http(sniff_head("GET / HTTP/1.1\r\nHost: example.org:80x\r\n\r\n"),
                          "bad port");
    expect_malformed_http(sniff_head("GET / HTTP/1.1\r\nHost: [::1\r\n\r\n"), "unterminated [");
    expect_malformed_http(sniff_head("GET / HTTP/1.1\r\nHost: \r\n\r\n"), "not a host name");
}

TEST(SniffHttpTest, AbsoluteFormTargetAgreeingWithHost) {
    auto r = sniff_head(
        "GET http://Example.org:80/path?q=1 HTTP/1.1\r\nHost: example.org\r\nProxy-Connection: "
        "keep-alive\r\n\r\n");
    expect_http_name(r, "example.org");
    // Without Host, the target names the host.
    auto no_host = sniff_head("GET HTTPS://user:pw@api.example.org/x HTTP/1.1\r\n\r\n");
    expect_http_name(no_host, "api.example.org");
    EXPECT_EQ(no_host.detail, "absolute-form target");
    auto literal = sniff_head("GET http://[2001:db8::5]:8080/ HTTP/1.1\r\n\r\n");
    EXPECT_FALSE(literal.malformed) << literal.detail;
    EXPECT_EQ(literal.literal, "2001:db8::5");
}

TEST(SniffHttpTest, AbsoluteFormTargetDisagreeingWithHostIsMalformed) {
    expect_malformed_http(
        sniff_head("GET http://evil.example/ HTTP/1.1\r\nHost: allowed.example\r\n\r\n"),
        "request-target and Host name different hosts");
    expect_malformed_http(
        sniff_head("GET http://1.2.3.4/ HTTP/1.1\r\nHost: allowed.example\r\n\r\n"),
        "different hosts");
    // A space ends the target, so what follows is no HTTP version.
    expect_malformed_http(sniff_head("GET http://exa mple/ HTTP/1.1\r\nHost: a.example\r\n\r\n"),
                          "not an HTTP request");
    expect_malformed_http(sniff_head("GET http://bad_port.example:x/ HTTP/1.1\r\n\r\n"),
                          "bad request-target host");
}

TEST(SniffHttpTest, ConnectNamesItsTarget) {
    expect_http_name(
        sniff_head("CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n"),
        "example.org");
    auto no_host = sniff_head("CONNECT Example.org:443 HTTP/1.1\r\n\r\n");
    expect_http_name(no_host, "example.org");
    EXPECT_EQ(no_host.detail, "absolute-form target");
    expect_malformed_http(
        sniff_head("CONNECT evil.example:443 HTTP/1.1\r\nHost: allowed.example:443\r\n\r\n"),
        "different hosts");
}

TEST(SniffHttpTest, PartialHeadsNeedMore) {
    auto r = sniff_head("GET / HTTP/1.1\r\nHost: exa");
    EXPECT_FALSE(r.complete);
    EXPECT_EQ(r.protocol, WireProtocol::http);
    EXPECT_FALSE(r.malformed);
    for (const char* head : {"GET /index.html HTTP/1.1\r\nHost: example.org\r\nAccept: */*\r\n\r\n",
                             "GET http://example.org/ HTTP/1.0\r\n\r\n",
                             "CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n"}) {
        SCOPED_TRACE(head);
        expect_incomplete_until_the_end(head);
    }
}

TEST(SniffHttpTest, HeadLargerThanTheSniffLimitIsMalformed) {
    std::string head = "GET / HTTP/1.1\r\nHost: example.org\r\n";
    while (head.size() <= kMaxSniffBytes) head += "X-Padding: " + std::string(1000, 'a') + "\r\n";
    auto r = sniff_head(head);  // no blank line yet
    EXPECT_TRUE(r.complete);
    EXPECT_TRUE(r.malformed);
    EXPECT_FALSE(r.name);
}

TEST(SniffStartTest, NonHttpStartsAreOther) {
    using namespace std::string_literals;
    for (const std::string& start :
         {"SSH-2.0-OpenSSH_9.6\r\n"s, "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n"s,
          "\x00\x01\x02\x03"s, "HELLO\r\n"s, "EHLO mail.example\r\n"s, "\r\nHELLO\r\n"s}) {
        auto r = sniff_client_start(start);
        EXPECT_TRUE(r.complete) << start;
        EXPECT_EQ(r.protocol, WireProtocol::other) << start;
        EXPECT_FALSE(r.malformed) << start;
        EXPECT_FALSE(r.name) << start;
    }
}

// Issue 26, item 9: servers skip empty lines before the request line and many take any method
// word, so those requests must be read as HTTP (their Host checked), never passed as `other`.
TEST(SniffStartTest, RequestsLenientServersAcceptAreHttp) {
    for (const char* head : {"get / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
                             "\r\nGET / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
                             "\r\n\r\n\nGET / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
                             "AB / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
                             "ABCDEFGHIJKLMNOPQRSTUVWXYZ / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
                             "Get /x HTTP/1.0\r\nHost: EVIL.example\r\n\r\n"}) {
        SCOPED_TRACE(head);
        expect_http_name(sniff_client_start(head), "evil.example");
    }
    // Whatever our parser cannot read is refused, not passed on.
    for (const char* head : {"GET  /  HTTP/1.1\r\nHost: evil.example\r\n\r\n",
                             "GET / http/1.1\r\nHost: evil.example\r\n\r\n",
                             "GE(T / HTTP/1.1\r\nHost: evil.example\r\n\r\n"}) {
        SCOPED_TRACE(head);
        auto r = sniff_client_start(head);
        EXPECT_EQ(r.protocol, WireProtocol::http);
        EXPECT_TRUE(r.complete);
        EXPECT_TRUE(r.malformed || r.name == "evil.example") << r.detail;
    }
    auto connect = sniff_client_start("connect evil.example:443 HTTP/1.1\r\n\r\n");
    expect_http_name(connect, "evil.example");
}

TEST(SniffStartTest, FoldedHeaderLinesAreMalformed) {
    expect_malformed_http(sniff_client_start("GET / HTTP/1.1\r\nHost:\r\n evil.example\r\n\r\n"),
                          "folded");
    expect_malformed_http(
        sniff_client_start("GET / HTTP/1.1\r\nHost: allowed.example\r\n\tevil\r\n\r\n"), "folded");
    // What the fuzzer found: a method with '+' and a Host folded onto the next line.
    auto found = sniff_client_start("CO+NECT exxarg:443 HTTP/1.1\r\nHost:\r\n Hg:443\r\n\r\n");
    EXPECT_EQ(found.protocol, WireProtocol::http);
    EXPECT_TRUE(found.malformed);
}

// A start that may still become a request waits as HTTP, so a client that stops half-way (the
// proxy's first-bytes time-out) is refused rather than passed as `other` and finished later.
TEST(SniffStartTest, StartsThatMayBecomeRequestsWaitAsHttp) {
    for (const char* start : {"G", "GET", "get", "GET /", "GET / HTTP/1.1", "\r\n", "\r\nGET",
                              "PRI", "PRI * HTTP/2.0\r\n"}) {
        SCOPED_TRACE(start);
        auto r = sniff_client_start(start);
        EXPECT_FALSE(r.complete);
        EXPECT_EQ(r.protocol, WireProtocol::http);
    }
    EXPECT_EQ(sniff_client_start("").protocol, WireProtocol::other);  // nothing sent yet
}

TEST(SniffStartTest, Http2PriorKnowledgePrefaceIsOther) {
    auto r = sniff_client_start("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    EXPECT_TRUE(r.complete);
    EXPECT_EQ(r.protocol, WireProtocol::other);
    EXPECT_FALSE(r.malformed);
    EXPECT_FALSE(sniff_client_start("PRI").complete);
    EXPECT_FALSE(sniff_client_start("PRI ").complete);
    // Not the preface after all: an HTTP/1 request with the method PRI.
    expect_http_name(sniff_client_start("PRI / HTTP/1.1\r\nHost: evil.example\r\n\r\n"),
                     "evil.example");
}

TEST(SniffStartTest, ShortPrefixesNeedMore) {
    EXPECT_FALSE(sniff_client_start("").complete);
    // A method word still growing may become a request line: it waits as HTTP, so the first-bytes
    // time-out refuses it rather than letting it pass as `other`.
    for (const char* start : {"G", "GET", "OPTIONS", "ABCDEFGHIJKLMNOP", "get /x"}) {
        auto r = sniff_client_start(start);
        EXPECT_FALSE(r.complete) << start;
        EXPECT_EQ(r.protocol, WireProtocol::http) << start;
    }
    // A line ended without "HTTP/" in it is no request line any server reads.
    auto line = sniff_client_start("ABCDEFGHIJKLMNOP\r\n");
    EXPECT_TRUE(line.complete);
    EXPECT_EQ(line.protocol, WireProtocol::other);
}

TEST(ParseAuthorityTest, NamesLiteralsAndMalformedOnes) {
    struct Case {
        const char* authority;
        std::optional<std::string> name;
        const char* literal;
        bool malformed;
    };
    const std::optional<std::string> none;
    const Case cases[] = {
        {"Example.org", "example.org", "", false},
        {"example.org:443", "example.org", "", false},
        {"example.org.:8080", "example.org", "", false},
        {"1.2.3.4", none, "1.2.3.4", false},
        {"1.2.3.4:80", none, "1.2.3.4", false},
        {"[2001:db8::1]", none, "2001:db8::1", false},
        {"[2001:db8::1]:443", none, "2001:db8::1", false},
        {"[::1", none, "", true},
        {"[::1]x", none, "", true},
        {"[example.org]", none, "", true},
        {"example.org:https", none, "", true},
        {"example.org:123456", none, "", true},
        {"", none, "", true},
        {":80", none, "", true},
        {"exa mple.org", none, "", true},
    };
    for (const auto& c : cases) {
        SniffResult r;
        parse_authority(c.authority, r);
        EXPECT_EQ(r.name, c.name) << c.authority;
        EXPECT_EQ(r.literal, c.literal) << c.authority;
        EXPECT_EQ(r.malformed, c.malformed) << c.authority << ": " << r.detail;
    }
}

// ------------------------------------------------------------------ DNS queries

TEST(DnsQueryTest, ParsesAStandardQueryBuiltWithLdns) {
    auto query = ldns_query("WWW.Example.ORG.", LDNS_RR_TYPE_A, 0x1234);
    std::string error;
    auto q = parse_dns_query(to_wire(query.get()), &error);
    ASSERT_TRUE(q) << error;
    EXPECT_EQ(q->id, 0x1234);
    EXPECT_EQ(q->name, "www.example.org");
    EXPECT_EQ(q->type, kDnsTypeA);
    EXPECT_EQ(q->qclass, 1);  // IN
    EXPECT_TRUE(q->recursion_desired);

    auto txt = ldns_query("example.org.", LDNS_RR_TYPE_TXT, 7);
    ldns_pkt_set_rd(txt.get(), false);
    auto t = parse_dns_query(to_wire(txt.get()));
    ASSERT_TRUE(t);
    EXPECT_EQ(t->type, 16);
    EXPECT_FALSE(t->recursion_desired);
}

TEST(DnsQueryTest, TheRootIsTheEmptyName) {
    auto q = parse_dns_query(to_wire(ldns_query(".", LDNS_RR_TYPE_NS, 1).get()));
    ASSERT_TRUE(q);
    EXPECT_EQ(q->name, "");
    EXPECT_EQ(q->type, 2);
}

TEST(DnsQueryTest, RejectsResponses) {
    auto answer = ldns_answer("example.org. IN A", 9);
    std::string error;
    EXPECT_FALSE(parse_dns_query(to_wire(answer.get()), &error));
    EXPECT_EQ(error, "a response, not a query");
}

TEST(DnsQueryTest, RejectsAnythingButExactlyOneQuestion) {
    auto two = ldns_query("a.example.", LDNS_RR_TYPE_A, 1);
    push(two.get(), LDNS_SECTION_QUESTION, "b.example. IN A");
    ASSERT_EQ(ldns_pkt_qdcount(two.get()), 2);
    std::string error;
    EXPECT_FALSE(parse_dns_query(to_wire(two.get()), &error));
    EXPECT_EQ(error, "a query must ask exactly one question");

    LdnsPacket none(ldns_pkt_new());
    ldns_pkt_set_id(none.get(), 5);
    error.clear();
    EXPECT_FALSE(parse_dns_query(to_wire(none.get()), &error));
    EXPECT_EQ(error, "a query must ask exactly one question");
}

TEST(DnsQueryTest, RejectsOpcodesOtherThanQuery) {
    for (ldns_pkt_opcode opcode :
         {LDNS_PACKET_IQUERY, LDNS_PACKET_STATUS, LDNS_PACKET_NOTIFY, LDNS_PACKET_UPDATE}) {
        auto query = ldns_query("example.org.", LDNS_RR_TYPE_SOA, 3);
        ldns_pkt_set_opcode(query.get(), opcode);
        std::string error;
        EXPECT_FALSE(parse_dns_query(to_wire(query.get()), &error)) << opcode;
        EXPECT_EQ(error, "not a standard query") << opcode;
    }
}

TEST(DnsQueryTest, RejectsShortAndGarbageInput) {
    using namespace std::string_literals;
    std::string wire = to_wire(ldns_query("example.org.", LDNS_RR_TYPE_A, 3).get());
    for (std::size_t n : {0, 1, 11}) {
        std::string error;
        EXPECT_FALSE(parse_dns_query(wire.substr(0, n), &error)) << n;
        EXPECT_EQ(error, "not a DNS message (" + std::to_string(n) + " bytes)");
    }
    // A header promising a question the bytes do not hold, and cut-off questions.
    for (std::size_t n = 12; n < wire.size(); ++n) {
        std::string error;
        EXPECT_FALSE(parse_dns_query(wire.substr(0, n), &error)) << n;
        EXPECT_NE(error, "") << n;
    }
    // A name whose label runs past the end, and a compression pointer to itself.
    EXPECT_FALSE(
        parse_dns_query("\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x3f"
                        "abc"s));
    EXPECT_FALSE(parse_dns_query(
        "\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01\x00\x01"s));
    EXPECT_FALSE(parse_dns_query(std::string(kMaxDnsMessage + 1, '\0')));
}

TEST(DnsQueryTest, MakeDnsQueryRoundTrips) {
    std::string wire = make_dns_query("example.org", kDnsTypeA, 0xbeef);
    auto q = parse_dns_query(wire);
    ASSERT_TRUE(q);
    EXPECT_EQ(q->id, 0xbeef);
    EXPECT_EQ(q->name, "example.org");
    EXPECT_EQ(q->type, kDnsTypeA);
    EXPECT_EQ(q->qclass, 1);
    EXPECT_TRUE(q->recursion_desired);
    auto root = parse_dns_query(make_dns_query("", kDnsTypeA, 1));
    ASSERT_TRUE(root);
    EXPECT_EQ(root->name, "");
}

TEST(DnsAnswerTest, AnswerWithoutRecordsEchoesIdAndQuestion) {
    auto query = ldns_query("blocked.example.", LDNS_RR_TYPE_A, 0x4242);
    std::string wire = dns_answer_without_records(to_wire(query.get()), kDnsRcodeNxdomain);
    auto answer = from_wire(wire);
    EXPECT_EQ(ldns_pkt_id(answer.get()), 0x4242);
    EXPECT_TRUE(ldns_pkt_qr(answer.get()));
    EXPECT_TRUE(ldns_pkt_ra(answer.get()));
    EXPECT_EQ(ldns_pkt_get_rcode(answer.get()), kDnsRcodeNxdomain);
    EXPECT_EQ(records(ldns_pkt_question(answer.get())),
              std::vector<std::string>{"blocked.example. A"});
    EXPECT_EQ(ldns_pkt_ancount(answer.get()), 0);
    EXPECT_EQ(ldns_pkt_nscount(answer.get()), 0);
    EXPECT_EQ(ldns_pkt_arcount(answer.get()), 0);
    auto refused = from_wire(dns_answer_without_records(to_wire(query.get()), kDnsRcodeRefused));
    EXPECT_EQ(ldns_pkt_get_rcode(refused.get()), kDnsRcodeRefused);
    EXPECT_EQ(dns_answer_without_records("short", 0), "");
}

// ------------------------------------------------------------------ DNS answers

TEST(DnsFilterTest, KeepsAllowedARecordsAndStripsTheOthers) {
    auto query = ldns_query("example.org.", LDNS_RR_TYPE_A, 0x1111);
    auto upstream = ldns_answer("example.org. IN A", 0x9999);
    push(upstream.get(), LDNS_SECTION_ANSWER, "example.org. 300 IN A 93.184.216.34");
    push(upstream.get(), LDNS_SECTION_ANSWER, "example.org. 300 IN A 10.0.0.5");
    push(upstream.get(), LDNS_SECTION_ANSWER, "example.org. 60 IN A 93.184.216.35");
    push(upstream.get(), LDNS_SECTION_ANSWER, "example.org. 300 IN A 127.0.0.1");
    // The decision a real DNS filter makes: the policy's answer_verdict.
    auto internet = NetworkPolicy::open();
    HostView host;
    std::string error;
    auto filtered = filter_dns_answer(
        to_wire(upstream.get()), parsed_query(query.get()), 0x9999, 0x1111,
        [&](const IpAddress& a) { return internet.answer_verdict(a, host).allowed; }, &error);
    ASSERT_TRUE(filtered) << error;
    EXPECT_EQ(addresses(filtered->kept),
              (std::vector<std::string>{"example.org 93.184.216.34 300",
                                        "example.org 93.184.216.35 60"}));
    EXPECT_EQ(addresses(filtered->stripped),
              (std::vector<std::string>{"example.org 10.0.0.5 300", "example.org 127.0.0.1 300"}));
    EXPECT_EQ(filtered->rcode, 0);
    EXPECT_FALSE(filtered->truncated);
    auto sent = from_wire(filtered->wire);
    EXPECT_EQ(ldns_pkt_id(sent.get()), 0x1111);
    EXPECT_TRUE(ldns_pkt_qr(sent.get()));
    EXPECT_EQ(
        records(ldns_pkt_answer(sent.get())),
        (std::vector<std::string>{"example.org. A 93.184.216.34", "example.org. A 93.184.216.35"}));
    EXPECT_EQ(records(ldns_pkt_question(sent.get())), std::vector<std::string>{"example.org. A"});
}

TEST(DnsFilterTest, FollowsCnamesAndKeepsTxt) {
    auto query = ldns_query("www.example.org.", LDNS_RR_TYPE_A, 1);
    auto upstream = ldns_answer("www.example.org. IN A", 2);
    push(upstream.get(), LDNS_SECTION_ANSWER, "www.example.org. 300 IN CNAME Edge.CDN.example.");
    push(upstream.get(), LDNS_SECTION_ANSWER, "edge.cdn.example. 20 IN A 1.2.3.4");
    push(upstream.get(), LDNS_SECTION_ANSWER, "edge.cdn.example. 20 IN A 5.6.7.8");
    push(upstream.get(), LDNS_SECTION_ANSWER, "www.example.org. 300 IN TXT \"v=spf1 -all\"");
    auto filtered = filter_dns_answer(to_wire(upstream.get()), parsed_query(query.get()), 2, 1,
                                      [](const IpAddress& a) { return a != raw_ip("5.6.7.8"); });
    ASSERT_TRUE(filtered);
    EXPECT_EQ(filtered->cnames, std::vector<std::string>{"edge.cdn.example"});
    EXPECT_EQ(addresses(filtered->kept), std::vector<std::string>{"edge.cdn.example 1.2.3.4 20"});
    EXPECT_EQ(addresses(filtered->stripped),
              std::vector<std::string>{"edge.cdn.example 5.6.7.8 20"});
    auto sent = from_wire(filtered->wire);
    EXPECT_EQ(lower(records(ldns_pkt_answer(sent.get()))),
              (std::vector<std::string>{"www.example.org. cname edge.cdn.example.",
                                        "edge.cdn.example. a 1.2.3.4",
                                        "www.example.org. txt \"v=spf1 -all\""}));
}

// An upstream that passes on records for other names must not tie the asked name to their
// addresses: only the question and the names its CNAMEs lead to count.
TEST(DnsFilterTest, RecordsOutsideTheQuestionsChainAreDropped) {
    auto query = ldns_query("www.example.org.", LDNS_RR_TYPE_A, 1);
    auto upstream = ldns_answer("www.example.org. IN A", 2);
    push(upstream.get(), LDNS_SECTION_ANSWER, "www.example.org. 300 IN CNAME edge.cdn.example.");
    push(upstream.get(), LDNS_SECTION_ANSWER, "edge.cdn.example. 20 IN A 1.2.3.4");
    push(upstream.get(), LDNS_SECTION_ANSWER, "attacker.example. 20 IN A 6.6.6.6");
    push(upstream.get(), LDNS_SECTION_ANSWER, "other.example. 20 IN CNAME www.example.org.");
    auto filtered =
        filter_dns_answer(to_wire(upstream.get()), parsed_query(query.get()), 2, 1, kAnyAddress);
    ASSERT_TRUE(filtered);
    EXPECT_EQ(addresses(filtered->kept), std::vector<std::string>{"edge.cdn.example 1.2.3.4 20"});
    EXPECT_TRUE(filtered->stripped.empty());
    auto sent = from_wire(filtered->wire);
    EXPECT_EQ(lower(records(ldns_pkt_answer(sent.get()))),
              (std::vector<std::string>{"www.example.org. cname edge.cdn.example.",
                                        "edge.cdn.example. a 1.2.3.4"}));
}

TEST(DnsFilterTest, DropsAaaaHttpsAndTheAdditionalSection) {
    auto query = ldns_query("example.org.", LDNS_RR_TYPE_A, 1);
    auto upstream = ldns_answer("example.org. IN A", 1);
    push(upstream.get(), LDNS_SECTION_ANSWER, "example.org. 300 IN A 93.184.216.34");
    push(upstream.get(), LDNS_SECTION_ANSWER, "example.org. 300 IN AAAA 2606:2800:220:1::1");
    // HTTPS (type 65) carries address hints that would bypass the A filter; written in RFC 3597
    // form: priority 1, target ".", ipv4hint (key 4) 10.0.0.9.
    push(upstream.get(), LDNS_SECTION_ANSWER,
         "example.org. 300 IN TYPE65 \\# 11 0001 00 0004 0004 0a000009");
    push(upstream.get(), LDNS_SECTION_ANSWER,
         "example.org. 300 IN TYPE64 \\# 11 0001 00 0004 0004 0a000009");
    push(upstream.get(), LDNS_SECTION_AUTHORITY, "example.org. 300 IN NS ns1.example.org.");
    push(upstream.get(), LDNS_SECTION_ADDITIONAL, "ns1.example.org. 300 IN A 192.0.2.53");
    push(upstream.get(), LDNS_SECTION_ADDITIONAL, "ns1.example.org. 300 IN AAAA 2001:db8::53");
    ASSERT_EQ(ldns_pkt_ancount(upstream.get()), 4);
    auto filtered =
        filter_dns_answer(to_wire(upstream.get()), parsed_query(query.get()), 1, 1, kAnyAddress);
    ASSERT_TRUE(filtered);
    // The glue A record in the additional section is neither kept nor counted as stripped.
    EXPECT_EQ(addresses(filtered->kept), std::vector<std::string>{"example.org 93.184.216.34 300"});
    EXPECT_TRUE(filtered->stripped.empty());
    auto sent = from_wire(filtered->wire);
    EXPECT_EQ(records(ldns_pkt_answer(sent.get())),
              std::vector<std::string>{"example.org. A 93.184.216.34"});
    EXPECT_EQ(ldns_pkt_nscount(sent.get()), 0);
    EXPECT_EQ(ldns_pkt_arcount(sent.get()), 0);
    EXPECT_EQ(records(ldns_pkt_additional(sent.get())), std::vector<std::string>{});
}

TEST(DnsFilterTest, KeepsSoaButNotNsInTheAuthoritySection) {
    auto query = ldns_query("missing.example.org.", LDNS_RR_TYPE_A, 77);
    auto upstream = ldns_answer("missing.example.org. IN A", 78);
    ldns_pkt_set_rcode(upstream.get(), LDNS_RCODE_NXDOMAIN);
    push(upstream.get(), LDNS_SECTION_AUTHORITY,
         "example.org. 3600 IN SOA ns1.example.org. hostmaster.example.org. 1 7200 3600 1209600 "
         "300");
    push(upstream.get(), LDNS_SECTION_AUTHORITY, "example.org. 3600 IN NS ns1.example.org.");
    push(upstream.get(), LDNS_SECTION_ADDITIONAL, "ns1.example.org. 3600 IN A 192.0.2.53");
    auto filtered =
        filter_dns_answer(to_wire(upstream.get()), parsed_query(query.get()), 78, 77, kAnyAddress);
    ASSERT_TRUE(filtered);
    EXPECT_EQ(filtered->rcode, kDnsRcodeNxdomain);
    EXPECT_TRUE(filtered->kept.empty());
    auto sent = from_wire(filtered->wire);
    EXPECT_EQ(ldns_pkt_get_rcode(sent.get()), kDnsRcodeNxdomain);
    EXPECT_EQ(ldns_pkt_id(sent.get()), 77);
    EXPECT_EQ(ldns_pkt_ancount(sent.get()), 0);
    auto authority = records(ldns_pkt_authority(sent.get()));
    ASSERT_EQ(authority.size(), 1u);
    EXPECT_EQ(authority[0].rfind("example.org. SOA ns1.example.org. hostmaster.example.org. 1 ", 0),
              0u)
        << authority[0];
    EXPECT_EQ(ldns_pkt_arcount(sent.get()), 0);
}

TEST(DnsFilterTest, RewritesTheIdToTheSandboxesOwn) {
    auto query = ldns_query("example.org.", LDNS_RR_TYPE_A, 0x0102);
    auto upstream = ldns_answer("example.org. IN A", 0xfedc);
    push(upstream.get(), LDNS_SECTION_ANSWER, "example.org. 300 IN A 93.184.216.34");
    auto filtered = filter_dns_answer(to_wire(upstream.get()), parsed_query(query.get()), 0xfedc,
                                      0x0102, kAnyAddress);
    ASSERT_TRUE(filtered);
    ASSERT_GE(filtered->wire.size(), 2u);
    EXPECT_EQ(static_cast<std::uint8_t>(filtered->wire[0]), 0x01);
    EXPECT_EQ(static_cast<std::uint8_t>(filtered->wire[1]), 0x02);
}

TEST(DnsFilterTest, RejectsAnAnswerWithAnotherId) {
    auto query = ldns_query("example.org.", LDNS_RR_TYPE_A, 1);
    auto upstream = ldns_answer("example.org. IN A", 0x5000);
    push(upstream.get(), LDNS_SECTION_ANSWER, "example.org. 300 IN A 6.6.6.6");
    std::string error;
    EXPECT_FALSE(filter_dns_answer(to_wire(upstream.get()), parsed_query(query.get()), 0x5001, 1,
                                   kAnyAddress, &error));
    EXPECT_EQ(error, "answer id does not match the query");
}

TEST(DnsFilterTest, RejectsAnAnswerToAnotherQuestion) {
    auto query = parsed_query(ldns_query("example.org.", LDNS_RR_TYPE_A, 1).get());
    for (const char* question :
         {"evil.example. IN A", "example.org. IN TXT", "www.example.org. IN A"}) {
        auto upstream = ldns_answer(question, 9);
        std::string error;
        EXPECT_FALSE(filter_dns_answer(to_wire(upstream.get()), query, 9, 1, kAnyAddress, &error))
            << question;
        EXPECT_EQ(error, "answer is for another question") << question;
    }
    auto two = ldns_answer("example.org. IN A", 9);
    push(two.get(), LDNS_SECTION_QUESTION, "evil.example. IN A");
    std::string error;
    EXPECT_FALSE(filter_dns_answer(to_wire(two.get()), query, 9, 1, kAnyAddress, &error));
    EXPECT_NE(error, "");
    LdnsPacket none(ldns_pkt_new());
    ldns_pkt_set_qr(none.get(), true);
    ldns_pkt_set_id(none.get(), 9);
    EXPECT_FALSE(filter_dns_answer(to_wire(none.get()), query, 9, 1, kAnyAddress, &error));
    EXPECT_EQ(error, "an answer must repeat exactly the one question");
}

TEST(DnsFilterTest, QuestionCaseDoesNotMatter) {
    // Resolvers randomize the case of the question (0x20 encoding).
    auto query = ldns_query("example.org.", LDNS_RR_TYPE_A, 1);
    auto upstream = ldns_answer("ExAmPlE.oRg. IN A", 3);
    push(upstream.get(), LDNS_SECTION_ANSWER, "ExAmPlE.oRg. 300 IN A 93.184.216.34");
    auto filtered =
        filter_dns_answer(to_wire(upstream.get()), parsed_query(query.get()), 3, 1, kAnyAddress);
    ASSERT_TRUE(filtered);
    EXPECT_EQ(addresses(filtered->kept), std::vector<std::string>{"example.org 93.184.216.34 300"});
}

TEST(DnsFilterTest, RejectsQueriesAndGarbage) {
    using namespace std::string_literals;
    auto query = ldns_query("example.org.", LDNS_RR_TYPE_A, 1);
    auto q = parsed_query(query.get());
    std::string error;
    EXPECT_FALSE(filter_dns_answer(to_wire(query.get()), q, 1, 1, kAnyAddress, &error));
    EXPECT_EQ(error, "the upstream sent a query, not an answer");
    EXPECT_FALSE(filter_dns_answer("", q, 1, 1, kAnyAddress, &error));
    EXPECT_EQ(error, "not a DNS message (0 bytes)");
    EXPECT_FALSE(filter_dns_answer("\x00\x01\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00garbage"s, q, 1,
                                   1, kAnyAddress, &error));
    EXPECT_NE(error.find("bad DNS message"), std::string::npos) << error;
    // Every truncation of a real answer is refused (none is a complete message).
    auto upstream = ldns_answer("example.org. IN A", 1);
    push(upstream.get(), LDNS_SECTION_ANSWER, "example.org. 300 IN A 93.184.216.34");
    std::string wire = to_wire(upstream.get());
    for (std::size_t n = 0; n < wire.size(); ++n)
        EXPECT_FALSE(filter_dns_answer(wire.substr(0, n), q, 1, 1, kAnyAddress)) << n;
}

TEST(DnsFilterTest, ReportsTruncation) {
    auto query = ldns_query("big.example.", LDNS_RR_TYPE_TXT, 1);
    auto upstream = ldns_answer("big.example. IN TXT", 1);
    ldns_pkt_set_tc(upstream.get(), true);
    auto filtered =
        filter_dns_answer(to_wire(upstream.get()), parsed_query(query.get()), 1, 1, kAnyAddress);
    ASSERT_TRUE(filtered);
    EXPECT_TRUE(filtered->truncated);
    EXPECT_TRUE(ldns_pkt_tc(from_wire(filtered->wire).get()));
}

TEST(DnsFilterTest, KeepsAnEdnsAnswerWellFormed) {
    // EDNS lives in an OPT record in the additional section; dropping that section must not
    // leave a message whose counts disagree with its records.
    auto query = ldns_query("example.org.", LDNS_RR_TYPE_A, 1);
    auto upstream = ldns_answer("example.org. IN A", 1);
    ldns_pkt_set_edns_udp_size(upstream.get(), 1232);
    push(upstream.get(), LDNS_SECTION_ANSWER, "example.org. 300 IN A 93.184.216.34");
    push(upstream.get(), LDNS_SECTION_ADDITIONAL, "ns1.example.org. 300 IN A 192.0.2.53");
    auto filtered =
        filter_dns_answer(to_wire(upstream.get()), parsed_query(query.get()), 1, 1, kAnyAddress);
    ASSERT_TRUE(filtered);
    auto sent = from_wire(filtered->wire);
    EXPECT_EQ(records(ldns_pkt_answer(sent.get())),
              std::vector<std::string>{"example.org. A 93.184.216.34"});
    EXPECT_EQ(records(ldns_pkt_additional(sent.get())), std::vector<std::string>{});
    // The OPT record stays, and alone: ARCOUNT on the wire counts exactly it.
    EXPECT_TRUE(ldns_pkt_edns(sent.get()));
    EXPECT_EQ(ldns_pkt_edns_udp_size(sent.get()), 1232);
    std::uint16_t arcount =
        static_cast<std::uint16_t>((static_cast<std::uint8_t>(filtered->wire[10]) << 8) |
                                   static_cast<std::uint8_t>(filtered->wire[11]));
    EXPECT_EQ(arcount, 1);
}

// ------------------------------------------------------------------ DNS memory

TEST(DnsMemoryTest, RemembersWhichNamesResolveToWhichAddresses) {
    DnsMemory memory;
    memory.remember("example.org", raw_ip("93.184.216.34"), std::chrono::seconds(300));
    EXPECT_TRUE(memory.resolves_to("example.org", raw_ip("93.184.216.34")));
    EXPECT_FALSE(memory.resolves_to("example.org", raw_ip("93.184.216.35")));
    EXPECT_FALSE(memory.resolves_to("www.example.org", raw_ip("93.184.216.34")));
    EXPECT_EQ(memory.name_of(raw_ip("93.184.216.34")), "example.org");
    EXPECT_FALSE(memory.name_of(raw_ip("1.1.1.1")));
}

TEST(DnsMemoryTest, ShortTtlsAreHeldAtLeastTheMinimum) {
    // Clients cache past the TTL; a TTL of 0 must not forget the answer at once.
    DnsMemory memory;
    memory.remember("zero.example", raw_ip("1.2.3.4"), std::chrono::seconds(0));
    EXPECT_TRUE(memory.resolves_to("zero.example", raw_ip("1.2.3.4")));
    EXPECT_EQ(memory.name_of(raw_ip("1.2.3.4")), "zero.example");
}

TEST(DnsMemoryTest, IPv4MappedAddressesAreTheSameAddress) {
    DnsMemory memory;
    memory.remember("example.org", raw_ip("::ffff:93.184.216.34"), std::chrono::seconds(300));
    EXPECT_TRUE(memory.resolves_to("example.org", raw_ip("93.184.216.34")));
    EXPECT_EQ(memory.name_of(raw_ip("93.184.216.34")), "example.org");
    memory.remember("other.example", raw_ip("5.6.7.8"), std::chrono::seconds(300));
    EXPECT_TRUE(memory.resolves_to("other.example", raw_ip("::ffff:5.6.7.8")));
    EXPECT_EQ(memory.name_of(raw_ip("::ffff:5.6.7.8")), "other.example");
}

TEST(DnsMemoryTest, OneAddressMayHaveSeveralNames) {
    DnsMemory memory;
    memory.remember("a.example", raw_ip("1.2.3.4"), std::chrono::seconds(300));
    memory.remember("b.example", raw_ip("1.2.3.4"), std::chrono::seconds(300));
    EXPECT_TRUE(memory.resolves_to("a.example", raw_ip("1.2.3.4")));
    EXPECT_TRUE(memory.resolves_to("b.example", raw_ip("1.2.3.4")));
    auto name = memory.name_of(raw_ip("1.2.3.4"));
    ASSERT_TRUE(name);
    EXPECT_TRUE(*name == "a.example" || *name == "b.example") << *name;
}

std::string numbered_name(std::size_t i) {
    std::string digits = std::to_string(i);
    return "host" + std::string(6 - digits.size(), '0') + digits + ".example";
}
IpAddress numbered_address(std::size_t i) {
    return boost::asio::ip::address_v4(static_cast<std::uint32_t>(0x01000000 + i));
}

TEST(DnsMemoryTest, HoldsAtMostMaxEntriesDroppingTheOnesClosestToExpiring) {
    DnsMemory memory;
    // Remembered for a day: it outlives every short-lived answer that follows.
    memory.remember("long.example", raw_ip("9.9.9.9"), std::chrono::hours(24));
    constexpr std::size_t kExtra = 10;
    for (std::size_t i = 0; i < DnsMemory::kMaxEntries + kExtra; ++i)
        memory.remember(numbered_name(i), numbered_address(i), std::chrono::seconds(60));
    EXPECT_TRUE(memory.resolves_to("long.example", raw_ip("9.9.9.9")));
    std::size_t remembered = 0;
    for (std::size_t i = 0; i < DnsMemory::kMaxEntries + kExtra; ++i)
        remembered += memory.resolves_to(numbered_name(i), numbered_address(i));
    EXPECT_EQ(remembered + 1, DnsMemory::kMaxEntries);
    // The earliest short entries went first, and both indexes forgot them.
    for (std::size_t i = 0; i <= kExtra; ++i) {
        EXPECT_FALSE(memory.resolves_to(numbered_name(i), numbered_address(i))) << i;
        EXPECT_FALSE(memory.name_of(numbered_address(i))) << i;
    }
    std::size_t last = DnsMemory::kMaxEntries + kExtra - 1;
    EXPECT_TRUE(memory.resolves_to(numbered_name(last), numbered_address(last)));
    EXPECT_EQ(memory.name_of(numbered_address(last)), numbered_name(last));
}

TEST(DnsMemoryTest, RememberingAPairAgainTakesNoNewEntry) {
    DnsMemory memory;
    for (int i = 0; i < 5; ++i)
        memory.remember("again.example", raw_ip("9.9.9.9"), std::chrono::seconds(60));
    for (std::size_t i = 0; i + 1 < DnsMemory::kMaxEntries; ++i)
        memory.remember(numbered_name(i), numbered_address(i), std::chrono::hours(1));
    // Exactly full: nothing was dropped.
    EXPECT_TRUE(memory.resolves_to("again.example", raw_ip("9.9.9.9")));
    EXPECT_TRUE(memory.resolves_to(numbered_name(0), numbered_address(0)));
    memory.remember("one-more.example", raw_ip("8.8.8.8"), std::chrono::hours(1));
    EXPECT_FALSE(memory.resolves_to("again.example", raw_ip("9.9.9.9")));
    EXPECT_FALSE(memory.name_of(raw_ip("9.9.9.9")));
    EXPECT_TRUE(memory.resolves_to("one-more.example", raw_ip("8.8.8.8")));
}

// ------------------------------------------------------------------ egress stats

TEST(EgressStatsTest, CountsConnectionsBytesDnsAndUdp) {
    EgressStats stats;
    stats.connection("example.org", true);
    stats.connection("example.org", true);
    stats.connection("example.org", false, "denied by example.org");
    stats.connection("10.0.0.1", false, "private");
    stats.transferred("example.org", 100, 2000);
    stats.transferred("example.org", 1, 2);
    stats.bytes_live(30, 40);
    stats.bytes_live(1, 2);
    stats.dns(true);
    stats.dns(false);
    stats.dns(false);
    stats.udp_flow(true);
    stats.udp_flow(false);
    stats.udp_flow(false);
    stats.udp_flow(false);
    stats.opened();
    stats.opened();
    stats.closed();

    auto t = stats.totals();
    EXPECT_EQ(t.allowed, 2u);
    EXPECT_EQ(t.blocked, 2u);
    EXPECT_EQ(t.bytes_out, 31u);  // totals count bytes as they flow (bytes_live)
    EXPECT_EQ(t.bytes_in, 42u);
    EXPECT_EQ(t.dns_answered, 1u);
    EXPECT_EQ(t.dns_refused, 2u);
    EXPECT_EQ(t.udp_flows, 1u);
    EXPECT_EQ(t.udp_blocked, 3u);
    EXPECT_EQ(t.active, 1u);

    auto top = stats.top(10);
    ASSERT_EQ(top.size(), 2u);
    EXPECT_EQ(top[0].first, "example.org");
    EXPECT_EQ(top[0].second.allowed, 2u);
    EXPECT_EQ(top[0].second.blocked, 1u);
    EXPECT_EQ(top[0].second.bytes_out, 101u);
    EXPECT_EQ(top[0].second.bytes_in, 2002u);
    EXPECT_EQ(top[0].second.last_reason, "denied by example.org");
    EXPECT_EQ(top[1].first, "10.0.0.1");
}

TEST(EgressStatsTest, TopIsBusiestFirstAndAtMostN) {
    EgressStats stats;
    for (int i = 0; i < 1; ++i) stats.connection("one.example", true);
    for (int i = 0; i < 5; ++i) stats.connection("five.example", i % 2 == 0);
    for (int i = 0; i < 3; ++i) stats.connection("three.example", false, "no");
    stats.transferred("bytes-only.example", 1 << 20, 1 << 20);  // no connections: least busy
    auto top = stats.top(10);
    ASSERT_EQ(top.size(), 4u);
    EXPECT_EQ(top[0].first, "five.example");
    EXPECT_EQ(top[1].first, "three.example");
    EXPECT_EQ(top[2].first, "one.example");
    EXPECT_EQ(top[3].first, "bytes-only.example");
    auto two = stats.top(2);
    ASSERT_EQ(two.size(), 2u);
    EXPECT_EQ(two[0].first, "five.example");
    EXPECT_EQ(two[1].first, "three.example");
    EXPECT_TRUE(stats.top(0).empty());
}

TEST(EgressStatsTest, DestinationsPastTheLimitCountAsOther) {
    EgressStats stats;
    for (std::size_t i = 0; i < EgressStats::kMaxDestinations; ++i)
        stats.connection(numbered_name(i), true);
    stats.connection("late-1.example", true);
    stats.connection("late-2.example", false, "blocked late");
    stats.transferred("late-3.example", 5, 6);
    stats.connection(numbered_name(0), true);  // a name kept apart stays apart

    auto all = stats.top(10000);
    EXPECT_EQ(all.size(), EgressStats::kMaxDestinations + 1);
    std::map<std::string, DestinationCounts> by_name(all.begin(), all.end());
    ASSERT_EQ(by_name.count("(other)"), 1u);
    EXPECT_EQ(by_name["(other)"].allowed, 1u);
    EXPECT_EQ(by_name["(other)"].blocked, 1u);
    EXPECT_EQ(by_name["(other)"].bytes_out, 5u);
    EXPECT_EQ(by_name["(other)"].last_reason, "blocked late");
    EXPECT_EQ(by_name.count("late-1.example"), 0u);
    EXPECT_EQ(by_name[numbered_name(0)].allowed, 2u);
    // Many more still add no entries.
    for (int i = 0; i < 1000; ++i) stats.connection("flood-" + std::to_string(i), false);
    EXPECT_EQ(stats.top(10000).size(), EgressStats::kMaxDestinations + 1);
    EXPECT_EQ(stats.totals().blocked, 1001u);
}

TEST(EgressStatsTest, ToJsonShape) {
    EgressStats stats;
    stats.connection("example.org", true);
    stats.connection("blocked.example", false, "not in the allow list");
    stats.connection("blocked.example", false, "denied by blocked.example");
    stats.transferred("example.org", 10, 20);
    stats.bytes_live(10, 20);
    stats.dns(true);
    stats.udp_flow(false);
    stats.opened();

    json expected = {
        {"connections",
         {{"allowed", 1},
          {"blocked", 2},
          {"cut", 0},
          {"open", 1},
          {"refused", {{"no_fds", 0}, {"over_cap", 0}}}}},
        {"bytes", {{"out", 10}, {"in", 20}}},
        {"dns", {{"answered", 1}, {"refused", 0}}},
        {"udp_flows", {{"allowed", 0}, {"blocked", 1}}},
        {"destinations",
         {{{"destination", "blocked.example"},
           {"allowed", 0},
           {"blocked", 2},
           {"cut", 0},
           {"bytes_out", 0},
           {"bytes_in", 0},
           {"last_blocked_reason", "denied by blocked.example"}},
          {{"destination", "example.org"},
           {"allowed", 1},
           {"blocked", 0},
           {"cut", 0},
           {"bytes_out", 10},
           {"bytes_in", 20}}}},
    };
    EXPECT_EQ(stats.to_json(), expected);
    auto one = stats.to_json(1);
    ASSERT_EQ(one["destinations"].size(), 1u);
    EXPECT_EQ(one["destinations"][0]["destination"], "blocked.example");
    EXPECT_EQ(EgressStats().to_json()["destinations"], json::array());
}

// ------------------------------------------------------------------ rate limiter

TEST(RateLimiterTest, AFullBucketGrantsItsCapacityAndNoMore) {
    // The capacity is one second of bytes, at least 16 KiB.
    RateLimiter fast(1 << 20);
    EXPECT_EQ(fast.take(std::uint64_t{1} << 40), 1u << 20);
    RateLimiter slow(1);  // one byte a second: no refill to speak of within the test
    EXPECT_EQ(slow.take(100), 100u);
    EXPECT_EQ(slow.take(std::uint64_t{1} << 40), 16u * 1024 - 100);
}

TEST(RateLimiterTest, AnEmptyBucketGrantsNothingAtOnce) {
    RateLimiter limiter(1);  // one byte a second: no refill within the test
    limiter.take(std::uint64_t{1} << 40);
    EXPECT_EQ(limiter.take(1), 0u);
    EXPECT_EQ(limiter.take(1000), 0u);
    EXPECT_EQ(limiter.wait_for(std::uint64_t{1} << 40), std::chrono::milliseconds(1000));
}

TEST(RateLimiterTest, RefundGivesBackUnusedBudgetUpToTheCapacity) {
    RateLimiter limiter(1);
    limiter.take(std::uint64_t{1} << 40);
    limiter.refund(100);
    EXPECT_EQ(limiter.take(1000), 100u);
    EXPECT_EQ(limiter.take(1), 0u);
    // A refund cannot grow the bucket past its capacity.
    limiter.refund(std::uint64_t{1} << 40);
    EXPECT_EQ(limiter.take(std::uint64_t{1} << 40), 16u * 1024);
}

TEST(RateLimiterTest, WaitForIsAtLeastAMillisecond) {
    RateLimiter limiter(1 << 20);
    EXPECT_EQ(limiter.wait_for(1), std::chrono::milliseconds(1));
    EXPECT_EQ(limiter.wait_for(std::uint64_t{1} << 40), std::chrono::milliseconds(1));
}

TEST(RateLimiterTest, RateZeroIsNoLimitAndALiveChangeAppliesAtOnce) {
    RateLimiter limiter(0);
    EXPECT_EQ(limiter.rate(), 0u);
    EXPECT_EQ(limiter.take(1u << 30), 1u << 30) << "no limit: everything asked for";
    limiter.set_rate(1);  // one byte a second, a bucket of 16 KiB that starts empty
    EXPECT_EQ(limiter.rate(), 1u);
    EXPECT_LT(limiter.take(1u << 20), 16u * 1024) << "limited from the change on";
    limiter.set_rate(0);
    EXPECT_EQ(limiter.take(1u << 20), 1u << 20) << "lifted";
    EXPECT_EQ(RateLimiter(125000).rate(), 125000u);
}

}  // namespace
}  // namespace deskbox::network

namespace deskbox::network {
namespace {

TEST(NormalizeHostNameTest, LabelsNeitherStartNorEndWithAHyphen) {
    EXPECT_EQ(normalize_host_name("a-b.example"), "a-b.example");
    for (const char* bad : {"-", "-a.example", "a-.example", "a.-b.example", "a.example-"})
        EXPECT_FALSE(normalize_host_name(bad)) << bad;
    EXPECT_THROW(NetworkPolicy::parse(json{{"allow", {"-"}}}), PolicyError);
    EXPECT_THROW(NetworkPolicy::parse(json{{"allow", {"*.2.3.4"}}}), PolicyError);
}

TEST(ParseAuthorityTest, BracketsAndBareIPv6AreReadStrictly) {
    auto read = [](const char* text) {
        SniffResult r;
        parse_authority(text, r);
        return r;
    };
    EXPECT_TRUE(read("[1.2.3.4]").malformed);
    EXPECT_EQ(read("2001:db8::1:80").literal, "2001:db8::1:80");
    EXPECT_TRUE(read("example.org:80:80").malformed);
    EXPECT_EQ(read("1.2.3.4.").literal, "1.2.3.4");
    EXPECT_FALSE(read("1.2.3.4.").name);
}

TEST(SniffTlsTest, ABracketedServerNameIsMalformed) {
    auto r = sniff_tls_client_hello(hello_with_server_name(server_name_body({{0, "[::1]"}})));
    EXPECT_TRUE(r.complete);
    EXPECT_TRUE(r.malformed);
    EXPECT_FALSE(r.name);
    EXPECT_TRUE(r.literal.empty());
}

TEST(ClassifyTest, IPv6OutsideGlobalUnicastIsNotTheInternet) {
    EXPECT_EQ(classify(raw_ip("4000::1")).kind, AddressKind::special);
    EXPECT_EQ(classify(raw_ip("::ffff:0:a00:1")).kind, AddressKind::special);
    EXPECT_EQ(classify(raw_ip("2606:4700::1111")).kind, AddressKind::public_unicast);
}

TEST(NetworkPolicyDecideByAddressTest, AnAddressOnlyAllowListRefusesOtherAddressesAtOnce) {
    auto p = policy(R"({"allow": ["93.184.216.34"]})");
    auto early = p.decide_by_address(raw_ip("1.1.1.1"), HostView{});
    ASSERT_TRUE(early);
    EXPECT_FALSE(early->allowed);
    EXPECT_TRUE(p.decide_by_address(raw_ip("93.184.216.34"), HostView{})->allowed);
}

}  // namespace
}  // namespace deskbox::network
