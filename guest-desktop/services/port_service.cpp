#include "guest-desktop/services/port_service.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace deskbox::services {
namespace {

// /proc/net/tcp writes addresses as the kernel holds them: 32-bit words in host byte order.
std::string address_text(const std::string& hex, bool ipv6) {
    const std::size_t words = ipv6 ? 4 : 1;
    if (hex.size() != words * 8) return {};
    unsigned char bytes[16];
    for (std::size_t w = 0; w < words; ++w) {
        std::uint32_t word =
            static_cast<std::uint32_t>(std::stoul(hex.substr(w * 8, 8), nullptr, 16));
        std::memcpy(bytes + w * 4, &word, 4);
    }
    char text[INET6_ADDRSTRLEN] = {};
    if (!::inet_ntop(ipv6 ? AF_INET6 : AF_INET, bytes, text, sizeof text)) return {};
    return text;
}

}  // namespace

std::vector<ListeningPort> parse_proc_net_tcp(const std::string& text, bool ipv6) {
    std::vector<ListeningPort> out;
    std::istringstream lines(text);
    std::string line;
    std::getline(lines, line);  // the header
    while (std::getline(lines, line)) {
        std::istringstream fields(line);
        std::string slot, local, remote, state;
        if (!(fields >> slot >> local >> remote >> state)) continue;
        if (state != "0A") continue;  // TCP_LISTEN
        auto colon = local.find(':');
        if (colon == std::string::npos) continue;
        try {
            std::string address = address_text(local.substr(0, colon), ipv6);
            unsigned long port = std::stoul(local.substr(colon + 1), nullptr, 16);
            if (address.empty() || port == 0 || port > 65535) continue;
            out.push_back({static_cast<std::uint16_t>(port), address});
        } catch (const std::exception&) {
            continue;  // not a line the kernel writes
        }
    }
    return out;
}

nlohmann::json PortService::listening() const {
    std::map<std::uint16_t, std::set<std::string>> ports;
    for (auto [name, ipv6] : {std::pair{"tcp", false}, std::pair{"tcp6", true}}) {
        std::ifstream in(proc_net_ / name);
        if (!in) continue;
        std::string text((std::istreambuf_iterator<char>(in)), {});
        for (const auto& p : parse_proc_net_tcp(text, ipv6)) ports[p.port].insert(p.address);
    }
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [port, addresses] : ports)
        list.push_back({{"port", port}, {"addresses", addresses}});
    return {{"ports", list}};
}

}  // namespace deskbox::services
