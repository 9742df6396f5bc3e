// Volumes (server/volumes/): named filesystems that outlive sandboxes, mounted at create.
#pragma once

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse create_volume(RouteContext& context);  // POST /v1/volumes
HttpResponse list_volumes(RouteContext& context);   // GET /v1/volumes
HttpResponse get_volume(RouteContext& context);     // GET /v1/volumes/{name}
HttpResponse delete_volume(RouteContext& context);  // DELETE /v1/volumes/{name}
// /v1/volumes/{name}/files?path=: a sandbox's files API on a volume, no sandbox needed.
HttpResponse read_volume_file(RouteContext& context);    // GET
HttpResponse write_volume_file(RouteContext& context);   // PUT
HttpResponse remove_volume_file(RouteContext& context);  // DELETE

}  // namespace deskbox::server::routes
