// Hands a request for a sandbox another node owns to that node, so a client may talk to any
// node. Plain API requests go over kept-alive connections (a pool per node) and the owner's
// answer comes back as it is; WebSocket upgrades and exposed ports are relayed: the request
// is written to the owner, then the two connections are spliced both ways for as long as they
// live (streams, VNC, programs' own protocols).
//
// Every forwarded request carries who forwarded it (the owner never forwards it again) and the
// cluster secret (the owner trusts the forwarding headers only with it); the client's own
// credentials go along untouched, and the owner checks them as for any request.
#pragma once

#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace deskbox::cluster {

inline constexpr const char* kForwardedByHeader = "X-Deskbox-Forwarded-By";
inline constexpr const char* kClusterSecretHeader = "X-Deskbox-Cluster-Secret";

using ForwardRequest = boost::beast::http::request<boost::beast::http::string_body>;
using ForwardResponse = boost::beast::http::response<boost::beast::http::string_body>;

struct ForwarderOptions {
    std::string node_name;  // this node, named in kForwardedByHeader
    std::string secret;
    std::chrono::milliseconds connect_timeout{2000};
    // Commands and waits may run long on the owner; it enforces their own limits.
    std::chrono::milliseconds request_timeout{std::chrono::hours(1)};
};

// True when `secret` is the cluster's (constant time in the secret's length).
bool secret_matches(const std::string& expected, std::string_view given);

class NodeForwarder {
  public:
    explicit NodeForwarder(ForwarderOptions options);
    ~NodeForwarder();
    NodeForwarder(const NodeForwarder&) = delete;
    NodeForwarder& operator=(const NodeForwarder&) = delete;

    // Whether `request` must be relayed (an upgrade, a sandbox's event stream, or a method the
    // pooled path does not carry) rather than forwarded.
    static bool needs_relay(const ForwardRequest& request);

    // Sends `request` to the node at `base_url` and returns its answer. An owner that cannot be
    // reached is a 503 node_unreachable answer naming `owner`.
    ForwardResponse forward(const ForwardRequest& request, const std::string& base_url,
                            const std::string& owner, const std::string& client_address);

    // Takes the client's connection: writes `request` to the node at `base_url`, then splices.
    void relay(boost::beast::tcp_stream stream, ForwardRequest request, const std::string& base_url,
               const std::string& owner);

    // Requests forwarded and relays started so far (metrics, tests).
    std::uint64_t forwarded() const;
    std::uint64_t relayed() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace deskbox::cluster
