// What admission asks of a cluster about a request (server/api/admission.hpp, the "owner node"
// stage): ClusterService in deskboxd, a fake in the admission tests (a real one needs etcd).
#pragma once

#include <optional>
#include <string>

#include "server/http/http_server.hpp"

namespace deskbox::server {

class OwnerRouting {
  public:
    virtual ~OwnerRouting() = default;
    // For a request about sandbox `id`: nullopt when this node serves it; else the answer
    // (forwarded to the node that owns it, or 503 when that node is lost). When the connection
    // was relayed instead (upgrades, ports), exchange.taken is set and the answer is unused.
    virtual std::optional<HttpResponse> route(HttpExchange& exchange, const std::string& id) = 0;
    // Whether `request` carries the cluster secret (routes only nodes may call).
    virtual bool secret_valid(const HttpRequest& request) const = 0;
};

}  // namespace deskbox::server
