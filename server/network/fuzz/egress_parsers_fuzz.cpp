// libFuzzer target for what the egress path parses from sandboxes and upstreams: the first
// bytes of a connection (TLS ClientHello, HTTP request head), DNS queries, DNS answers and
// host authorities. Byte 0 picks the parser; the rest is its input. Beyond "no crash, no UB,
// no leak" it checks:
//   - a name the sniffer returns is a normalized host name, never together with a literal;
//   - a complete sniff stays the same when more bytes follow (they are the payload);
//   - a query the DNS parser accepts gets a well-formed answer of our own with its id;
//   - a filtered upstream answer keeps only addresses the policy allowed, and parses again.
// protocol: sniff.hpp, dns_message.hpp. The seed corpus is replayed by network_policy_tests.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/network/dns_message.hpp"
#include "server/network/network_policy.hpp"
#include "server/network/sniff.hpp"

namespace {

using namespace deskbox::network;

void check(bool condition, const char* what) {
    if (!condition) {
        std::fprintf(stderr, "egress parser invariant broken: %s\n", what);
        std::abort();
    }
}

void fuzz_sniff(std::string_view bytes) {
    SniffResult r = sniff_client_start(bytes);
    if (r.name) {
        check(normalize_host_name(*r.name) == r.name, "sniffed name is not normalized");
        check(r.literal.empty(), "a name and a literal at once");
    }
    if (!r.complete) return;
    std::string more(bytes);
    more += "\r\n\r\nGET / HTTP/1.1\r\nHost: other.example\r\n\r\n";
    SniffResult again = sniff_client_start(more);
    check(again.complete, "a complete sniff became incomplete with more bytes");
    check(again.protocol == r.protocol && again.name == r.name && again.literal == r.literal &&
              again.malformed == r.malformed,
          "a complete sniff changed with more bytes");
}

void fuzz_dns_query(std::string_view bytes) {
    auto q = parse_dns_query(bytes);
    if (!q) return;
    std::string answer = dns_answer_without_records(bytes, kDnsRcodeNxdomain);
    check(!answer.empty(), "no answer for an accepted query");
    check(answer.size() >= 12 && static_cast<std::uint8_t>(answer[0]) == (q->id >> 8) &&
              static_cast<std::uint8_t>(answer[1]) == (q->id & 0xff),
          "our answer does not carry the query's id");
    check(!parse_dns_query(answer), "our answer parses as a query");
}

void fuzz_dns_answer(std::string_view bytes) {
    DnsQuery q;
    q.id = 0x1234;
    q.name = "example.org";
    q.type = kDnsTypeA;
    q.qclass = 1;
    auto allowed = [](const IpAddress& a) {
        return classify(a).kind == AddressKind::public_unicast;
    };
    auto filtered = filter_dns_answer(bytes, q, 0x1234, 0x4321, allowed);
    if (!filtered) return;
    for (const auto& a : filtered->kept)
        check(allowed(a.address), "kept an address the policy refused");
    for (const auto& a : filtered->stripped)
        check(!allowed(a.address), "stripped an allowed address");
    // Our own answer must survive our own filter again, unchanged in what it keeps.
    DnsQuery mine = q;
    mine.id = 0x4321;
    auto again = filter_dns_answer(filtered->wire, mine, 0x4321, 0x4321, allowed);
    check(again.has_value(), "a filtered answer does not parse again");
    check(again->kept.size() == filtered->kept.size(), "filtering twice changed the answer");
}

void fuzz_authority(std::string_view bytes) {
    SniffResult r;
    parse_authority(bytes, r);
    if (r.name) check(normalize_host_name(*r.name) == r.name, "authority name not normalized");
    check(!(r.name && !r.literal.empty()), "an authority that is a name and a literal");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
    switch (data[0] % 4) {
        case 0:
            fuzz_sniff(bytes);
            break;
        case 1:
            fuzz_dns_query(bytes);
            break;
        case 2:
            fuzz_dns_answer(bytes);
            break;
        default:
            fuzz_authority(bytes);
            break;
    }
    return 0;
}
