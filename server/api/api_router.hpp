// Public API v1 of deskboxd: routing, authentication, JSON errors, metrics. Every answer to a
// bad request is a JSON error naming the field; no input crashes the server.
#pragma once

#include <string>
#include <vector>

#include "server/api/metrics.hpp"
#include "server/http/http_server.hpp"
#include "server/sandbox/sandbox_manager.hpp"

namespace deskbox::server {

struct ApiOptions {
    std::vector<std::string> api_keys;  // empty: no key needed (loopback only)
};

class ApiRouter {
public:
    ApiRouter(SandboxManager& manager, ApiOptions options);
    HttpResponse handle(HttpExchange& exchange);
    Metrics& metrics() { return metrics_; }

private:
    HttpResponse route(HttpRequest& request, const std::string& path,
                       const std::map<std::string, std::string>& query);
    HttpResponse sandbox_route(HttpRequest& request, const std::string& id, const std::string& rest,
                               const std::map<std::string, std::string>& query);
    bool authorised(const HttpRequest& request) const;

    SandboxManager& manager_;
    ApiOptions options_;
    Metrics metrics_;
};

}  // namespace deskbox::server
