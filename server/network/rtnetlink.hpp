// The few rtnetlink requests a sandbox network needs (a veth pair across namespaces, addresses,
// routes, a policy-routing rule), sent with libmnl on a NETLINK_ROUTE socket of the namespace the
// calling thread is in. Every request waits for the kernel's answer; a refusal throws
// NetworkError with the kernel's reason.
#pragma once

#include <cstdint>
#include <string>

#include "common/unique_fd.hpp"

struct mnl_socket;

namespace deskbox::network {

class RtNetlink {
  public:
    RtNetlink();  // in the calling thread's network namespace
    ~RtNetlink();
    RtNetlink(const RtNetlink&) = delete;
    RtNetlink& operator=(const RtNetlink&) = delete;

    // A veth pair: `name` here, `peer_name` in the namespace of `peer_netns_fd`.
    void add_veth(const std::string& name, const std::string& peer_name, int peer_netns_fd);
    void set_up(const std::string& ifname);
    // Removes `ifname` (a veth's peer goes with it); no such interface is not an error.
    void delete_link(const std::string& ifname);
    // `local`/`prefix` on `ifname`; with `peer`, a point-to-point address (the other end).
    void add_address(const std::string& ifname, const std::string& local, int prefix,
                     const std::string& peer = {});
    // A route to `destination/prefix` through `gateway` (empty: on the link) via `ifname`.
    void add_route(const std::string& destination, int prefix, const std::string& gateway,
                   const std::string& ifname);
    // `local 0.0.0.0/0 dev lo table T`: every address is local in table T (TPROXY's route).
    void add_local_default_route(int table);
    // `ip rule add fwmark M lookup T`.
    void add_fwmark_rule(std::uint32_t mark, int table);

  private:
    void request(void* header, const char* what);
    unsigned index_of(const std::string& ifname) const;

    mnl_socket* socket_ = nullptr;
    std::uint32_t port_id_ = 0;
    std::uint32_t sequence_ = 1;
};

// Opens /dev/net/tun as a tap device `name` (no packet info, with virtio-net headers, as QEMU
// wants) in the calling thread's namespace. Throws NetworkError.
UniqueFd open_tap_device(const std::string& name);

}  // namespace deskbox::network
