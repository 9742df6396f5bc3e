// net.listening: the TCP ports programs in the guest listen on, read from /proc/net/tcp and
// tcp6 (the guest's own network namespace). The host lists them in inspect and proxies HTTP
// and WebSockets to them (exposed ports).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deskbox::services {

struct ListeningPort {
    std::uint16_t port = 0;
    std::string address;  // "0.0.0.0", "127.0.0.1", "::", "::1", ...
    bool operator==(const ListeningPort&) const = default;
};

// The LISTEN sockets of one /proc/net/tcp{,6} text (`ipv6`: the tcp6 layout).
std::vector<ListeningPort> parse_proc_net_tcp(const std::string& text, bool ipv6);

class PortService {
  public:
    explicit PortService(std::filesystem::path proc_net = "/proc/net")
        : proc_net_(std::move(proc_net)) {}
    // {"ports": [{"port", "addresses": [...]}]}, by port, each once.
    nlohmann::json listening() const;

  private:
    std::filesystem::path proc_net_;
};

}  // namespace deskbox::services
