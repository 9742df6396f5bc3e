#include "server/api/routes/desktop.hpp"

#include <limits>

#include "server/api/http_util.hpp"
#include "server/sandbox/agent_client.hpp"
#include "server/sandbox/request_reader.hpp"

namespace deskbox::server::routes {

using nlohmann::json;

std::string parse_clipboard_body(const json& body) {
    RequestReader reader(body);
    std::string text = reader.required_string("text", std::numeric_limits<std::size_t>::max());
    reader.finish();
    return text;
}

HttpResponse list_windows(RouteContext& context) {
    allow_only(context.query, {});
    return json_response(200, context.agent().windows());
}

HttpResponse cursor_position(RouteContext& context) {
    allow_only(context.query, {});
    return json_response(200, context.agent().cursor());
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

}  // namespace deskbox::server::routes
