#include "server/network/dns_message.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <set>

// ldns' common.h defines true, false and bool as macros unless <stdbool.h> came first.
#include <ldns/ldns.h>
#include <stdbool.h>

namespace deskbox::network {
namespace {

struct PacketFree {
    void operator()(ldns_pkt* p) const { ldns_pkt_free(p); }
};
using Packet = std::unique_ptr<ldns_pkt, PacketFree>;

Packet read_packet(std::string_view wire, std::string* error) {
    if (wire.size() < 12 || wire.size() > kMaxDnsMessage) {
        if (error) *error = "not a DNS message (" + std::to_string(wire.size()) + " bytes)";
        return nullptr;
    }
    ldns_pkt* raw = nullptr;
    ldns_status status =
        ldns_wire2pkt(&raw, reinterpret_cast<const std::uint8_t*>(wire.data()), wire.size());
    if (status != LDNS_STATUS_OK) {
        if (raw) ldns_pkt_free(raw);
        if (error) *error = std::string("bad DNS message: ") + ldns_get_errorstr_by_id(status);
        return nullptr;
    }
    return Packet(raw);
}

std::string write_packet(const ldns_pkt* packet) {
    std::uint8_t* bytes = nullptr;
    std::size_t size = 0;
    if (ldns_pkt2wire(&bytes, packet, &size) != LDNS_STATUS_OK || !bytes) {
        std::free(bytes);
        return {};
    }
    std::string out(reinterpret_cast<char*>(bytes), size);
    std::free(bytes);
    return out;
}

// "Example.ORG." -> "example.org"; the root is "".
std::string name_text(const ldns_rdf* rdf) {
    char* text = ldns_rdf2str(rdf);
    if (!text) return {};
    std::string out(text);
    std::free(text);
    if (!out.empty() && out.back() == '.') out.pop_back();
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// Record types a sandbox may see in an answer. AAAA (no IPv6 route), HTTPS and SVCB (they carry
// address hints that would bypass the A filter) and anything exotic are dropped.
bool passed_type(ldns_rr_type type) {
    switch (type) {
        case LDNS_RR_TYPE_A:
        case LDNS_RR_TYPE_CNAME:
        case LDNS_RR_TYPE_TXT:
        case LDNS_RR_TYPE_MX:
        case LDNS_RR_TYPE_SRV:
        case LDNS_RR_TYPE_PTR:
        case LDNS_RR_TYPE_SOA:
        case LDNS_RR_TYPE_NS:
        case LDNS_RR_TYPE_CAA:
            return true;
        default:
            return false;
    }
}

ldns_rr_list* empty_list() {
    return ldns_rr_list_new();
}

void replace_section(ldns_pkt* packet, ldns_rr_list* (*get)(const ldns_pkt*),
                     void (*set)(ldns_pkt*, ldns_rr_list*), ldns_rr_list* replacement) {
    ldns_rr_list* old = get(packet);
    set(packet, replacement);
    ldns_rr_list_deep_free(old);
}

}  // namespace

std::optional<DnsQuery> parse_dns_query(std::string_view wire, std::string* error) {
    Packet packet = read_packet(wire, error);
    if (!packet) return std::nullopt;
    auto fail = [&](const char* why) -> std::optional<DnsQuery> {
        if (error) *error = why;
        return std::nullopt;
    };
    if (ldns_pkt_qr(packet.get())) return fail("a response, not a query");
    if (ldns_pkt_get_opcode(packet.get()) != LDNS_PACKET_QUERY) return fail("not a standard query");
    ldns_rr_list* question = ldns_pkt_question(packet.get());
    if (!question || ldns_rr_list_rr_count(question) != 1)
        return fail("a query must ask exactly one question");
    const ldns_rr* rr = ldns_rr_list_rr(question, 0);
    DnsQuery q;
    q.id = ldns_pkt_id(packet.get());
    q.name = name_text(ldns_rr_owner(rr));
    q.type = static_cast<std::uint16_t>(ldns_rr_get_type(rr));
    q.qclass = static_cast<std::uint16_t>(ldns_rr_get_class(rr));
    q.recursion_desired = ldns_pkt_rd(packet.get());
    return q;
}

std::string dns_answer_without_records(std::string_view query_wire, std::uint16_t rcode) {
    Packet packet = read_packet(query_wire, nullptr);
    if (!packet) return {};
    ldns_pkt* p = packet.get();
    ldns_pkt_set_qr(p, true);
    ldns_pkt_set_ra(p, true);
    ldns_pkt_set_aa(p, false);
    ldns_pkt_set_rcode(p, static_cast<std::uint8_t>(rcode));
    replace_section(p, ldns_pkt_answer, ldns_pkt_set_answer, empty_list());
    replace_section(p, ldns_pkt_authority, ldns_pkt_set_authority, empty_list());
    replace_section(p, ldns_pkt_additional, ldns_pkt_set_additional, empty_list());
    ldns_pkt_set_ancount(p, 0);
    ldns_pkt_set_nscount(p, 0);
    ldns_pkt_set_arcount(p, 0);
    return write_packet(p);
}

std::string make_dns_query(const std::string& name, std::uint16_t type, std::uint16_t id) {
    ldns_rdf* owner = ldns_dname_new_frm_str(name.empty() ? "." : name.c_str());
    if (!owner) return {};
    Packet packet(
        ldns_pkt_query_new(owner, static_cast<ldns_rr_type>(type), LDNS_RR_CLASS_IN, LDNS_RD));
    if (!packet) return {};
    ldns_pkt_set_id(packet.get(), id);
    return write_packet(packet.get());
}

namespace {

// Why `p` is not the upstream's answer to `query` (nullptr when it is).
const char* answer_problem(ldns_pkt* p, const DnsQuery& query, std::uint16_t upstream_id) {
    if (!ldns_pkt_qr(p)) return "the upstream sent a query, not an answer";
    if (ldns_pkt_id(p) != upstream_id) return "answer id does not match the query";
    ldns_rr_list* question = ldns_pkt_question(p);
    if (!question || ldns_rr_list_rr_count(question) != 1)
        return "an answer must repeat exactly the one question";
    const ldns_rr* asked = ldns_rr_list_rr(question, 0);
    if (name_text(ldns_rr_owner(asked)) != query.name ||
        static_cast<std::uint16_t>(ldns_rr_get_type(asked)) != query.type)
        return "answer is for another question";
    return nullptr;
}

// Only the question and the names its CNAMEs lead to belong in the answer: an A record for
// another name would tie an allowed name to an address it does not have.
std::set<std::string> cname_chain(ldns_rr_list* answers, const std::string& name) {
    const std::size_t count = answers ? ldns_rr_list_rr_count(answers) : 0;
    std::set<std::string> chain = {name};
    for (bool grew = true; grew;) {
        grew = false;
        for (std::size_t i = 0; i < count; ++i) {
            const ldns_rr* rr = ldns_rr_list_rr(answers, i);
            if (ldns_rr_get_type(rr) != LDNS_RR_TYPE_CNAME ||
                !chain.count(name_text(ldns_rr_owner(rr))))
                continue;
            if (const ldns_rdf* target = ldns_rr_rdf(rr, 0))
                grew |= chain.insert(name_text(target)).second;
        }
    }
    return chain;
}

// The answer records to keep (passed types on the chain, A records to allowed addresses),
// noting in `out` the addresses kept and stripped and the CNAME targets.
ldns_rr_list* kept_answers(ldns_rr_list* answers, const std::set<std::string>& chain,
                           const std::function<bool(const IpAddress&)>& address_allowed,
                           FilteredDnsAnswer& out) {
    ldns_rr_list* kept = ldns_rr_list_new();
    const std::size_t count = answers ? ldns_rr_list_rr_count(answers) : 0;
    for (std::size_t i = 0; i < count; ++i) {
        const ldns_rr* rr = ldns_rr_list_rr(answers, i);
        ldns_rr_type type = ldns_rr_get_type(rr);
        if (!passed_type(type)) continue;
        std::string owner = name_text(ldns_rr_owner(rr));
        if (!chain.count(owner)) continue;
        if (type == LDNS_RR_TYPE_A) {
            const ldns_rdf* data = ldns_rr_rdf(rr, 0);
            if (!data || ldns_rdf_size(data) != 4) continue;
            boost::asio::ip::address_v4::bytes_type bytes;
            std::copy_n(ldns_rdf_data(data), 4, bytes.begin());
            DnsAddress a{owner, boost::asio::ip::address_v4(bytes), ldns_rr_ttl(rr)};
            if (!address_allowed(a.address)) {
                out.stripped.push_back(std::move(a));
                continue;
            }
            out.kept.push_back(std::move(a));
        } else if (type == LDNS_RR_TYPE_CNAME) {
            if (const ldns_rdf* target = ldns_rr_rdf(rr, 0))
                out.cnames.push_back(name_text(target));
        }
        ldns_rr_list_push_rr(kept, ldns_rr_clone(rr));
    }
    return kept;
}

// Authority keeps its SOA (negative caching); NS names and additional glue go.
void keep_only_soa(ldns_pkt* p) {
    ldns_rr_list* soa = ldns_rr_list_new();
    ldns_rr_list* authority = ldns_pkt_authority(p);
    for (std::size_t i = 0; authority && i < ldns_rr_list_rr_count(authority); ++i) {
        const ldns_rr* rr = ldns_rr_list_rr(authority, i);
        if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_SOA) ldns_rr_list_push_rr(soa, ldns_rr_clone(rr));
    }
    const auto soa_count = ldns_rr_list_rr_count(soa);
    replace_section(p, ldns_pkt_authority, ldns_pkt_set_authority, soa);
    ldns_pkt_set_nscount(p, static_cast<std::uint16_t>(soa_count));
    replace_section(p, ldns_pkt_additional, ldns_pkt_set_additional, empty_list());
    ldns_pkt_set_arcount(p, 0);
}

}  // namespace

std::optional<FilteredDnsAnswer> filter_dns_answer(
    std::string_view response_wire, const DnsQuery& query, std::uint16_t upstream_id,
    std::uint16_t answer_id, const std::function<bool(const IpAddress&)>& address_allowed,
    std::string* error) {
    Packet packet = read_packet(response_wire, error);
    if (!packet) return std::nullopt;
    ldns_pkt* p = packet.get();
    auto fail = [&](const char* why) -> std::optional<FilteredDnsAnswer> {
        if (error) *error = why;
        return std::nullopt;
    };
    if (const char* problem = answer_problem(p, query, upstream_id)) return fail(problem);

    FilteredDnsAnswer out;
    out.rcode = static_cast<std::uint16_t>(ldns_pkt_get_rcode(p));
    out.truncated = ldns_pkt_tc(p);
    ldns_rr_list* answers = ldns_pkt_answer(p);
    ldns_rr_list* kept =
        kept_answers(answers, cname_chain(answers, query.name), address_allowed, out);
    const auto kept_count = ldns_rr_list_rr_count(kept);
    replace_section(p, ldns_pkt_answer, ldns_pkt_set_answer, kept);
    ldns_pkt_set_ancount(p, static_cast<std::uint16_t>(kept_count));
    keep_only_soa(p);
    ldns_pkt_set_id(p, answer_id);
    out.wire = write_packet(p);
    if (out.wire.empty()) return fail("cannot write the filtered answer");
    return out;
}

}  // namespace deskbox::network
