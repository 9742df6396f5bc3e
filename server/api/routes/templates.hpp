// Templates: the list (shipped and user-built), one template, deleting one; uploads of build
// contexts and image archives; builds and imports with their status, log and cancel.
#pragma once

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse list_templates(RouteContext& context);   // GET /v1/templates
HttpResponse get_template(RouteContext& context);     // GET /v1/templates/{name}
HttpResponse delete_template(RouteContext& context);  // DELETE /v1/templates/{name}
HttpResponse create_upload(RouteContext& context);    // POST /v1/templates/uploads
HttpResponse append_upload(RouteContext& context);    // PUT /v1/templates/uploads/{id}
HttpResponse start_build(RouteContext& context);      // POST /v1/templates/builds
HttpResponse start_import(RouteContext& context);     // POST /v1/templates/imports
HttpResponse list_builds(RouteContext& context);      // GET /v1/templates/builds
HttpResponse get_build(RouteContext& context);        // GET /v1/templates/builds/{id}
HttpResponse build_log(RouteContext& context);        // GET /v1/templates/builds/{id}/log
HttpResponse cancel_build(RouteContext& context);     // POST /v1/templates/builds/{id}/cancel

}  // namespace deskbox::server::routes
