#include "server/network/rtnetlink.hpp"

#include <net/if.h>  // before the linux/ headers, which defer to it

#include <arpa/inet.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/fib_rules.h>
#include <linux/if_link.h>
#include <linux/if_tun.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include "server/network/netns.hpp"

namespace deskbox::network {
namespace {

in_addr ipv4(const std::string& text, const char* what) {
    in_addr out{};
    if (::inet_pton(AF_INET, text.c_str(), &out) != 1)
        throw NetworkError(std::string(what) + ": not an IPv4 address: " + text);
    return out;
}

// One request's buffer and header; `T` is the family header after it (ifinfomsg, ...).
template <typename T>
struct Request {
    std::vector<char> buffer = std::vector<char>(MNL_SOCKET_BUFFER_SIZE);
    nlmsghdr* header;
    T* body;
    Request(std::uint16_t type, std::uint16_t flags) {
        header = mnl_nlmsg_put_header(buffer.data());
        header->nlmsg_type = type;
        header->nlmsg_flags = flags;
        body = static_cast<T*>(mnl_nlmsg_put_extra_header(header, sizeof(T)));
    }
};

constexpr std::uint16_t kCreate = NLM_F_CREATE | NLM_F_EXCL;

}  // namespace

RtNetlink::RtNetlink() {
    socket_ = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
    if (!socket_) throw NetworkError(std::string("netlink socket: ") + std::strerror(errno));
    if (mnl_socket_bind(socket_, 0, MNL_SOCKET_AUTOPID) < 0) {
        int err = errno;
        mnl_socket_close(socket_);
        throw NetworkError(std::string("netlink bind: ") + std::strerror(err));
    }
    port_id_ = mnl_socket_get_portid(socket_);
    sequence_ = static_cast<std::uint32_t>(std::time(nullptr));
}

RtNetlink::~RtNetlink() {
    if (socket_) mnl_socket_close(socket_);
}

unsigned RtNetlink::index_of(const std::string& ifname) const {
    // if_nametoindex asks through a socket of the calling thread's namespace, like ours.
    unsigned index = ::if_nametoindex(ifname.c_str());
    if (index == 0) throw NetworkError("no interface " + ifname + ": " + std::strerror(errno));
    return index;
}

void RtNetlink::request(void* header, const char* what) {
    auto* nlh = static_cast<nlmsghdr*>(header);
    nlh->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
    nlh->nlmsg_seq = ++sequence_;
    if (mnl_socket_sendto(socket_, nlh, nlh->nlmsg_len) < 0)
        throw NetworkError(std::string(what) + ": netlink send: " + std::strerror(errno));
    std::vector<char> buffer(MNL_SOCKET_BUFFER_SIZE);
    while (true) {
        ssize_t n = mnl_socket_recvfrom(socket_, buffer.data(), buffer.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            throw NetworkError(std::string(what) + ": netlink receive: " + std::strerror(errno));
        }
        int r = mnl_cb_run(buffer.data(), static_cast<std::size_t>(n), nlh->nlmsg_seq, port_id_,
                           nullptr, nullptr);
        if (r == MNL_CB_ERROR) throw NetworkError(std::string(what) + ": " + std::strerror(errno));
        if (r == MNL_CB_STOP) return;
    }
}

void RtNetlink::add_veth(const std::string& name, const std::string& peer_name, int peer_netns_fd) {
    Request<ifinfomsg> r(RTM_NEWLINK, kCreate);
    nlmsghdr* nlh = r.header;
    r.body->ifi_family = AF_UNSPEC;
    mnl_attr_put_strz(nlh, IFLA_IFNAME, name.c_str());
    nlattr* linkinfo = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
    mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "veth");
    nlattr* data = mnl_attr_nest_start(nlh, IFLA_INFO_DATA);
    nlattr* peer = mnl_attr_nest_start(nlh, VETH_INFO_PEER);
    // The peer's own ifinfomsg comes first inside VETH_INFO_PEER.
    auto* peer_ifm = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
    std::memset(peer_ifm, 0, sizeof *peer_ifm);
    mnl_attr_put_strz(nlh, IFLA_IFNAME, peer_name.c_str());
    mnl_attr_put_u32(nlh, IFLA_NET_NS_FD, static_cast<std::uint32_t>(peer_netns_fd));
    mnl_attr_nest_end(nlh, peer);
    mnl_attr_nest_end(nlh, data);
    mnl_attr_nest_end(nlh, linkinfo);
    request(nlh, ("create veth " + name).c_str());
}

