// The agent's input.actions without X: the real parser and screen checks in front of a fake
// injector, so what reaches the injector (and what does not) is seen action by action.
#include "guest-desktop/agent/input_actions.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "protocol/rpc.hpp"
#include "tests/support/fake_injector.hpp"

namespace deskbox::agent {
namespace {

using nlohmann::json;

constexpr input::Size kScreen{1024, 768};

class AgentInputActions : public ::testing::Test {
  protected:
    json run(const json& actions) {
        return run_input_actions(injector_, json{{"actions", actions}}, kScreen,
                                 [this] { ++input_ended_; });
    }
    // The RpcError a request with `params` throws.
    protocol::RpcError rpc_error(const json& params) {
        try {
            run_input_actions(injector_, params, kScreen, [this] { ++input_ended_; });
        } catch (const protocol::RpcError& error) {
            return error;
        }
        ADD_FAILURE() << "no RpcError";
        return protocol::RpcError("none", "none");
    }
    // The field of the ActionError `actions` throw.
    std::string action_error_field(const json& actions) {
        try {
            run(actions);
        } catch (const input::ActionError& error) {
            return error.field();
        }
        ADD_FAILURE() << "no ActionError";
        return {};
    }

    testing::FakeInjector injector_;
    int input_ended_ = 0;
};

TEST_F(AgentInputActions, RunsEveryActionInOrderAndAnswersWithTheirResults) {
    const json result = run(json::parse(R"([
        {"type": "click", "x": 10, "y": 20, "button": "right"},
        {"type": "cursor_position"},
        {"type": "type", "text": "héllo\n"},
        {"type": "key", "keys": "ctrl+a Delete"},
        {"type": "drag", "path": [[1, 2], [1023, 767]]},
        {"type": "cursor_position"}
    ])"));
    EXPECT_EQ(result, json::parse(R"({"results": [{}, {"x": 10, "y": 20}, {}, {}, {},
                                                  {"x": 1023, "y": 767}]})"));
    const auto& actions = injector_.actions();
    ASSERT_EQ(actions.size(), 6u);
    input::Click click;
    click.at = input::Point{10, 20};
    click.button = input::Button::right;
    EXPECT_EQ(actions[0], input::Action(click));
    EXPECT_EQ(actions[2], input::Action(input::Type{"héllo\n"}));
    ASSERT_TRUE(std::holds_alternative<input::Key>(actions[3]));
    EXPECT_EQ(std::get<input::Key>(actions[3]).chords.size(), 2u);
    EXPECT_EQ(input_ended_, 1);
}

TEST_F(AgentInputActions, NothingRunsWhenAnyActionIsInvalidOrOffTheScreen) {
    const json off_screen = json::parse(R"([
        {"type": "click", "x": 10, "y": 20},
        {"type": "move", "x": 1024, "y": 5}
    ])");
    EXPECT_EQ(action_error_field(off_screen), "actions[1].x");
    const json bad_drag = json::parse(R"([
        {"type": "wait", "duration_ms": 10},
        {"type": "drag", "path": [[0, 0], [5, 768]]}
    ])");
    EXPECT_EQ(action_error_field(bad_drag), "actions[1].path[1][1]");
    EXPECT_EQ(action_error_field(json::parse(R"([{"type": "click"}, {"type": "fly"}])")),
              "actions[1].type");
    EXPECT_EQ(action_error_field(json::parse(R"([{"type": "type", "text": "a\u0001"}])")),
              "actions[0].text");
    EXPECT_TRUE(injector_.actions().empty());
    EXPECT_EQ(input_ended_, 0) << "no input ran, so the screen need not settle";

    const protocol::RpcError missing = rpc_error(json::object());
    EXPECT_EQ(missing.code(), "bad_request");
    EXPECT_EQ(missing.field(), "actions");
}

TEST_F(AgentInputActions, AFailingActionStopsTheBatchAndSaysHowFarItGot) {
    injector_.fail_call(1, std::make_exception_ptr(std::runtime_error("XkbGetState failed")));
    const protocol::RpcError error = rpc_error(json::parse(R"({"actions": [
        {"type": "move", "x": 5, "y": 6},
        {"type": "key", "keys": "Return"},
        {"type": "click"}
    ]})"));
    EXPECT_EQ(error.code(), "input_failed");
    EXPECT_EQ(error.field(), "actions[1]");
    EXPECT_EQ(std::string(error.what()), "actions[1]: XkbGetState failed");
    EXPECT_EQ(error.details(), json::parse(R"({"completed": 1, "results": [{}]})"));
    EXPECT_EQ(injector_.actions().size(), 1u) << "the click after the failure never ran";
    EXPECT_EQ(input_ended_, 1);
}

TEST_F(AgentInputActions, AnActionTheInjectorRefusesNamesItsField) {
    injector_.fail_call(2, std::make_exception_ptr(input::ActionError("count", "must be 1..3")));
    const protocol::RpcError error = rpc_error(json::parse(R"({"actions": [
        {"type": "cursor_position"},
        {"type": "screenshot"},
        {"type": "click", "x": 1, "y": 1}
    ]})"));
    EXPECT_EQ(error.code(), "invalid_action");
    EXPECT_EQ(error.field(), "actions[2].count");
    EXPECT_EQ(error.details(),
              json::parse(R"({"completed": 2, "results": [{"x": 0, "y": 0}, {}]})"));
    EXPECT_EQ(input_ended_, 1);
}

}  // namespace
}  // namespace deskbox::agent
