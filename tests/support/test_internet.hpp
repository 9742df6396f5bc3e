// A small internet of the test's own for network tests and benchmarks: a network namespace
// made by the test, joined to the host's namespace by a veth pair with addresses the test
// picks in 198.18.0.0/15 (benchmarking, so nothing real is ever reached), holding
//   - HTTP on :80 and HTTPS on :443 of `web_address()` (a certificate for the SNI name, or the
//     address without one, from a CA of the test's own: `ca_file()`; on :8443 a self-signed
//     one nobody trusts), answering
//     "deskbox test host <address> host=<Host> sni=<SNI>", /page with an HTML page titled
//     "deskbox test page at <address>", /bytes/N with N bytes, and /headers... with the
//     request's header fields ("name: value" lines),
//   - the same on `other_address()` (a second host, for mismatch and IP-literal cases) and on
//     `lan_address()` (a third, for tests that keep it a private/special address),
//   - a UDP echo on :7 of `web_address()`,
//   - a byte source on :9000 (after a request head ending in a blank line, sends until the
//     peer closes) and a sink on :9001 (reads and counts), for throughput,
//   - a holder on :9002 of `web_address()` that accepts connections and keeps them open,
//     reading nothing (for tests that open many),
//   - upstream proxies on `web_address()`: SOCKS5 on :1080 and HTTP CONNECT on :3128, each
//     with no authentication or user "deskbox" password "proxy-pass", resolving the names
//     given to the constructor; each tunnel is noted "proxy=socks5|http target=NAME:PORT
//     auth=none|password" in requests_seen(),
//   - on request, 307 redirects of the targets under a prefix to another base URL,
//   - dnsmasq on `dns_address()`:53 answering the names given to the constructor.
// Everything goes with the object: the namespace (and with it the veth pair) and dnsmasq.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace deskbox::test {

// Whether one of the host's IPv4 addresses lies in a.b.c.0/24 (a test's subnet is taken).
bool host_has_subnet(unsigned a, unsigned b, unsigned c);

class TestInternet {
  public:
    // `names`: DNS name -> IPv4 address ("web", "other", "lan" stand for the hosts' addresses).
    explicit TestInternet(std::map<std::string, std::string> names);
    ~TestInternet();
    TestInternet(const TestInternet&) = delete;
    TestInternet& operator=(const TestInternet&) = delete;

    std::string host_side_address() const;  // the host's end of the veth (198.18.X.1)
    std::string web_address() const;        // 198.18.X.2
    std::string other_address() const;      // 198.18.X.3
    std::string lan_address() const;        // 198.18.X.4
    std::string dns_address() const { return web_address(); }
    std::string subnet() const;   // 198.18.X.0/24
    std::string ca_file() const;  // PEM of the CA :443's certificates chain to

    // "host=... sni=... address=... target=..." of every request the hosts answered, oldest
    // first; for /headers... targets followed by " | name: value" for each header field.
    std::vector<std::string> requests_seen() const;
    std::uint64_t sink_bytes() const;        // bytes the :9001 sink has read so far
    std::string host_side_link() const;      // the veth's name in the host's namespace
    std::uint64_t held_connections() const;  // connections the :9002 holder accepted so far
    void release_held();                     // closes the ones it holds
    // From now on the hosts answer a request whose target starts with `prefix` with a 307 to
    // `to_base` + its target (a registry that sends its clients elsewhere).
    void redirect(const std::string& prefix, const std::string& to_base);

    struct Impl;

  private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace deskbox::test