void RtNetlink::set_up(const std::string& ifname) {
    Request<ifinfomsg> r(RTM_NEWLINK, 0);
    r.body->ifi_family = AF_UNSPEC;
    r.body->ifi_index = static_cast<int>(index_of(ifname));
    r.body->ifi_flags = IFF_UP;
    r.body->ifi_change = IFF_UP;
    request(r.header, ("set " + ifname + " up").c_str());
}

void RtNetlink::delete_link(const std::string& ifname) {
    const unsigned index = ::if_nametoindex(ifname.c_str());
    if (index == 0) return;
    Request<ifinfomsg> r(RTM_DELLINK, 0);
    r.body->ifi_family = AF_UNSPEC;
    r.body->ifi_index = static_cast<int>(index);
    request(r.header, ("delete " + ifname).c_str());
}

void RtNetlink::add_address(const std::string& ifname, const std::string& local, int prefix,
                            const std::string& peer) {
    Request<ifaddrmsg> r(RTM_NEWADDR, kCreate);
    nlmsghdr* nlh = r.header;
    auto* ifa = r.body;
    ifa->ifa_family = AF_INET;
    ifa->ifa_prefixlen = static_cast<unsigned char>(prefix);
    ifa->ifa_scope = RT_SCOPE_UNIVERSE;
    ifa->ifa_index = index_of(ifname);
    in_addr l = ipv4(local, "address");
    mnl_attr_put(nlh, IFA_LOCAL, sizeof l, &l);
    in_addr a = peer.empty() ? l : ipv4(peer, "peer address");
    mnl_attr_put(nlh, IFA_ADDRESS, sizeof a, &a);
    request(nlh, ("add address " + local + " to " + ifname).c_str());
}

void RtNetlink::add_route(const std::string& destination, int prefix, const std::string& gateway,
                          const std::string& ifname) {
    Request<rtmsg> r(RTM_NEWROUTE, kCreate);
    nlmsghdr* nlh = r.header;
    auto* rtm = r.body;
    rtm->rtm_family = AF_INET;
    rtm->rtm_dst_len = static_cast<unsigned char>(prefix);
    rtm->rtm_table = RT_TABLE_MAIN;
    rtm->rtm_protocol = RTPROT_STATIC;
    rtm->rtm_scope = gateway.empty() ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE;
    rtm->rtm_type = RTN_UNICAST;
    if (prefix > 0) {
        in_addr d = ipv4(destination, "route destination");
        mnl_attr_put(nlh, RTA_DST, sizeof d, &d);
    }
    if (!gateway.empty()) {
        in_addr g = ipv4(gateway, "gateway");
        mnl_attr_put(nlh, RTA_GATEWAY, sizeof g, &g);
    }
    mnl_attr_put_u32(nlh, RTA_OIF, index_of(ifname));
    request(nlh, ("add route " + destination + "/" + std::to_string(prefix)).c_str());
}

void RtNetlink::add_local_default_route(int table) {
    Request<rtmsg> r(RTM_NEWROUTE, kCreate);
    nlmsghdr* nlh = r.header;
    auto* rtm = r.body;
    rtm->rtm_family = AF_INET;
    rtm->rtm_dst_len = 0;
    rtm->rtm_table = RT_TABLE_UNSPEC;
    rtm->rtm_protocol = RTPROT_STATIC;
    rtm->rtm_scope = RT_SCOPE_HOST;
    rtm->rtm_type = RTN_LOCAL;
    mnl_attr_put_u32(nlh, RTA_TABLE, static_cast<std::uint32_t>(table));
    mnl_attr_put_u32(nlh, RTA_OIF, index_of("lo"));
    request(nlh, "add local default route");
}

void RtNetlink::add_fwmark_rule(std::uint32_t mark, int table) {
    Request<fib_rule_hdr> r(RTM_NEWRULE, kCreate);
    nlmsghdr* nlh = r.header;
    auto* frh = r.body;
    frh->family = AF_INET;
    frh->action = FR_ACT_TO_TBL;
    frh->table = RT_TABLE_UNSPEC;
    mnl_attr_put_u32(nlh, FRA_FWMARK, mark);
    mnl_attr_put_u32(nlh, FRA_TABLE, static_cast<std::uint32_t>(table));
    mnl_attr_put_u32(nlh, FRA_PRIORITY, 100);
    request(nlh, "add fwmark rule");
}

UniqueFd open_tap_device(const std::string& name) {
    int fd = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0) throw NetworkError(std::string("open /dev/net/tun: ") + std::strerror(errno));
    UniqueFd tap(fd);
    ifreq request{};
    std::strncpy(request.ifr_name, name.c_str(), IFNAMSIZ - 1);
    request.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    if (::ioctl(tap.get(), TUNSETIFF, &request) != 0)
        throw NetworkError("create tap " + name + ": " + std::strerror(errno));
    return tap;
}

}  // namespace deskbox::network
