#include "server/network/sandbox_network.hpp"

#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "server/network/dns_service.hpp"
#include "server/network/nft_rules.hpp"
#include "server/network/rtnetlink.hpp"
#include "server/network/sandbox_link.hpp"
#include "server/network/tcp_egress.hpp"
#include "server/network/transparent_socket.hpp"
#include "server/network/udp_egress.hpp"

namespace deskbox::network {
namespace {

constexpr const char* kRouterLink = "sandbox0";  // the router's end of a container's veth

void write_proc(const std::string& path, const std::string& value) {
    // /proc/sys/net belongs to the namespace of the thread that opens it.
    FILE* f = std::fopen(path.c_str(), "we");
    if (!f) return;  // IPv6 may be compiled out: nothing to turn off then
    std::fputs(value.c_str(), f);
    std::fclose(f);
}

void ipv6_off() {
    write_proc("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
    write_proc("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
}

}  // namespace

SandboxNetwork::SandboxNetwork(NetworkCore& core, Options options)
    : core_(core), options_(std::move(options)), egress_kbps_(options_.egress_kbps) {
    ctx_ = std::make_shared<EgressContext>(core_, options_.sandbox_id, options_.policy,
                                           options_.egress_kbps * 1000 / 8, options_.audit);
    try {
        if (options_.kind == Kind::container) build_container_side();
        if (options_.policy.enabled()) {
            if (options_.kind == Kind::microvm && !options_.existing_router.empty()) {
                // Only our listeners went with the old server; their ports are free again.
                router_ = NetworkNamespace::open(options_.existing_router);
                ctx_->router = &router_;
            } else {
                router_ = NetworkNamespace::create();
                ctx_->router = &router_;
                build_router(options_.kind == Kind::container ? kRouterLink : "");
            }
            start_listeners();
        }
    } catch (...) {
        ctx_->stop(std::chrono::seconds(2));
        throw;
    }
}

SandboxNetwork::~SandboxNetwork() {
    // Sockets first (they hold the router namespace), then the namespaces go with our fds.
    ctx_->stop(std::chrono::seconds(3));
}

void SandboxNetwork::build_container_side() {
    if (!options_.existing_netns.empty()) {
        // An adopted sandbox's, or a new one the sandbox's user namespace owns.
        inner_ = NetworkNamespace::open(options_.existing_netns);
        // The old router namespace may still be on its way out (the kernel frees namespaces
        // asynchronously), and its veth with it: remove our end's name now.
        inner_.run([&] { RtNetlink().delete_link(kGuestInterface); });
    } else {
        inner_ = NetworkNamespace::create();
    }
    inner_.run([&] {
        RtNetlink nl;
        nl.set_up("lo");
        if (options_.policy.enabled()) ipv6_off();
    });
}

void SandboxNetwork::build_router(const std::string& link) {
    router_.run([&] {
        RtNetlink nl;
        nl.set_up("lo");
        ipv6_off();
        if (!link.empty()) {
            nl.add_veth(link, kGuestInterface, inner_.fd());
            nl.add_address(link, kGatewayAddress, 32, kGuestAddress);
            nl.add_address(link, kDnsAddress, 32);
            nl.set_up(link);
        }
        // TPROXY: marked packets find every address local in table 100.
        nl.add_fwmark_rule(kProxyMark, kProxyRouteTable);
        nl.add_local_default_route(kProxyRouteTable);
    });
    load_nft_ruleset(router_, router_ruleset());
    if (!link.empty()) {
        inner_.run([&] {
            RtNetlink nl;
            nl.add_address(kGuestInterface, kGuestAddress, 32, kGatewayAddress);
            nl.set_up(kGuestInterface);
            nl.add_route("0.0.0.0", 0, kGatewayAddress, kGuestInterface);
        });
    }
}

void SandboxNetwork::start_listeners() {
    UniqueFd tcp, udp, dns;
    router_.run([&] {
        tcp = transparent_socket(SOCK_STREAM, kTcpProxyPort);
        udp = transparent_socket(SOCK_DGRAM, kUdpRelayPort);
        dns = transparent_socket(SOCK_DGRAM, kDnsPort);
    });
    std::make_shared<TcpEgressListener>(ctx_, std::move(tcp))->start();
    std::make_shared<UdpEgressListener>(ctx_, std::move(udp))->start();
    std::make_shared<DnsUdpServer>(ctx_, std::move(dns))->start();
}

std::string SandboxNetwork::container_netns_path() const {
    return inner_.valid() ? inner_.path() : std::string();
}

std::string SandboxNetwork::resolv_conf() const {
    if (!options_.policy.enabled()) return {};
    return std::string(
               "# deskbox: DNS for this sandbox, filtered by its network policy\n"
               "nameserver ") +
           kDnsAddress + "\noptions edns0\n";
}

UniqueFd SandboxNetwork::open_tap() {
    if (options_.kind != Kind::microvm || !router_.valid())
        throw NetworkError("this sandbox has no network to attach a tap to");
    std::lock_guard lock(tap_mutex_);
    // A fresh name per QEMU process: the old device may not be gone yet when a restore starts,
    // and an adopted router still has the taps of the server before.
    std::string name;
    UniqueFd tap;
    router_.run([&] {
        do name = "tap" + std::to_string(taps_opened_++);
        while (::if_nametoindex(name.c_str()) != 0);
        tap = open_tap_device(name);
        RtNetlink nl;
        nl.add_address(name, kGatewayAddress, 32, kGuestAddress);
        nl.add_address(name, kDnsAddress, 32);
        nl.set_up(name);
    });
    return tap;
}

UniqueFd SandboxNetwork::port_socket() const {
    if (inner_.valid()) return inner_.socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
    if (router_.valid()) return router_.socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
    throw NetworkError("sandbox " + options_.sandbox_id +
                       " has no network (a microVM created with network: false has no NIC)");
}

boost::asio::ip::tcp::endpoint SandboxNetwork::port_endpoint(std::uint16_t port) const {
    auto address = boost::asio::ip::make_address(inner_.valid() ? "127.0.0.1" : kGuestAddress);
    return {address, port};
}

bool SandboxNetwork::ports_reachable() const {
    return inner_.valid() || router_.valid();
}

void SandboxNetwork::change(NetworkPolicy policy, std::uint64_t egress_kbps) {
    if (policy.enabled() != options_.policy.enabled())
        throw NetworkError(options_.policy.enabled()
                               ? "a running sandbox's network cannot be switched off (allow "
                                 "nothing instead: {\"allow\": []})"
                               : "a sandbox created without a network cannot get one while it "
                                 "runs");
    egress_kbps_ = egress_kbps;
    ctx_->replace_policy(std::move(policy), egress_kbps * 1000 / 8);
}

nlohmann::json SandboxNetwork::describe() const {
    nlohmann::json out = {{"policy", ctx_->policy()->describe()}};
    if (options_.policy.enabled()) {
        out["egress"] = ctx_->stats.to_json();
        if (const std::uint64_t kbps = egress_kbps_) out["egress_kbps"] = kbps;
        out["addresses"] = {
            {"sandbox", kGuestAddress}, {"gateway", kGatewayAddress}, {"dns", kDnsAddress}};
    }
    return out;
}

EgressTotals SandboxNetwork::totals() const {
    return ctx_->stats.totals();
}

std::vector<std::pair<std::string, DestinationCounts>> SandboxNetwork::top_destinations(
    std::size_t n) const {
    return ctx_->stats.top(n);
}

std::vector<ino_t> SandboxNetwork::namespace_inodes() const {
    std::vector<ino_t> out;
    if (inner_.valid()) out.push_back(inner_.inode());
    if (router_.valid()) out.push_back(router_.inode());
    return out;
}

NetworkService::NetworkService(NetworkOptions options)
    : core_(std::make_unique<NetworkCore>(std::move(options))) {}

NetworkService::~NetworkService() = default;

std::shared_ptr<SandboxNetwork> NetworkService::create(SandboxNetwork::Options options) {
    return std::make_shared<SandboxNetwork>(*core_, std::move(options));
}

std::string NetworkService::dns_upstream() const {
    const auto& e = core_->dns_upstream();
    return e.address().is_v6() ? "[" + e.address().to_string() + "]:" + std::to_string(e.port())
                               : e.address().to_string() + ":" + std::to_string(e.port());
}

}  // namespace deskbox::network
