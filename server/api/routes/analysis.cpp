#include "server/api/routes/analysis.hpp"

#include "server/api/http_util.hpp"

namespace deskbox::server::routes {

namespace {
// Each takes a JSON body and no query parameters.
nlohmann::json body_of(const RouteContext& context) {
    allow_only(context.query, {});
    return parse_body(context.request());
}
}  // namespace

HttpResponse wait_for_screen(RouteContext& context) {
    return json_response(200, context.sandbox->wait(body_of(context)));
}

HttpResponse locate_on_screen(RouteContext& context) {
    return json_response(200, context.sandbox->locate(body_of(context)));
}

HttpResponse read_screen_text(RouteContext& context) {
    return json_response(200, context.sandbox->ocr(body_of(context)));
}

HttpResponse compare_screen(RouteContext& context) {
    return json_response(200, context.sandbox->compare(body_of(context)));
}

}  // namespace deskbox::server::routes
