// Secrets (server/secrets/): write-only values for credential rules. No route returns a value.
#pragma once

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse set_secret(RouteContext& context);     // POST /v1/secrets
HttpResponse list_secrets(RouteContext& context);   // GET /v1/secrets
HttpResponse delete_secret(RouteContext& context);  // DELETE /v1/secrets/{name}

}  // namespace deskbox::server::routes
