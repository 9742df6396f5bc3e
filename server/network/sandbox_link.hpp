// The addresses on every sandbox's side of its network. Each sandbox has a link of its own
// (a veth pair or a tap into its own router namespace), so every sandbox uses the same ones,
// the way QEMU's user networking does: a microVM saved once and restored many times keeps a
// configuration that is right for every copy, and no address is ever shared on a common
// bridge.
#pragma once

namespace deskbox::network {

inline constexpr const char* kGuestAddress = "10.0.2.15";   // the sandbox
inline constexpr const char* kGatewayAddress = "10.0.2.2";  // its router (deskboxd's side)
inline constexpr const char* kDnsAddress = "10.0.2.3";      // the DNS server it is told about
inline constexpr const char* kLinkRange = "10.0.2.0/24";    // never a destination
inline constexpr const char* kGuestInterface = "eth0";

}  // namespace deskbox::network
