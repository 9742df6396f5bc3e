// A network namespace held by an fd: the kernel removes it, with every interface, address,
// route and nftables rule in it, when the last fd, socket or process holding it goes. deskboxd
// holds each sandbox's namespaces this way (no bind mount under /run/netns), so a deskboxd that
// stops, or is SIGKILLed, leaves nothing behind in the host's own namespace.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.hpp"

namespace deskbox::network {

// Setting up or using a namespace failed; what() names the step and the kernel's or tool's words.
class NetworkError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

class NetworkNamespace {
  public:
    NetworkNamespace() = default;
    // A new, empty namespace (only `lo`, down).
    static NetworkNamespace create();
    // The namespace of a file such as /proc/PID/ns/net.
    static NetworkNamespace open(const std::filesystem::path& path);

    bool valid() const { return fd_.valid(); }
    int fd() const { return fd_.get(); }
    ino_t inode() const { return inode_; }
    // A path other processes (runc, ip) can open while this object lives: /proc/PID/fd/N.
    std::string path() const;

    // Runs `fn` on a thread that joined this namespace (sockets it makes stay in it), and
    // returns once it is done; an exception from `fn` is rethrown here.
    void run(const std::function<void()>& fn) const;
    // socket(2) inside the namespace, close-on-exec. Throws NetworkError.
    UniqueFd socket(int domain, int type, int protocol = 0) const;
    // Runs a tool (ip, nft) inside the namespace, `input` on its stdin. Throws NetworkError with
    // its stderr unless it exits 0.
    void exec(const std::vector<std::string>& argv, const std::string& input = {},
              std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

  private:
    explicit NetworkNamespace(UniqueFd fd);
    UniqueFd fd_;
    ino_t inode_ = 0;
};

// Sets a sysctl under /proc/sys/net of `ns` (e.g. "ipv6/conf/all/disable_ipv6").
void set_netns_sysctl(const NetworkNamespace& ns, const std::string& key, const std::string& value);

}  // namespace deskbox::network
