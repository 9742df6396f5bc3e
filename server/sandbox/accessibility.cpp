#include "server/sandbox/accessibility.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "server/sandbox/action_request.hpp"
#include "server/sandbox/agent_client.hpp"
#include "server/sandbox/sandbox_input.hpp"
#include "server/sandbox/sandbox_screen.hpp"

namespace deskbox::server {

using nlohmann::json;

namespace {

void node_bounds_to_api(json& node, input::Size screen,
                        const std::optional<input::CoordinateScaler>& scaler) {
    if (!node.is_object()) return;
    if (auto bounds = node.find("bounds"); bounds != node.end() && bounds->is_object()) {
        const int x0 = std::max(0, bounds->value("x", 0));
        const int y0 = std::max(0, bounds->value("y", 0));
        const int x1 = std::min(screen.width, bounds->value("x", 0) + bounds->value("width", 0));
        const int y1 = std::min(screen.height, bounds->value("y", 0) + bounds->value("height", 0));
        if (x1 <= x0 || y1 <= y0) {
            node.erase("bounds");
            node["offscreen"] = true;
        } else {
            // Corners map as pixels do (first and last pixel), as screenshots scale.
            input::Point first{x0, y0}, last{x1 - 1, y1 - 1};
            if (scaler) {
                first = scaler->to_api(first);
                last = scaler->to_api(last);
            }
            *bounds = {{"x", first.x},
                       {"y", first.y},
                       {"width", last.x - first.x + 1},
                       {"height", last.y - first.y + 1}};
        }
    }
    if (auto children = node.find("children"); children != node.end() && children->is_array())
        for (auto& child : *children) node_bounds_to_api(child, screen, scaler);
}

}  // namespace

json act_on_accessible(AgentClient& agent, SandboxInput& input, SandboxScreen& screen,
                       const json& params) {
    json answer = agent.accessibility_act(params);
    const json* value = params.is_object() && params.contains("value") ? &params["value"] : nullptr;
    const bool text_ignored = params.value("action", "") == "set_value" && value &&
                              value->is_string() && answer["node"].contains("text") &&
                              answer["node"]["text"] != *value;
    if (text_ignored) {
        const std::string ref = params["ref"];
        agent.accessibility_act({{"ref", ref}, {"action", "focus"}});
        input.actions(read_actions_request(
            {{"actions",
              {{{"type", "key"}, {"keys", "ctrl+a"}}, {{"type", "type"}, {"text", *value}}}}},
            input::Dialect::native, false));
        // The application takes the keys in its own time; the element as it reads then.
        for (int attempt = 0; attempt < 20; ++attempt) {
            answer["node"] = agent.accessibility_act({{"ref", ref}, {"action", "focus"}})["node"];
            if (answer["node"].value("text", "") == *value) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        answer["via"] = "keyboard";
    }
    accessible_bounds_to_api(answer, screen.size(), screen.scaler());
    return answer;
}

void accessible_bounds_to_api(json& answer, input::Size screen,
                              const std::optional<input::CoordinateScaler>& scaler) {
    for (const char* list : {"windows", "matches"})
        if (auto it = answer.find(list); it != answer.end() && it->is_array())
            for (auto& node : *it) node_bounds_to_api(node, screen, scaler);
    if (auto it = answer.find("node"); it != answer.end()) node_bounds_to_api(*it, screen, scaler);
}

}  // namespace deskbox::server
