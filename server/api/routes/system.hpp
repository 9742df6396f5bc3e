// The server's own routes: health and the OpenAPI document.
#pragma once

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse healthz(RouteContext& context);         // GET|HEAD /healthz
HttpResponse openapi_json(RouteContext& context);    // GET /v1/openapi.json

}  // namespace deskbox::server::routes
