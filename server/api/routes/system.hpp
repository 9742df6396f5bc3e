// The server's own routes: health, the OpenAPI document, the templates it can start.
#pragma once

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse healthz(RouteContext& context);         // GET|HEAD /healthz
HttpResponse openapi_json(RouteContext& context);    // GET /v1/openapi.json
HttpResponse list_templates(RouteContext& context);  // GET /v1/templates

}  // namespace deskbox::server::routes
