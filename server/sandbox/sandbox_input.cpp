// SandboxInput: action lists run by the agent (split at targets, screenshots and zooms, which
// the host does in order between them) and viewers' input queued on the input worker.
#include "server/sandbox/sandbox_input.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "common/base64.hpp"

namespace deskbox::server {

using nlohmann::json;

namespace {

const char* dialect_name(input::Dialect dialect) {
    return dialect == input::Dialect::native      ? "native"
           : dialect == input::Dialect::anthropic ? "anthropic"
                                                  : "openai";
}

json image_result(const char* type, const streaming::EncodedImage& image) {
    return json{{"type", type},
                {"format", "png"},
                {"width", image.width},
                {"height", image.height},
                {"base64_image", base64_encode(image.bytes)}};
}

// What the agent loop sends back next: the screen after the actions, ready to paste into the
// model's conversation as its dialect's tool result.
void add_screenshot_reply(json& answer, const streaming::EncodedImage& image,
                          input::Dialect dialect, const std::string& call_id) {
    std::string data = base64_encode(image.bytes);
    answer["screenshot"] = image_result("screenshot", image);
    answer["screenshot"].erase("type");
    if (dialect == input::Dialect::anthropic) {
        json content = json::array();
        content.push_back(
            {{"type", "image"},
             {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", data}}}});
        answer["tool_result"] = {{"type", "tool_result"}, {"content", std::move(content)}};
        if (!call_id.empty()) answer["tool_result"]["tool_use_id"] = call_id;
    } else if (dialect == input::Dialect::openai) {
        answer["computer_call_output"] = {
            {"type", "computer_call_output"},
            {"output",
             {{"type", "computer_screenshot"}, {"image_url", "data:image/png;base64," + data}}}};
        if (!call_id.empty()) answer["computer_call_output"]["call_id"] = call_id;
    }
}

}  // namespace

struct SandboxInput::Parsed {
    std::vector<input::Action> actions;  // in screen pixels
    std::string call_id;
    std::vector<std::unique_ptr<const TargetSpec>> targets;  // null where an action has none
    std::optional<input::CoordinateScaler> scaler;
};

SandboxInput::SandboxInput(AgentClient& agent, SandboxScreen& screen, InputLink link)
    : agent_(agent), screen_(screen), link_(std::move(link)) {}

json SandboxInput::run_segment(const std::vector<input::Action>& actions, std::size_t offset) {
    json native = json::array();
    for (const auto& a : actions) native.push_back(input::to_native_json(a));
    try {
        return agent_.run_actions(native);
    } catch (const SandboxError& e) {
        // Re-base "actions[i]" on the whole request.
        std::string field = e.field();
        if (field.rfind("actions[", 0) == 0) {
            auto close = field.find(']');
            std::size_t index = std::stoul(field.substr(8, close - 8)) + offset;
            field = "actions[" + std::to_string(index) + field.substr(close);
        }
        throw SandboxError(e.fault(), e.code(), e.what(), field);
    }
}

bool SandboxInput::queue_input(std::vector<input::Action> actions, const std::string& source) {
    if (actions.empty()) return true;
    if (!link_.running()) return false;
    // Called on a viewer's I/O thread: the audit line (a file write) is written on the input
    // worker, just before the actions it records run.
    return worker_.post([this, source, actions = std::move(actions)] {
        // Pointer motion is not worth an audit line; presses, keys and text are.
        const bool worth_auditing = std::any_of(
            actions.begin(), actions.end(),
            [](const input::Action& a) { return !std::holds_alternative<input::Move>(a); });
        if (worth_auditing) {
            json native = json::array();
            for (const auto& a : actions) native.push_back(input::to_native_json(a));
            link_.audit("viewer_input", {{"source", source}, {"actions", native}});
        }
        try {
            run_segment(actions, 0);
        } catch (const std::exception& e) {
            // The viewer is not waiting for an answer; the sandbox's state says if it broke.
            std::fprintf(stderr, "deskboxd: %s: viewer input failed: %s\n",
                         link_.sandbox_id.c_str(), e.what());
        }
    });
}

void SandboxInput::queue_clipboard(std::string text) {
    if (text.size() > 256 * 1024 || !link_.running()) return;
    worker_.post([this, text = std::move(text)] {
        try {
            agent_.set_clipboard(text);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "deskboxd: %s: VNC clipboard: %s\n", link_.sandbox_id.c_str(),
                         e.what());
        }
    });
}

SandboxInput::Parsed SandboxInput::parse(const json& body, input::Dialect dialect) {
    Parsed parsed;
    parsed.scaler = screen_.scaler();
    try {
        auto request = input::parse_action_request(body, dialect);
        parsed.actions = std::move(request.actions);
        parsed.call_id = std::move(request.call_id);
        // Every target is read and checked before anything in the batch runs.
        for (std::size_t i = 0; i < parsed.actions.size(); ++i) {
            const input::Target* target = input::target_of(parsed.actions[i]);
            const std::string prefix = i < request.fields.size() ? request.fields[i] : "";
            parsed.targets.push_back(target ? std::make_unique<const TargetSpec>(read_target(
                                                  *target, join_field(prefix, "target")))
                                            : nullptr);
        }
        const input::Size screen = screen_.size();
        for (std::size_t i = 0; i < parsed.actions.size(); ++i) {
            const std::string& prefix = request.fields[i];
            if (parsed.scaler)
                parsed.actions[i] = parsed.scaler->to_screen(parsed.actions[i], prefix, dialect);
            else
                input::validate_on_screen(parsed.actions[i], screen, prefix, dialect);
        }
    } catch (const input::ActionError& e) {
        throw SandboxError(SandboxFault::invalid, "invalid_action", e.what(), e.field());
    }
    return parsed;
}

json SandboxInput::aim_at_target(input::Action& action, const TargetSpec& spec) {
    TargetSighting sighting = screen_.seek(spec);
    const auto& box = sighting.box;
    input::Point point{box.x + box.width / 2 + spec.offset.x,
                       box.y + box.height / 2 + spec.offset.y};
    if (point.x < 0 || point.y < 0 || point.x >= sighting.screen_width ||
        point.y >= sighting.screen_height)
        throw invalid_field(join_field(spec.field, "offset"),
                            "the point it gives (" + std::to_string(point.x) + "," +
                                std::to_string(point.y) + ") is off the screen");
    if (auto scaler = screen_.scaler()) point = scaler->to_screen(point, spec.field);
    input::aim(action, point);
    return std::move(sighting.match);
}

json SandboxInput::run(Parsed& parsed) {
    // Screenshots (and zooms) inside a batch are taken in order, between the actions around
    // them, on the host.
    json results = json::array();
    std::vector<input::Action> segment;
    std::size_t segment_start = 0;
    auto flush = [&] {
        if (segment.empty()) return;
        for (auto& r : run_segment(segment, segment_start)) results.push_back(r);
        segment.clear();
    };
    std::vector<std::pair<std::size_t, json>> target_matches;
    for (std::size_t i = 0; i < parsed.actions.size(); ++i) {
        if (parsed.targets[i]) {
            // Aimed at what is on the screen: the actions before it must have happened first.
            flush();
            segment_start = i;
            target_matches.emplace_back(i, aim_at_target(parsed.actions[i], *parsed.targets[i]));
        }
        const bool shot = std::holds_alternative<input::Screenshot>(parsed.actions[i]);
        const auto* zoom = std::get_if<input::Zoom>(&parsed.actions[i]);
        if (shot || zoom) {
            flush();
            results.push_back(
                zoom ? image_result("zoom", screen_.zoom(*zoom))
                     : image_result("screenshot", screen_.screenshot(screen_.api_sized())));
            segment_start = i + 1;
            continue;
        }
        if (segment.empty()) segment_start = i;
        segment.push_back(parsed.actions[i]);
    }
    flush();
    for (auto& [index, match] : target_matches)
        if (index < results.size() && results[index].is_object())
            results[index]["target"] = std::move(match);
    return results;
}

json SandboxInput::actions(const json& body, input::Dialect dialect, bool with_screenshot) {
    Parsed parsed = parse(body, dialect);
    link_.audit("actions", {{"dialect", dialect_name(dialect)}, {"actions", body}});
    json results = run(parsed);
    // Positions the agent reports are in screen pixels; the client thinks in API pixels.
    if (parsed.scaler) {
        for (auto& r : results) {
            if (r.is_object() && r.contains("x") && r.contains("y") &&
                !r.contains("base64_image")) {
                auto p = parsed.scaler->to_api({r["x"].get<int>(), r["y"].get<int>()});
                r["x"] = p.x;
                r["y"] = p.y;
            }
        }
    }
    json answer = {{"results", results}};
    if (with_screenshot)
        add_screenshot_reply(answer, screen_.screenshot(screen_.api_sized()), dialect,
                             parsed.call_id);
    return answer;
}

}  // namespace deskbox::server
