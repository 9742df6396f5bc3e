// Sandbox's screen and input: screenshots (scaled to the API resolution), zoom, and action
// lists run by the agent (split at waits and screenshots, queued behind viewers' input).
#include "server/sandbox/sandbox.hpp"

#include <algorithm>
#include <thread>

#include "common/base64.hpp"

namespace deskbox::server {

void Sandbox::sync_screen(int settle_ms) {
    const std::uint64_t seq = agent_client_.sync_screen(settle_ms, 500).seq;
    if (!mirror_.wait_for_seq(seq, std::chrono::seconds(5)))
        throw ApiError(504, "agent_timeout", "the screen did not arrive from the agent in time");
}

streaming::EncodedImage Sandbox::screenshot(const streaming::EncodeOptions& options,
                                            int settle_ms) {
    sync_screen(settle_ms);
    auto snapshot = mirror_.snapshot();
    try {
        return streaming::encode_image(snapshot, options);
    } catch (const std::invalid_argument& e) {
        throw ApiError(400, "bad_request", e.what());
    }
}

nlohmann::json Sandbox::run_segment(const std::vector<input::Action>& actions, std::size_t offset) {
    nlohmann::json native = nlohmann::json::array();
    for (const auto& a : actions) native.push_back(input::to_native_json(a));
    try {
        return agent_client_.run_actions(native);
    } catch (const ApiError& e) {
        // Re-base "actions[i]" on the whole request.
        std::string field = e.field();
        if (field.rfind("actions[", 0) == 0) {
            auto close = field.find(']');
            std::size_t index = std::stoul(field.substr(8, close - 8)) + offset;
            field = "actions[" + std::to_string(index) + field.substr(close);
        }
        throw ApiError(e.status(), e.code(), e.what(), field);
    }
}

bool Sandbox::queue_input(std::vector<input::Action> actions, const std::string& source) {
    if (actions.empty()) return true;
    if (status() != SandboxStatus::running) return false;
    // Called on a viewer's I/O thread: the audit line (a file write) is written on the input
    // worker, just before the actions it records run.
    return input_worker_.post([this, source, actions = std::move(actions)] {
        // Pointer motion is not worth an audit line; presses, keys and text are.
        const bool worth_auditing = std::any_of(
            actions.begin(), actions.end(),
            [](const input::Action& a) { return !std::holds_alternative<input::Move>(a); });
        if (worth_auditing) {
            nlohmann::json native = nlohmann::json::array();
            for (const auto& a : actions) native.push_back(input::to_native_json(a));
            audit("viewer_input", {{"source", source}, {"actions", native}});
        }
        try {
            run_segment(actions, 0);
        } catch (const std::exception& e) {
            // The viewer is not waiting for an answer; the sandbox's state says if it broke.
            std::fprintf(stderr, "deskboxd: %s: viewer input failed: %s\n", config_.id.c_str(),
                         e.what());
        }
    });
}

nlohmann::json Sandbox::actions(const nlohmann::json& body, input::Dialect dialect,
                                bool with_screenshot) {
    std::vector<input::Action> parsed;
    std::string call_id;
    TargetSpecs targets;
    try {
        auto request = input::parse_action_request(body, dialect);
        parsed = std::move(request.actions);
        call_id = std::move(request.call_id);
        targets = read_targets(parsed, request.fields);
        for (std::size_t i = 0; i < parsed.size(); ++i) {
            const std::string& prefix = request.fields[i];
            if (scaler_)
                parsed[i] = scaler_->to_screen(parsed[i], prefix, dialect);
            else
                input::validate_on_screen(parsed[i], {config_.width, config_.height}, prefix,
                                          dialect);
        }
    } catch (const input::ActionError& e) {
        throw ApiError(400, "invalid_action", e.what(), e.field());
    }
    audit("actions", {{"dialect", dialect == input::Dialect::native      ? "native"
                                  : dialect == input::Dialect::anthropic ? "anthropic"
                                                                         : "openai"},
                      {"actions", body}});

    // Screenshots (and zooms) inside a batch are taken in order, between the actions around
    // them, on the host.
    nlohmann::json results = nlohmann::json::array();
    std::vector<input::Action> segment;
    std::size_t segment_start = 0;
    auto flush = [&] {
        if (segment.empty()) return;
        for (auto& r : run_segment(segment, segment_start)) results.push_back(r);
        segment.clear();
    };
    auto image_result = [](const char* type, const streaming::EncodedImage& image) {
        return nlohmann::json{{"type", type},
                              {"format", "png"},
                              {"width", image.width},
                              {"height", image.height},
                              {"base64_image", base64_encode(image.bytes)}};
    };
    std::vector<std::pair<std::size_t, nlohmann::json>> target_matches;
    for (std::size_t i = 0; i < parsed.size(); ++i) {
        if (targets[i]) {
            // Aimed at what is on the screen: the actions before it must have happened first.
            flush();
            segment_start = i;
            target_matches.emplace_back(i, resolve_target(parsed[i], *targets[i]));
        }
        const bool shot = std::holds_alternative<input::Screenshot>(parsed[i]);
        const auto* zoom = std::get_if<input::Zoom>(&parsed[i]);
        if (shot || zoom) {
            flush();
            results.push_back(zoom ? image_result("zoom", zoom_image(*zoom))
                                   : image_result("screenshot", screenshot(api_sized())));
            segment_start = i + 1;
            continue;
        }
        if (segment.empty()) segment_start = i;
        segment.push_back(parsed[i]);
    }
    flush();
    for (auto& [index, match] : target_matches)
        if (index < results.size() && results[index].is_object())
            results[index]["target"] = std::move(match);
    // Positions the agent reports are in screen pixels; the client thinks in API pixels.
    if (scaler_) {
        for (auto& r : results) {
            if (r.is_object() && r.contains("x") && r.contains("y") &&
                !r.contains("base64_image")) {
                auto p = scaler_->to_api({r["x"].get<int>(), r["y"].get<int>()});
                r["x"] = p.x;
                r["y"] = p.y;
            }
        }
    }
    nlohmann::json answer = {{"results", results}};
    if (!with_screenshot) return answer;
    // What the agent loop sends back next: the screen after the actions, ready to paste.
    auto image = screenshot(api_sized());
    std::string data = base64_encode(image.bytes);
    answer["screenshot"] = image_result("screenshot", image);
    answer["screenshot"].erase("type");
    if (dialect == input::Dialect::anthropic) {
        nlohmann::json content = nlohmann::json::array();
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
    return answer;
}

streaming::EncodeOptions Sandbox::api_sized() const {
    streaming::EncodeOptions options;
    if (scaler_) {
        options.width = scaler_->api().width;
        options.height = scaler_->api().height;
    }
    return options;
}

streaming::EncodedImage Sandbox::zoom_image(const input::Zoom& zoom) {
    // The region at the screen's own pixels (the point of zooming), shrunk only where it would
    // be larger than a screenshot the agent sees.
    streaming::EncodeOptions options;
    const int w = zoom.to.x - zoom.from.x + 1, h = zoom.to.y - zoom.from.y + 1;
    options.region = Rect{zoom.from.x, zoom.from.y, w, h};
    const int max_w = scaler_ ? scaler_->api().width : config_.width;
    const int max_h = scaler_ ? scaler_->api().height : config_.height;
    if (w > max_w || h > max_h) {
        const double factor = std::min(double(max_w) / w, double(max_h) / h);
        options.width = std::max(1, int(w * factor));
        options.height = std::max(1, int(h * factor));
    }
    return screenshot(options);
}

}  // namespace deskbox::server
