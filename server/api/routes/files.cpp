#include "server/api/routes/files.hpp"

#include "server/api/http_util.hpp"
#include "server/sandbox/agent_client.hpp"

namespace deskbox::server::routes {

using nlohmann::json;

std::string parse_files_path(const Query& query) {
    allow_only(query, {"path", "recursive", "mode"});
    return required_query(query, "path");
}

HttpResponse read_file(RouteContext& context) {
    const std::string path = parse_files_path(context.query);
    PathContents contents = context.agent().read_path(path);
    if (contents.directory) return json_response(200, contents.listing);
    HttpResponse res{http::status::ok, 11};
    res.set(http::field::content_type, "application/octet-stream");
    res.body() = std::move(contents.bytes);
    return res;
}

HttpResponse write_file(RouteContext& context) {
    const std::string path = parse_files_path(context.query);
    std::optional<std::string> mode;
    if (auto it = context.query.find("mode"); it != context.query.end()) mode = it->second;
    return json_response(
        200, context.agent().write_file(path, std::move(context.request().body()), mode));
}

HttpResponse remove_file(RouteContext& context) {
    const std::string path = parse_files_path(context.query);
    const bool recursive = bool_query(context.query, "recursive");
    return json_response(200, context.agent().remove_file(path, recursive));
}

HttpResponse list_directory(RouteContext& context) {
    allow_only(context.query, {"path"});
    return json_response(200,
                         context.agent().list_directory(required_query(context.query, "path")));
}

HttpResponse make_directory(RouteContext& context) {
    allow_only(context.query, {"path", "parents"});
    const std::string path = required_query(context.query, "path");
    const bool parents = bool_query(context.query, "parents");
    if (const json body = parse_body(context.request(), true);
        !body.is_null() && !(body.is_object() && body.empty()))
        throw bad_request("", "takes no body fields: path and parents are query parameters");
    context.agent().make_directory(path, parents);
    return json_response(201, {{"path", path}});
}

}  // namespace deskbox::server::routes
