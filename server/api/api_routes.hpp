// The routes deskboxd answers, as OpenAPI path templates ("/v1/sandboxes/{id}/files"). The
// router refuses a request whose path matches none (404) or whose method its route does not
// list (405) before any handler runs, so this table is the whole surface: a test checks
// openapi.json against it.
#pragma once

#include <ostream>  // verb.hpp needs it and does not include it
#include <string_view>
#include <vector>

#include <boost/beast/http/verb.hpp>

namespace deskbox::server {

struct ApiRoute {
    std::string_view path;  // template; a last segment "{path}" takes the rest of the path
    std::vector<boost::beast::http::verb> methods;
};

const std::vector<ApiRoute>& api_routes();

// The route `path` (already URL-decoded, without the query) falls under, or nullptr. One
// trailing slash is ignored ("/v1/sandboxes/" is "/v1/sandboxes").
const ApiRoute* match_api_route(std::string_view path);

// The OpenAPI 3.1 document (server/api/openapi.json, compiled in).
std::string_view openapi_document();

}  // namespace deskbox::server
