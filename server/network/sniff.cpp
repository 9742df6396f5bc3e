#include "server/network/sniff.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>

#include "common/ascii.hpp"

namespace deskbox::network {
namespace {

namespace http = boost::beast::http;

// A bounds-checked reader over the bytes of one message.
class Reader {
  public:
    explicit Reader(std::string_view bytes) : bytes_(bytes) {}
    bool u8(std::uint32_t& out) { return number(1, out); }
    bool u16(std::uint32_t& out) { return number(2, out); }
    bool u24(std::uint32_t& out) { return number(3, out); }
    bool skip(std::size_t n) {
        if (bytes_.size() - pos_ < n) return false;
        pos_ += n;
        return true;
    }
    bool take(std::size_t n, std::string_view& out) {
        if (bytes_.size() - pos_ < n) return false;
        out = bytes_.substr(pos_, n);
        pos_ += n;
        return true;
    }
    std::size_t left() const { return bytes_.size() - pos_; }

  private:
    bool number(int width, std::uint32_t& out) {
        if (bytes_.size() - pos_ < static_cast<std::size_t>(width)) return false;
        out = 0;
        for (int i = 0; i < width; ++i)
            out = (out << 8) | static_cast<std::uint8_t>(bytes_[pos_ + i]);
        pos_ += width;
        return true;
    }
    std::string_view bytes_;
    std::size_t pos_ = 0;
};

SniffResult malformed(WireProtocol protocol, std::string detail) {
    SniffResult r;
    r.complete = true;
    r.protocol = protocol;
    r.malformed = true;
    r.detail = std::move(detail);
    return r;
}

SniffResult need_more(WireProtocol protocol) {
    SniffResult r;
    r.protocol = protocol;
    return r;
}

// The server_name extension's body: a list of (type, name); type 0 is a host name.
void read_server_name(std::string_view ext, SniffResult& out) {
    Reader r(ext);
    std::uint32_t list_len = 0;
    std::string_view list;
    if (!r.u16(list_len) || !r.take(list_len, list) || r.left() != 0) {
        out.malformed = true;
        out.detail = "bad server_name extension";
        return;
    }
    Reader names(list);
    while (names.left() > 0) {
        std::uint32_t type = 0, len = 0;
        std::string_view name;
        if (!names.u8(type) || !names.u16(len) || !names.take(len, name)) {
            out.malformed = true;
            out.detail = "bad server_name entry";
            return;
        }
        if (type != 0) continue;
        if (out.name || !out.literal.empty()) {
            out.malformed = true;
            out.detail = "two host names in server_name";
            return;
        }
        if (name.find_first_of(":[]") != std::string_view::npos) {
            // A port, brackets or an IPv6 literal have no place in SNI (RFC 6066).
            out.malformed = true;
            out.detail = "server_name is not a host name";
            return;
        }
        parse_authority(name, out);
    }
}

}  // namespace

void parse_authority(std::string_view authority, SniffResult& out) {
    std::string_view host = authority;
    if (!host.empty() && host.front() == '[') {
        auto close = host.find(']');
        if (close == std::string_view::npos) {
            out.malformed = true;
            out.detail = "unterminated [ in host";
            return;
        }
        std::string_view rest = host.substr(close + 1);
        host = host.substr(1, close - 1);
        if (!rest.empty() && rest.front() != ':') {
            out.malformed = true;
            out.detail = "garbage after ] in host";
            return;
        }
        auto inside = parse_ip_address(host);
        if (inside && host.find(':') != std::string_view::npos) {
            out.literal = std::string(host);
            return;
        }
        out.malformed = true;
        out.detail = "bracketed host is not an IPv6 address";
        return;
    }
    if (std::count(host.begin(), host.end(), ':') > 1) {
        // An IPv6 address without brackets: all of it is the address, there is no port.
        if (parse_ip_address(host)) {
            out.literal = std::string(host);
            return;
        }
        out.malformed = true;
        out.detail = "an IPv6 host needs brackets";
        return;
    }
    if (auto colon = host.rfind(':'); colon != std::string_view::npos) {
        std::string_view port = host.substr(colon + 1);
        host = host.substr(0, colon);
        for (char c : port)
            if (!std::isdigit(static_cast<unsigned char>(c))) {
                out.malformed = true;
                out.detail = "bad port in host";
                return;
            }
        if (port.size() > 5) {
            out.malformed = true;
            out.detail = "bad port in host";
            return;
        }
    }
    std::string_view bare = host;
    if (!bare.empty() && bare.back() == '.') bare.remove_suffix(1);  // "1.2.3.4." is an address
    if (parse_ip_address(bare)) {
        out.literal = std::string(bare);
        return;
    }
    out.name = normalize_host_name(host);
    if (!out.name) {
        out.malformed = true;
        out.detail = "not a host name";
    }
}

SniffResult sniff_tls_client_hello(std::string_view bytes) {
    // Records: type 22 (handshake), version 3.x, length. A ClientHello may span records.
    std::string handshake;
    std::size_t pos = 0;
    std::uint32_t hello_len = 0;
    bool have_len = false;
    while (true) {
        if (have_len && handshake.size() >= hello_len + 4) break;
        if (bytes.size() - pos < 5) {
            if (bytes.size() >= kMaxSniffBytes)
                return malformed(WireProtocol::tls, "ClientHello larger than the sniff limit");
            return need_more(WireProtocol::tls);
        }
        auto type = static_cast<std::uint8_t>(bytes[pos]);
        auto major = static_cast<std::uint8_t>(bytes[pos + 1]);
        std::uint32_t record_len = (static_cast<std::uint8_t>(bytes[pos + 3]) << 8) |
                                   static_cast<std::uint8_t>(bytes[pos + 4]);
        if (type != 22 || major != 3)
            return malformed(WireProtocol::tls, "not a TLS handshake record");
        if (record_len == 0 || record_len > 16384 + 2048)
            return malformed(WireProtocol::tls, "bad TLS record length");
        if (bytes.size() - pos - 5 < record_len) {
            if (bytes.size() >= kMaxSniffBytes)
                return malformed(WireProtocol::tls, "ClientHello larger than the sniff limit");
            return need_more(WireProtocol::tls);
        }
        handshake.append(bytes.substr(pos + 5, record_len));
        pos += 5 + record_len;
        if (!have_len && handshake.size() >= 4) {
            if (static_cast<std::uint8_t>(handshake[0]) != 1)
                return malformed(WireProtocol::tls, "first handshake message is not a ClientHello");
            hello_len = (static_cast<std::uint8_t>(handshake[1]) << 16) |
                        (static_cast<std::uint8_t>(handshake[2]) << 8) |
                        static_cast<std::uint8_t>(handshake[3]);
            if (hello_len + 4 > kMaxSniffBytes)
                return malformed(WireProtocol::tls, "ClientHello larger than the sniff limit");
            have_len = true;
        }
    }
    Reader r(std::string_view(handshake).substr(4, hello_len));
    std::uint32_t len = 0;
    SniffResult out;
    out.complete = true;
    out.protocol = WireProtocol::tls;
    if (!r.skip(2 + 32) || !r.u8(len) || !r.skip(len) || !r.u16(len) || !r.skip(len) ||
        !r.u8(len) || !r.skip(len))
        return malformed(WireProtocol::tls, "truncated ClientHello");
    if (r.left() == 0) {
        out.detail = "no extensions";
        return out;
    }
    std::uint32_t ext_total = 0;
    std::string_view exts;
    if (!r.u16(ext_total) || !r.take(ext_total, exts) || r.left() != 0)
        return malformed(WireProtocol::tls, "bad ClientHello extensions length");
    Reader e(exts);
    bool seen_sni = false;
    while (e.left() > 0) {
        std::uint32_t type = 0, ext_len = 0;
        std::string_view body;
        if (!e.u16(type) || !e.u16(ext_len) || !e.take(ext_len, body))
            return malformed(WireProtocol::tls, "truncated extension");
        if (type != 0) continue;
        if (seen_sni) return malformed(WireProtocol::tls, "two server_name extensions");
        seen_sni = true;
        read_server_name(body, out);
        if (out.malformed) {
            out.name.reset();
            return out;
        }
    }
    out.detail = seen_sni ? "sni" : "no server_name";
    return out;
}

SniffResult sniff_http_request(std::string_view bytes) {
    http::request_parser<http::empty_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(kMaxSniffBytes));
    // Only the head is read: any Content-Length is fine (Beast's default limit, 1 MB, refused
    // larger uploads as malformed).
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    parser.eager(false);
    boost::beast::error_code ec;
    std::size_t head_size = parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
    if (ec == http::error::need_more) {
        if (bytes.size() >= kMaxSniffBytes)
            return malformed(WireProtocol::http, "request head larger than the sniff limit");
        return need_more(WireProtocol::http);
    }
    if (ec && !parser.is_header_done())
        return malformed(WireProtocol::http, "not an HTTP request: " + ec.message());
    if (!parser.is_header_done()) return need_more(WireProtocol::http);
    const auto& req = parser.get();
    SniffResult out;
    out.complete = true;
    out.protocol = WireProtocol::http;
    if (req.count(http::field::host) > 1)
        return malformed(WireProtocol::http, "more than one Host header");
    // A line folded onto the one before (obs-fold) is read as part of it by some servers and as
    // a field of its own by others: RFC 9112 section 5.2 lets a server refuse it, and we do.
    std::string_view head = bytes.substr(0, head_size);
    for (std::size_t nl = head.find('\n'); nl != std::string_view::npos && nl + 1 < head.size();
         nl = head.find('\n', nl + 1))
        if (head[nl + 1] == ' ' || head[nl + 1] == '\t')
            return malformed(WireProtocol::http, "a header line folded onto the one before");
    std::string_view target(req.target().data(), req.target().size());
    std::string_view authority;
    bool absolute = false;
    for (std::string_view scheme : {"http://", "https://"}) {
        if (target.size() > scheme.size()) {
            bool same = true;
            for (std::size_t i = 0; i < scheme.size(); ++i)
                same &= std::tolower(static_cast<unsigned char>(target[i])) == scheme[i];
            if (same) {
                absolute = true;
                authority = target.substr(scheme.size());
                authority = authority.substr(0, authority.find_first_of("/?#"));
                if (auto at = authority.rfind('@'); at != std::string_view::npos)
                    authority = authority.substr(at + 1);
            }
        }
    }
    // Any case: a lenient server reads "connect" as CONNECT too.
    if (ascii_iequals(std::string_view(req.method_string().data(), req.method_string().size()),
                      "CONNECT")) {
        absolute = true;
        authority = target;
    }
    auto host = req.find(http::field::host);
    if (host != req.end()) {
        parse_authority(std::string_view(host->value().data(), host->value().size()), out);
        if (out.malformed) return out;
    }
    if (absolute) {
        // The absolute form wins over Host in HTTP/1.1; both must say the same.
        SniffResult from_target;
        parse_authority(authority, from_target);
        if (from_target.malformed) return malformed(WireProtocol::http, "bad request-target host");
        if (host != req.end() &&
            (from_target.name != out.name || from_target.literal != out.literal))
            return malformed(WireProtocol::http, "request-target and Host name different hosts");
        out.name = from_target.name;
        out.literal = from_target.literal;
    }
    out.detail = host != req.end() ? "host" : absolute ? "absolute-form target" : "no Host";
    return out;
}

