#include "guest-desktop/agent/input_actions.hpp"

#include <string>
#include <vector>

#include "input/parse.hpp"
#include "protocol/rpc.hpp"

namespace deskbox::agent {

using protocol::RpcError;

nlohmann::json run_input_actions(input::Injector& injector, const nlohmann::json& params,
                                 input::Size screen, const std::function<void()>& input_ended) {
    if (!params.contains("actions")) throw RpcError("bad_request", "actions: required", "actions");
    const std::vector<input::Action> actions = input::parse_actions(
        nlohmann::json{{"actions", params["actions"]}}, input::Dialect::native);
    for (std::size_t i = 0; i < actions.size(); ++i)
        input::validate_on_screen(actions[i], screen, "actions[" + std::to_string(i) + "]");
    nlohmann::json results = nlohmann::json::array();
    for (std::size_t i = 0; i < actions.size(); ++i) {
        const std::string prefix = "actions[" + std::to_string(i) + "]";
        try {
            results.push_back(injector.execute(actions[i]));
        } catch (const input::ActionError& e) {
            input_ended();
            throw RpcError("invalid_action", e.what(), prefix + "." + e.field(),
                           {{"completed", i}, {"results", results}});
        } catch (const std::exception& e) {
            input_ended();
            throw RpcError("input_failed", prefix + ": " + e.what(), prefix,
                           {{"completed", i}, {"results", results}});
        }
    }
    input_ended();
    return {{"results", std::move(results)}};
}

}  // namespace deskbox::agent
