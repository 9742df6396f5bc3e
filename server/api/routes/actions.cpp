#include "server/api/routes/actions.hpp"

#include "input/parse.hpp"
#include "server/api/http_util.hpp"
#include "server/sandbox/action_request.hpp"
#include "server/sandbox/sandbox_input.hpp"

namespace deskbox::server::routes {

ActionsQuery parse_actions_query(const Query& query) {
    allow_only(query, {"dialect", "screenshot"});
    ActionsQuery parsed;
    if (query.count("dialect")) {
        try {
            parsed.dialect = input::parse_dialect(query.at("dialect"));
        } catch (const input::ActionError& e) {
            throw bad_request("dialect", "expected native, anthropic or openai");
        }
    }
    parsed.with_screenshot = bool_query(query, "screenshot");
    return parsed;
}

HttpResponse run_actions(RouteContext& context) {
    const ActionsQuery query = parse_actions_query(context.query);
    ScopedTimer timer(context.api.metrics.action_seconds);
    ActionsRequest request =
        read_actions_request(parse_body(context.request()), query.dialect, query.with_screenshot);
    return json_response(200, context.input().actions(std::move(request)));
}

}  // namespace deskbox::server::routes
