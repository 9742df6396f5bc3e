#include "server/api/routes/analysis.hpp"

#include "server/api/http_util.hpp"
#include "server/sandbox/sandbox_screen.hpp"
#include "server/sandbox/screen_request.hpp"

namespace deskbox::server::routes {

namespace {
// Each takes a JSON body and no query parameters.
nlohmann::json body_of(const RouteContext& context) {
    allow_only(context.query, {});
    return parse_body(context.request());
}
}  // namespace

HttpResponse wait_for_screen(RouteContext& context) {
    return json_response(200, context.screen().wait(read_wait_request(body_of(context))));
}

HttpResponse locate_on_screen(RouteContext& context) {
    return json_response(200, context.screen().locate(read_locate_request(body_of(context))));
}

HttpResponse read_screen_text(RouteContext& context) {
    return json_response(200, context.screen().ocr(read_ocr_request(body_of(context))));
}

HttpResponse compare_screen(RouteContext& context) {
    return json_response(200, context.screen().compare(read_compare_request(body_of(context))));
}

}  // namespace deskbox::server::routes
