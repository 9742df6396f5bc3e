#include "server/network/nft_rules.hpp"

#include <filesystem>
#include <system_error>

#include "server/network/netns.hpp"
#include "server/network/sandbox_link.hpp"

namespace deskbox::network {

std::string router_ruleset() {
    const std::string mark = std::to_string(kProxyMark);
    // Prerouting sees what arrives from the sandbox's link (everything but lo). Packets of a
    // proxied flow find their transparent socket through the tproxy lookup; replies to
    // deskboxd's own connections into the sandbox (exposed ports) reach a normal socket on
    // the gateway address. Everything else (ICMP, IPv6) is dropped.
    return "table inet deskbox {\n"
           "  chain prerouting {\n"
           "    type filter hook prerouting priority mangle; policy drop;\n"
           "    iifname \"lo\" accept\n"
           "    meta nfproto ipv6 drop\n"
           "    udp dport " +
           std::to_string(kDnsPort) + " tproxy ip to :" + std::to_string(kDnsPort) +
           " meta mark set " + mark +
           " accept\n"
           "    meta l4proto tcp tproxy ip to :" +
           std::to_string(kTcpProxyPort) + " meta mark set " + mark +
           " accept\n"
           "    meta l4proto udp tproxy ip to :" +
           std::to_string(kUdpRelayPort) + " meta mark set " + mark +
           " accept\n"
           "    meta l4proto tcp ip daddr " +
           kGatewayAddress +
           " accept\n"
           "  }\n"
           "}\n";
}

void load_nft_ruleset(const NetworkNamespace& ns, const std::string& ruleset) {
    // PATH may lack sbin (a deskboxd started from a user's shell).
    std::error_code ec;
    const std::string nft = std::filesystem::exists("/usr/sbin/nft", ec) ? "/usr/sbin/nft" : "nft";
    try {
        ns.exec({nft, "-f", "-"}, ruleset);
    } catch (const NetworkError& e) {
        throw NetworkError(std::string("loading the sandbox's nftables rules: ") + e.what());
    }
}

}  // namespace deskbox::network
