#include "server/network/nft_rules.hpp"

#include <nftables/libnftables.h>

#include <memory>

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

void load_nft_ruleset(const std::string& ruleset) {
    std::unique_ptr<nft_ctx, void (*)(nft_ctx*)> ctx(nft_ctx_new(NFT_CTX_DEFAULT), nft_ctx_free);
    if (!ctx) throw NetworkError("libnftables: cannot make a context");
    nft_ctx_buffer_error(ctx.get());
    nft_ctx_buffer_output(ctx.get());
    if (nft_run_cmd_from_buffer(ctx.get(), ruleset.c_str()) != 0) {
        std::string words = nft_ctx_get_error_buffer(ctx.get());
        while (!words.empty() && (words.back() == '\n' || words.back() == ' ')) words.pop_back();
        throw NetworkError("loading the sandbox's nftables rules: " + words);
    }
}

}  // namespace deskbox::network
