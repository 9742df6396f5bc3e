#include "server/api/routes/system.hpp"

#include "server/api/api_routes.hpp"
#include "server/api/http_util.hpp"
#include "server/sandbox/sandbox_manager.hpp"

namespace deskbox::server::routes {

HttpResponse healthz(RouteContext& context) {
    return json_response(200, {{"status", "ok"}, {"sandboxes", context.api.manager.list().size()}});
}

HttpResponse openapi_json(RouteContext&) {
    HttpResponse res{http::status::ok, 11};
    res.set(http::field::content_type, "application/json");
    res.body() = std::string(openapi_document());
    return res;
}


}  // namespace deskbox::server::routes
