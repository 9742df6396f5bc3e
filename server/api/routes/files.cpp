#include "server/api/routes/files.hpp"

#include "server/api/http_util.hpp"

namespace deskbox::server::routes {

using nlohmann::json;

std::string parse_files_path(const Query& query) {
    allow_only(query, {"path", "recursive", "mode"});
    return required_query(query, "path");
}

HttpResponse read_file(RouteContext& context) {
    const std::string path = parse_files_path(context.query);
    Sandbox& sandbox = *context.sandbox;
    auto stat = sandbox.call("files.stat", {{"path", path}}).result;
    if (stat.value("type", "") == "dir")
        return json_response(200, sandbox.call("files.list", {{"path", path}}).result);
    auto reply = sandbox.call("files.read", {{"path", path}}, {}, std::chrono::minutes(5));
    HttpResponse res{http::status::ok, 11};
    res.set(http::field::content_type, "application/octet-stream");
    res.body() = std::move(reply.body);
    return res;
}

HttpResponse write_file(RouteContext& context) {
    const std::string path = parse_files_path(context.query);
    HttpRequest& request = context.request();
    json params = {{"path", path}, {"parents", true}};
    if (context.query.count("mode")) params["mode"] = context.query.at("mode");
    context.sandbox->audit("files.write", {{"path", path}, {"bytes", request.body().size()}});
    auto reply = context.sandbox->call("files.write", params, std::move(request.body()),
                                       std::chrono::minutes(5));
    return json_response(200, reply.result);
}

HttpResponse remove_file(RouteContext& context) {
    const std::string path = parse_files_path(context.query);
    const bool recursive = bool_query(context.query, "recursive");
    context.sandbox->audit("files.remove", {{"path", path}, {"recursive", recursive}});
    return json_response(
        200,
        context.sandbox->call("files.remove", {{"path", path}, {"recursive", recursive}}).result);
}

}  // namespace deskbox::server::routes
