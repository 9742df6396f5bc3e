// POST /v1/sandboxes/{id}/actions: one action, a batch, or a model's whole output item, in
// the native, Anthropic or OpenAI dialect. The body is parsed and validated by input/parse.
#pragma once

#include "input/actions.hpp"
#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse run_actions(RouteContext& context);

struct ActionsQuery {
    input::Dialect dialect = input::Dialect::native;
    bool with_screenshot = false;  // the screen after the actions, and the dialect's reply
};
// ?dialect=native|anthropic|openai&screenshot=true|false; throws ApiError 400 bad_request
// naming the parameter (also an unknown one).
ActionsQuery parse_actions_query(const Query& query);

}  // namespace deskbox::server::routes
