// What a sandbox's outgoing TCP connection asks for, read from its first bytes before anything
// is sent on: the TLS ClientHello's server name (SNI), or the HTTP request's Host. Pure parsing
// of untrusted bytes; every length is checked against what arrived.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "server/network/network_policy.hpp"

namespace deskbox::network {

// A ClientHello is ~0.5-2 KiB (post-quantum key shares make it larger); an HTTP head rarely
// passes 8 KiB. Past this, a connection that still has not said what it wants is `other`.
inline constexpr std::size_t kMaxSniffBytes = 32 * 1024;

struct SniffResult {
    bool complete = false;  // false: need more bytes (and fewer than kMaxSniffBytes arrived)
    WireProtocol protocol = WireProtocol::other;
    // The host name asked for, normalized. nullopt when none was sent, it was an IP literal
    // (then `literal` holds it) or it was not a valid host name.
    std::optional<std::string> name;
    std::string literal;
    // The bytes claim to be HTTP or TLS but break the format: the proxy refuses them when a
    // name decides (an allow list), since a confused parser is how filters are walked around.
    bool malformed = false;
    std::string detail;  // why it is malformed, or which protocol feature decided
};

// HTTP/2's prior-knowledge connection preface (RFC 9113 section 3.4).
inline constexpr std::string_view kHttp2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Whether bytes (empty lines already skipped) are an HTTP/1 request line as the most lenient
// server reads one: a method word of visible characters in any case, blanks, and "HTTP/" later
// on the line. `maybe`: not decided by the bytes so far.
enum class RequestLine { no, maybe, yes };
RequestLine looks_like_request_line(std::string_view bytes);

// Looks at the first `bytes` a client sent. Call again with more bytes while !complete.
SniffResult sniff_client_start(std::string_view bytes);

// Parts, for tests.
SniffResult sniff_tls_client_hello(std::string_view bytes);
SniffResult sniff_http_request(std::string_view bytes);
// "host", "host:port", "[v6]:port", "1.2.3.4:80" -> fills name or literal (or malformed).
void parse_authority(std::string_view authority, SniffResult& out);

}  // namespace deskbox::network
