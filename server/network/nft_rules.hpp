// The nftables rules of a sandbox's router namespace, loaded by the `nft` tool (nftables package)
// run in that namespace. They send every TCP and UDP packet the sandbox sends to
// deskboxd's transparent sockets (TPROXY), so nothing is routed by the kernel past the router:
// the egress proxy decides, and connects from the host's namespace on the sandbox's behalf.
#pragma once

#include <cstdint>
#include <string>

#include "server/network/netns.hpp"

namespace deskbox::network {

inline constexpr std::uint16_t kTcpProxyPort = 15001;  // in the router namespace
inline constexpr std::uint16_t kUdpRelayPort = 15002;
inline constexpr std::uint16_t kDnsPort = 53;
inline constexpr std::uint32_t kProxyMark = 1;  // marks packets for the local route table
inline constexpr int kProxyRouteTable = 100;

std::string router_ruleset();

// Loads `ruleset` (nft syntax) into `ns` with `nft -f -` in a child process that holds only its
// stdin, stdout and stderr. Not libnftables in deskboxd: it select()s on its netlink socket,
// and glibc aborts the process once that socket's fd is 1024 or more (FD_SETSIZE), which ~80
// sandboxes' fds reach. Throws NetworkError with nft's message.
void load_nft_ruleset(const NetworkNamespace& ns, const std::string& ruleset);

}  // namespace deskbox::network
