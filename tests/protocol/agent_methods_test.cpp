// The agent's method list: one name per method, and an agent that serves the list answers
// every name the host can call (serve_agent_methods refuses a list with a method missing).
#include "protocol/agent_methods.hpp"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>

#include "tests/support/in_process_agent.hpp"

namespace deskbox::protocol {
namespace {

TEST(AgentMethods, EachMethodHasOneNameOfItsOwn) {
    std::set<std::string_view> names;
    for (const auto& [method, name] : agent_methods()) {
        EXPECT_EQ(method_name(method), name);
        if (method != AgentMethod::ping) {
            EXPECT_NE(name.find('.'), std::string_view::npos) << name << ": area.verb";
        }
        EXPECT_TRUE(names.insert(name).second) << name << " twice";
    }
    EXPECT_EQ(names.size(), static_cast<std::size_t>(AgentMethod::accessibility_act) + 1);
    EXPECT_EQ(method_name(AgentMethod::files_read), "files.read");
    EXPECT_EQ(method_name(AgentMethod::exec_run), "exec.run");
}

TEST(AgentMethods, AnAgentServingTheListAnswersEveryName) {
    test::InProcessAgent agent;
    for (const auto& [method, name] : agent_methods()) {
        Reply reply = agent.client()->call(name, {{"n", 1}}, "body");
        EXPECT_EQ(reply.result["method"], name);
        EXPECT_EQ(reply.body, "body");
    }
    ASSERT_EQ(agent.received().size(), agent_methods().size());
    EXPECT_EQ(agent.received().front().params, nlohmann::json({{"n", 1}}));
    // A name off the list is not served.
    try {
        agent.client()->call("files.chmod");
        ADD_FAILURE() << "an unlisted method was answered";
    } catch (const RpcError& e) {
        EXPECT_EQ(e.code(), "unknown_method");
    }
}

TEST(AgentMethods, AListWithAMethodMissingIsRefusedNamingIt) {
    auto pair = testing::channel_pair(testing::Transport::socketpair);
    RpcServer server(std::move(pair.b));
    AgentRoutes routes;
    for (const auto& [method, name] : agent_methods())
        if (method != AgentMethod::clipboard_set)
            routes[method] = {[](const Request&) { return Reply{}; }};
    try {
        serve_agent_methods(server, std::move(routes));
        ADD_FAILURE() << "served without a clipboard.set handler";
    } catch (const std::logic_error& e) {
        EXPECT_NE(std::string(e.what()).find("clipboard.set"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace deskbox::protocol