SniffResult sniff_client_start(std::string_view bytes) {
    if (bytes.empty()) return need_more(WireProtocol::other);
    if (static_cast<std::uint8_t>(bytes[0]) == 22) return sniff_tls_client_hello(bytes);
    // Servers skip empty lines before a request line (RFC 9112 section 2.2), so the sniffer does.
    std::string_view request =
        bytes.substr(std::min(bytes.find_first_not_of("\r\n"), bytes.size()));
    // HTTP/2's prior-knowledge preface carries its authority compressed: `other`. Until all of
    // it arrived it may still turn into an HTTP/1 request ("PRI / HTTP/1.1"), so wait as HTTP.
    if (request.size() >= kHttp2Preface.size() && request.starts_with(kHttp2Preface)) {
        SniffResult r;
        r.complete = true;
        r.detail = "HTTP/2 prior knowledge";
        return r;
    }
    if (kHttp2Preface.starts_with(request)) {
        if (bytes.size() >= kMaxSniffBytes)
            return malformed(WireProtocol::http, "nothing but empty lines up to the sniff limit");
        return need_more(WireProtocol::http);
    }
    switch (looks_like_request_line(request)) {
        case RequestLine::no: {
            SniffResult r;
            r.complete = true;
            r.protocol = WireProtocol::other;
            r.detail = "neither TLS nor HTTP/1";
            return r;
        }
        case RequestLine::maybe:
            if (bytes.size() >= kMaxSniffBytes)
                return malformed(WireProtocol::http, "request line larger than the sniff limit");
            return need_more(WireProtocol::http);
        case RequestLine::yes:
            break;
    }
    return sniff_http_request(request);
}

RequestLine looks_like_request_line(std::string_view bytes) {
    // Lenient on purpose: whatever some server would read as a request must not pass as `other`
    // (an address DNS gave out is reached with any Host then). A false `http` is only refused.
    std::size_t word = 0;
    while (word < bytes.size() && bytes[word] > 0x20 && bytes[word] < 0x7f) ++word;
    if (word == bytes.size()) return RequestLine::maybe;  // the method word may go on
    if (word == 0 || (bytes[word] != ' ' && bytes[word] != '\t')) return RequestLine::no;
    std::size_t end = bytes.find('\n', word);
    std::string_view line = bytes.substr(0, end);
    std::string_view version = "http/";
    auto found = std::search(line.begin(), line.end(), version.begin(), version.end(),
                             [](char a, char b) { return ascii_lower(a) == b; });
    if (found != line.end()) return RequestLine::yes;
    return end == std::string_view::npos ? RequestLine::maybe : RequestLine::no;
}

}  // namespace deskbox::network
