#include "server/api/routes/desktop.hpp"

#include <limits>

#include "server/api/http_util.hpp"
#include "server/sandbox/accessibility.hpp"
#include "server/sandbox/agent_client.hpp"
#include "server/sandbox/request_reader.hpp"
#include "server/sandbox/sandbox_screen.hpp"

namespace deskbox::server::routes {

using nlohmann::json;

std::string parse_clipboard_body(const json& body) {
    RequestReader reader(body);
    std::string text = reader.required_string("text", std::numeric_limits<std::size_t>::max());
    reader.finish();
    return text;
}

namespace {

// A window's box from the agent (screen pixels, possibly reaching past the screen's edges) in
// API pixels: its corners mapped, so the box covers what it covers in a screenshot.
void window_to_api(json& window, const input::CoordinateScaler& scaler) {
    const int x = window.at("x").get<int>(), y = window.at("y").get<int>();
    const auto top_left = scaler.to_api_unchecked({x, y});
    const auto bottom_right = scaler.to_api_unchecked(
        {x + window.at("width").get<int>() - 1, y + window.at("height").get<int>() - 1});
    window["x"] = top_left.x;
    window["y"] = top_left.y;
    window["width"] = bottom_right.x - top_left.x + 1;
    window["height"] = bottom_right.y - top_left.y + 1;
}

}  // namespace

// Like every position the API answers, in API pixels (the sandbox's api_resolution, if set).
HttpResponse list_windows(RouteContext& context) {
    allow_only(context.query, {});
    json answer = context.agent().windows();
    if (const auto scaler = context.screen().scaler(); scaler && !scaler->identity())
        for (json& window : answer.at("windows")) window_to_api(window, *scaler);
    return json_response(200, answer);
}

HttpResponse cursor_position(RouteContext& context) {
    allow_only(context.query, {});
    json answer = context.agent().cursor();
    if (const auto scaler = context.screen().scaler(); scaler && !scaler->identity()) {
        const auto p =
            scaler->to_api_unchecked({answer.at("x").get<int>(), answer.at("y").get<int>()});
        answer["x"] = p.x;
        answer["y"] = p.y;
    }
    return json_response(200, answer);
}

HttpResponse read_clipboard(RouteContext& context) {
    allow_only(context.query, {});
    return json_response(200, context.agent().clipboard());
}

HttpResponse write_clipboard(RouteContext& context) {
    allow_only(context.query, {});
    const std::string text = parse_clipboard_body(parse_body(context.request()));
    return json_response(200, context.agent().set_clipboard(text));
}

namespace {

json accessible_in_api_pixels(RouteContext& context, json answer) {
    accessible_bounds_to_api(answer, context.screen().size(), context.screen().scaler());
    return answer;
}

// The body of find and act: an object, passed to the agent, which checks its fields.
json accessibility_body(RouteContext& context) {
    json body = parse_body(context.request());
    if (!body.is_object())
        throw invalid_field("body", "expected a JSON object, got " + std::string(body.type_name()));
    return body;
}

}  // namespace

HttpResponse accessibility_tree(RouteContext& context) {
    allow_only(context.query, {"scope", "app", "max_depth", "max_nodes", "visible_only"});
    json params = json::object();
    for (const char* name : {"scope", "app"})
        if (auto it = context.query.find(name); it != context.query.end())
            params[name] = it->second;
    for (const char* name : {"max_depth", "max_nodes"})
        if (context.query.count(name)) params[name] = int_query(context.query, name);
    if (context.query.count("visible_only"))
        params["visible_only"] = bool_query(context.query, "visible_only");
    return json_response(
        200, accessible_in_api_pixels(context, context.agent().accessibility_tree(params)));
}

HttpResponse accessibility_find(RouteContext& context) {
    allow_only(context.query, {});
    return json_response(200, accessible_in_api_pixels(context, context.agent().accessibility_find(
                                                                    accessibility_body(context))));
}

HttpResponse accessibility_act(RouteContext& context) {
    allow_only(context.query, {});
    return json_response(200, act_on_accessible(context.agent(), context.input(), context.screen(),
                                                accessibility_body(context)));
}

}  // namespace deskbox::server::routes
