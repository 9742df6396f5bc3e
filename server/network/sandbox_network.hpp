// The host side of one sandbox's network, created and removed as one RAII object by the
// server (the NetworkService below) and handed to the runtime:
//
//   container, network on:   sandbox netns (eth0 10.0.2.15) --veth--> router netns (10.0.2.2)
//   microVM, network on:     guest eth0 (10.0.2.15) --tap (per QEMU process)--> router netns
//   container, network off:  sandbox netns with loopback only (still ours, for exposed ports)
//   microVM, network off:    no NIC at all
//
// The router namespace forwards nothing: its nftables rules (nft_rules.hpp) hand every TCP
// and UDP packet to deskboxd's transparent sockets there, and the egress proxy (tcp_egress,
// udp_egress, dns_service) decides by the policy and connects from the host's namespace. So
// a sandbox has no route to the host at all, and the host's namespace gets no interface,
// route, rule or sysctl from deskbox. Both namespaces are held by fds: destroying this object
// (or deskboxd dying) ends them and everything in them.
#pragma once

#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"
#include "server/network/egress_context.hpp"
#include "server/network/netns.hpp"
#include "server/network/network_core.hpp"
#include "server/network/network_policy.hpp"

namespace deskbox::network {

class NetworkService;

class SandboxNetwork {
  public:
    enum class Kind { container, microvm };
    struct Options {
        std::string sandbox_id;
        NetworkPolicy policy;
        Kind kind = Kind::container;
        std::uint64_t egress_kbps = 0;  // 0: no limit
        AuditSink audit;                // egress and DNS decisions (kind, detail)
        // Container: the namespace of a sandbox that outlived the server that made this (an
        // adopted one, e.g. /proc/PID/ns/net of its init) instead of a new one. Its veth went
        // with the old router; a new router and link replace them.
        std::string existing_netns;
        // microVM: the router namespace an earlier server built around the tap of a QEMU that
        // outlived it (an adopted sandbox's, e.g. /proc/self/fd/N), taken over with its
        // interfaces, addresses, routes and rules as they are; empty: a new router.
        std::string existing_router;
    };

    SandboxNetwork(NetworkCore& core, Options options);  // throws NetworkError
    ~SandboxNetwork();
    SandboxNetwork(const SandboxNetwork&) = delete;
    SandboxNetwork& operator=(const SandboxNetwork&) = delete;

    const std::string& sandbox_id() const { return options_.sandbox_id; }
    // The policy and egress limit in force now (a live change replaces them).
    NetworkPolicy policy() const { return *ctx_->policy(); }
    std::uint64_t egress_kbps() const { return egress_kbps_; }
    // A live change: new connections, DNS answers and every request follow `policy` at once,
    // open connections it forbids are cut, and `egress_kbps` (0: none) limits every flow.
    // Throws NetworkError when it would add or remove the sandbox's interface.
    void change(NetworkPolicy policy, std::uint64_t egress_kbps);
    Kind kind() const { return options_.kind; }
    bool has_interface() const { return options_.policy.enabled(); }

    // Container: the namespace runc joins (a /proc path to our fd; valid while this lives).
    std::string container_netns_path() const;
    // What the sandbox's /etc/resolv.conf says (empty without a network).
    std::string resolv_conf() const;
    // microVM: a new tap device in the router namespace, addressed and up, for one QEMU process
    // (the device goes when QEMU closes it). Throws NetworkError.
    UniqueFd open_tap();

    // Exposed ports: a TCP socket (not connected) in the namespace from which `port_endpoint`
    // is reached: the container's own (so 127.0.0.1 works), or a microVM's router.
    UniqueFd port_socket() const;
    boost::asio::ip::tcp::endpoint port_endpoint(std::uint16_t port) const;
    bool ports_reachable() const;  // false: a microVM without a network has no path in

    // Connections that must end with this network (exposed-port relays): stop() closes them.
    std::shared_ptr<EgressContext> context() const { return ctx_; }

    // Where egress and DNS decisions are reported from now on (the sandbox's audit log).
    void set_audit(AuditSink sink) { ctx_->set_audit(std::move(sink)); }

    nlohmann::json describe() const;  // {"policy": ..., "egress": ...}
    EgressTotals totals() const;
    std::vector<std::pair<std::string, DestinationCounts>> top_destinations(std::size_t n) const;
    // The namespaces' inode numbers (tests check that none outlives this object).
    std::vector<ino_t> namespace_inodes() const;

  private:
    void build_container_side();
    void build_router(const std::string& link);
    void start_listeners();

    NetworkCore& core_;
    Options options_;
    NetworkNamespace inner_, router_;
    std::shared_ptr<EgressContext> ctx_;
    std::mutex tap_mutex_;
    int taps_opened_ = 0;
    std::atomic<std::uint64_t> egress_kbps_;
};

// deskboxd's network service: the shared core and a factory for sandbox networks.
class NetworkService {
  public:
    explicit NetworkService(NetworkOptions options);  // throws std::invalid_argument
    ~NetworkService();
    std::shared_ptr<SandboxNetwork> create(SandboxNetwork::Options options);
    NetworkCore& core() { return *core_; }
    std::string dns_upstream() const;

  private:
    std::unique_ptr<NetworkCore> core_;
};

}  // namespace deskbox::network
