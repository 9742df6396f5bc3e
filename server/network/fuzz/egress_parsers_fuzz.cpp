// libFuzzer target for what the egress path parses from sandboxes and upstreams: the first
// bytes of a connection (TLS ClientHello, HTTP request head), DNS queries, DNS answers and
// host authorities. Byte 0 picks the parser; the rest is its input. Beyond "no crash, no UB,
// no leak" it checks:
//   - whatever a lenient server reads as an HTTP/1 request (empty lines first, a lower-case or
//     unknown method) is never `other`, and its only Host names the host the sniffer names;
//   - a name the sniffer returns is a normalized host name, never together with a literal;
//   - a complete sniff stays the same when more bytes follow (they are the payload);
//   - a query the DNS parser accepts gets a well-formed answer of our own with its id;
//   - a filtered upstream answer keeps only addresses the policy allowed, and parses again.
// protocol: sniff.hpp, dns_message.hpp. The seed corpus is replayed by network_policy_tests.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/ascii.hpp"
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

using deskbox::ascii_iequals;

std::string_view trim_blanks(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
        s.remove_suffix(1);
    return s;
}

// A reading of an HTTP/1 request head written apart from the sniffer, as a lenient server
// reads one: empty lines skipped, any visible method word, "HTTP/" anywhere on the first line.
// Whatever it calls a request must never pass as `other`, and where its Host is the only thing
// that names the destination, the sniffer must name the same host.
void check_against_reference(std::string_view bytes, const SniffResult& r) {
    std::string_view request = bytes;
    while (!request.empty() && (request.front() == '\r' || request.front() == '\n'))
        request.remove_prefix(1);
    if (bytes.empty() || static_cast<std::uint8_t>(bytes[0]) == 22) return;
    if (request.starts_with(kHttp2Preface)) return;
    std::size_t line_end = request.find('\n');
    std::string_view line = request.substr(0, line_end);
    std::size_t blank = line.find_first_of(" \t");
    if (blank == 0 || blank == std::string_view::npos) return;
    std::string_view method = line.substr(0, blank);
    for (char c : method)
        if (c <= 0x20 || c >= 0x7f) return;
    bool has_version = false;
    for (std::size_t i = 0; i + 5 <= line.size(); ++i)
        has_version |= ascii_iequals(line.substr(i, 5), "http/");
    if (!has_version) return;
    check(r.protocol != WireProtocol::other, "a request a lenient server reads passed as other");
    if (!r.complete || r.malformed) return;
    // The head as lines; a complete sniff means the blank line arrived.
    std::size_t head_end = request.find("\r\n\r\n");
    if (head_end == std::string_view::npos) return;
    std::string_view fields = request.substr(line_end + 1, head_end + 2 - (line_end + 1));
    int hosts = 0;
    std::string_view host_value;
    while (!fields.empty()) {
        std::size_t nl = fields.find('\n');
        std::string_view field = fields.substr(0, nl);
        fields.remove_prefix(nl == std::string_view::npos ? fields.size() : nl + 1);
        check(field.empty() || (field.front() != ' ' && field.front() != '\t'),
              "a folded header line was not refused");
        std::size_t colon = field.find(':');
        if (colon != std::string_view::npos && ascii_iequals(field.substr(0, colon), "host")) {
            ++hosts;
            host_value = trim_blanks(field.substr(colon + 1));
        }
    }
    std::string_view target = trim_blanks(line.substr(blank + 1));
    if (hosts != 1 || target.empty() || target.front() != '/' || ascii_iequals(method, "CONNECT"))
        return;
    SniffResult reference;
    parse_authority(host_value, reference);
    if (reference.malformed) return;
    check(reference.name == r.name && reference.literal == r.literal,
          "the sniffed host is not the one the reference finds");
}

void fuzz_sniff(std::string_view bytes) {
    SniffResult r = sniff_client_start(bytes);
    if (r.name) {
        check(normalize_host_name(*r.name) == r.name, "sniffed name is not normalized");
        check(r.literal.empty(), "a name and a literal at once");
    }
    check_against_reference(bytes, r);
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
