#include "server/api/routes/desktop.hpp"

#include "server/api/http_util.hpp"

namespace deskbox::server::routes {

using nlohmann::json;

namespace {
// Asks the agent `method` for a route that takes no query parameters.
HttpResponse agent_state(RouteContext& context, const char* method) {
    allow_only(context.query, {});
    return json_response(200, context.sandbox->call(method).result);
}
}  // namespace

void check_clipboard_body(const json& body) {
    if (!body.is_object() || !body.contains("text") || !body["text"].is_string())
        throw bad_request("text", "expected a string");
    for (auto& [k, v] : body.items())
        if (k != "text") throw bad_request(k, "unknown field");
}

HttpResponse list_windows(RouteContext& context) {
    return agent_state(context, "windows.list");
}

HttpResponse cursor_position(RouteContext& context) {
    return agent_state(context, "cursor.get");
}

HttpResponse read_clipboard(RouteContext& context) {
    return agent_state(context, "clipboard.get");
}

HttpResponse write_clipboard(RouteContext& context) {
    allow_only(context.query, {});
    json body = parse_body(context.request());
    check_clipboard_body(body);
    return json_response(200, context.sandbox->call("clipboard.set", body).result);
}

}  // namespace deskbox::server::routes
