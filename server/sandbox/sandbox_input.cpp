// SandboxInput: action lists run by the agent (split at targets, screenshots and zooms, which
// the host does in order between them) and viewers' input queued on the input worker.
#include "server/sandbox/sandbox_input.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "common/base64.hpp"
#include "input/dialects/replies.hpp"
#include "input/parse.hpp"
#include "server/sandbox/accessibility.hpp"

namespace deskbox::server {

using nlohmann::json;

namespace {

// Screenshots and zooms here are PNGs (the default EncodeOptions' format).
input::PngImage to_png(const streaming::EncodedImage& image) {
    return {base64_encode(image.bytes), image.width, image.height};
}

// A screenshot or zoom as answers carry it: {"type", "format", "width", "height", "base64_image"}.
json image_result(const char* type, const streaming::EncodedImage& image) {
    json result = input::png_json(to_png(image));
    result["type"] = type;
    return result;
}

}  // namespace

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

void SandboxInput::to_screen(ActionsRequest& request,
                             const std::optional<input::CoordinateScaler>& scaler) {
    const input::Size screen = screen_.size();
    try {
        for (std::size_t i = 0; i < request.actions.size(); ++i) {
            input::Action& action = request.actions[i];
            const std::string& prefix = request.fields[i];
            // A zoom may end on the far edge of the screen the client sees.
            input::close_zoom_at_edge(action, scaler ? scaler->api() : screen, prefix);
            if (scaler)
                action = scaler->to_screen(action, prefix, request.dialect);
            else
                input::validate_on_screen(action, screen, prefix, request.dialect);
        }
    } catch (const input::ActionError& e) {
        throw SandboxError(SandboxFault::invalid, "invalid_action", e.what(), e.field());
    }
}

json SandboxInput::aim_at_accessible(input::Action& action, const TargetSpec& spec) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(spec.timeout_ms);
    const std::optional<input::CoordinateScaler> scaler = screen_.scaler();
    std::string last_error;
    for (;;) {
        json found = json::object();  // stays empty when the agent has no tree yet
        try {
            found = agent_.accessibility_find(*spec.accessible);
        } catch (const SandboxError& e) {
            // The agent names its own params ("role"); the client wrote them in the target.
            if (e.fault() == SandboxFault::invalid)
                throw SandboxError(e.fault(), e.code(), join_field(spec.field, e.what()),
                                   join_field(spec.field, e.field()));
            // No tree yet (the application is starting): wait for it like for pixels.
            if (e.fault() != SandboxFault::unprocessable) throw;
            last_error = e.what();
        }
        accessible_bounds_to_api(found, screen_.size(), scaler);
        int on_screen = 0;
        for (auto& match : found.value("matches", json::array())) {
            if (!match.contains("bounds") || on_screen++ < spec.index) continue;
            const json& box = match["bounds"];
            input::Point point{box["x"].get<int>() + box["width"].get<int>() / 2 + spec.offset.x,
                               box["y"].get<int>() + box["height"].get<int>() / 2 + spec.offset.y};
            const input::Size api = scaler ? scaler->api() : screen_.size();
            if (point.x < 0 || point.y < 0 || point.x >= api.width || point.y >= api.height)
                throw invalid_field(join_field(spec.field, "offset"),
                                    "the point it gives (" + std::to_string(point.x) + "," +
                                        std::to_string(point.y) + ") is off the screen");
            if (scaler) point = scaler->to_screen(point, spec.field);
            input::aim(action, point);
            return match;
        }
        if (std::chrono::steady_clock::now() >= deadline)
            throw SandboxError(SandboxFault::unprocessable, "target_not_found",
                               "no accessible element " + spec.accessible->dump() +
                                   " on the screen after " + std::to_string(spec.timeout_ms) +
                                   " ms" + (last_error.empty() ? "" : " (" + last_error + ")"),
                               spec.field);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
}

json SandboxInput::aim_at_target(input::Action& action, const TargetSpec& spec) {
    if (spec.accessible) return aim_at_accessible(action, spec);
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

json SandboxInput::run(ActionsRequest& request) {
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
    for (std::size_t i = 0; i < request.actions.size(); ++i) {
        if (request.targets[i]) {
            // Aimed at what is on the screen: the actions before it must have happened first.
            flush();
            segment_start = i;
            target_matches.emplace_back(i, aim_at_target(request.actions[i], *request.targets[i]));
        }
        const bool shot = std::holds_alternative<input::Screenshot>(request.actions[i]);
        const auto* zoom = std::get_if<input::Zoom>(&request.actions[i]);
        if (shot || zoom) {
            flush();
            results.push_back(
                zoom ? image_result("zoom", screen_.zoom(*zoom))
                     : image_result("screenshot", screen_.screenshot(screen_.api_sized())));
            segment_start = i + 1;
            continue;
        }
        if (segment.empty()) segment_start = i;
        segment.push_back(request.actions[i]);
    }
    flush();
    for (auto& [index, match] : target_matches)
        if (index < results.size() && results[index].is_object())
            results[index]["target"] = std::move(match);
    return results;
}

json SandboxInput::actions(ActionsRequest request) {
    const std::optional<input::CoordinateScaler> scaler = screen_.scaler();
    json audited = json::array();  // as the client sent them (API pixels), in native form
    for (const auto& a : request.actions) audited.push_back(input::to_native_json(a));
    to_screen(request, scaler);
    link_.audit("actions",
                {{"dialect", input::dialect_name(request.dialect)}, {"actions", audited}});
    json results = run(request);
    // Positions the agent reports are in screen pixels; the client thinks in API pixels.
    if (scaler) {
        for (auto& r : results) {
            if (r.is_object() && r.contains("x") && r.contains("y") &&
                !r.contains("base64_image")) {
                auto p = scaler->to_api({r["x"].get<int>(), r["y"].get<int>()});
                r["x"] = p.x;
                r["y"] = p.y;
            }
        }
    }
    std::optional<input::PngImage> screenshot;
    if (request.with_screenshot) screenshot = to_png(screen_.screenshot(screen_.api_sized()));
    return input::action_reply(request.dialect, request.call_id, std::move(results), screenshot,
                               request.tool_uses);
}

}  // namespace deskbox::server
