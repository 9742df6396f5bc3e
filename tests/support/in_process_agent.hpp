// An agent in the test's own process: an RpcServer serving every method of
// protocol::agent_methods() over a socketpair, after the real handshake, and the host's
// RpcClient on the other end. A method the test gives no handler answers what it was sent
// ({"method","params"}, the body back); every request is recorded in arrival order.
#pragma once

#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/agent_methods.hpp"
#include "protocol/rpc.hpp"
#include "tests/protocol/transports.hpp"

namespace deskbox::test {

class InProcessAgent {
  public:
    struct Received {
        std::string method;
        nlohmann::json params;
        std::string body;
    };

    // `routes`: the test's own handlers; the rest echo.
    explicit InProcessAgent(protocol::AgentRoutes routes = {}) {
        auto pair = protocol::testing::channel_pair(protocol::testing::Transport::socketpair);
        auto agent_hello =
            std::async(std::launch::async, [&] { return protocol::handshake(*pair.b, "agent"); });
        protocol::handshake(*pair.a, "host");
        agent_hello.get();
        server_ = std::make_unique<protocol::RpcServer>(std::move(pair.b));
        for (const auto& [method, name] : protocol::agent_methods()) {
            auto& route = routes[method];
            route.handler = recorded(std::string(name), std::move(route.handler));
        }
        protocol::serve_agent_methods(*server_, std::move(routes));
        server_->start();
        client_ = std::make_shared<protocol::RpcClient>(std::move(pair.a));
        client_->start();
    }
    ~InProcessAgent() {
        client_->close();
        server_->close();
    }
    InProcessAgent(const InProcessAgent&) = delete;
    InProcessAgent& operator=(const InProcessAgent&) = delete;

    std::shared_ptr<protocol::RpcClient> client() const { return client_; }
    void close_server() { server_->close(); }
    std::vector<Received> received() const {
        std::lock_guard lock(mutex_);
        return received_;
    }

  private:
    protocol::RpcServer::Handler recorded(std::string name, protocol::RpcServer::Handler own) {
        return [this, name, own = std::move(own)](const protocol::Request& request) {
            {
                std::lock_guard lock(mutex_);
                received_.push_back({name, request.params, request.body});
            }
            if (own) return own(request);
            return protocol::Reply{{{"method", name}, {"params", request.params}}, request.body};
        };
    }

    mutable std::mutex mutex_;
    std::vector<Received> received_;
    std::unique_ptr<protocol::RpcServer> server_;
    std::shared_ptr<protocol::RpcClient> client_;
};

}  // namespace deskbox::test
