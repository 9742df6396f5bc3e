#include "server/sandbox/action_request.hpp"

#include "input/parse.hpp"

namespace deskbox::server {

ActionsRequest read_actions_request(const nlohmann::json& body, input::Dialect dialect,
                                    bool with_screenshot) {
    ActionsRequest request;
    request.dialect = dialect;
    request.with_screenshot = with_screenshot;
    try {
        input::ActionRequest parsed = input::parse_action_request(body, dialect);
        request.actions = std::move(parsed.actions);
        request.fields = std::move(parsed.fields);
        request.call_id = std::move(parsed.call_id);
        request.tool_uses = std::move(parsed.tool_uses);
    } catch (const input::ActionError& e) {
        throw SandboxError(SandboxFault::invalid, "invalid_action", e.what(), e.field());
    }
    request.fields.resize(request.actions.size());
    // Every target is read and checked before anything in the batch runs.
    for (std::size_t i = 0; i < request.actions.size(); ++i) {
        const input::Target* target = input::target_of(request.actions[i]);
        request.targets.push_back(
            target ? std::optional(read_target(*target, join_field(request.fields[i], "target")))
                   : std::nullopt);
    }
    return request;
}

}  // namespace deskbox::server
