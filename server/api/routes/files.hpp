// /v1/sandboxes/{id}/files?path=: read a file (a directory still lists, the older form), write
// one (parents made), remove one (recursive=true for a directory); /files/list?path= lists a
// directory (a file is 409 not_a_directory), /files/mkdir?path=&parents= makes one. The agent
// resolves and checks the path.
#pragma once

#include <string>

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse read_file(RouteContext& context);       // GET
HttpResponse write_file(RouteContext& context);      // PUT, the body is the content
HttpResponse remove_file(RouteContext& context);     // DELETE
HttpResponse list_directory(RouteContext& context);  // GET /files/list
HttpResponse make_directory(RouteContext& context);  // POST /files/mkdir

// The path of ?path=&recursive=&mode=; throws ApiError 400 bad_request for an unknown query
// parameter or a missing or empty path.
std::string parse_files_path(const Query& query);

}  // namespace deskbox::server::routes
