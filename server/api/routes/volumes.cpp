#include "server/api/routes/volumes.hpp"

#include "server/api/http_util.hpp"
#include "server/api/routes/files.hpp"
#include "server/sandbox/agent_client.hpp"
#include "server/sandbox/request_reader.hpp"
#include "server/sandbox/sandbox_manager.hpp"
#include "server/sandbox/store_errors.hpp"
#include "server/volumes/volume_files.hpp"

namespace deskbox::server::routes {

using nlohmann::json;

namespace {

// One files.* operation on the volume {name}, mounted for it meanwhile (as "api": it never
// counts as the volume's writer; its writes replace files whole).
volumes::VolumeFileReply volume_file_op(RouteContext& context, const std::string& method,
                                        const json& params, const std::string& body = {}) {
    auto& store = context.api.manager.volumes();
    auto lease = as_sandbox_error([&] {
        return store.acquire(context.params.at("name"), {"api", "/", true});
    });
    try {
        return volumes::run_volume_file_op(volumes::default_volume_files_helper(),
                                           lease.host_path(), store.owner_uid(), store.owner_gid(),
                                           method, params, body);
    } catch (const volumes::VolumeFileError& e) {
        throw agent_error(e.code(), e.what(), e.field());
    } catch (const std::runtime_error& e) {
        throw ApiError(500, "volume_failed", e.what());
    }
}

}  // namespace

HttpResponse create_volume(RouteContext& context) {
    json body = parse_body(context.request());
    RequestReader reader(body);
    const std::string name = reader.required_string("name", 63);
    const auto size_mb = reader.integer("size_mb", 1, std::int64_t{1} << 40).value_or(1024);
    json labels = json::object();
    if (auto map = reader.string_map("labels", 64))
        for (const auto& [k, v] : *map) labels[k] = v;
    reader.finish();
    return as_sandbox_error([&] {
        auto info =
            context.api.manager.volumes().create(name, static_cast<std::uint64_t>(size_mb), labels);
        return json_response(201, info.to_json());
    });
}

HttpResponse list_volumes(RouteContext& context) {
    allow_only(context.query, {});
    json volumes = json::array();
    for (const auto& info : context.api.manager.volumes().list()) volumes.push_back(info.to_json());
    return json_response(200, {{"volumes", volumes}});
}

HttpResponse get_volume(RouteContext& context) {
    allow_only(context.query, {});
    return as_sandbox_error([&] {
        return json_response(
            200, context.api.manager.volumes().inspect(context.params.at("name")).to_json());
    });
}

HttpResponse delete_volume(RouteContext& context) {
    allow_only(context.query, {});
    return as_sandbox_error([&] {
        context.api.manager.volumes().remove(context.params.at("name"));
        return json_response(200, {{"deleted", context.params.at("name")}});
    });
}

HttpResponse read_volume_file(RouteContext& context) {
    const std::string path = parse_files_path(context.query);
    try {
        auto reply = volume_file_op(context, "files.read", {{"path", path}});
        HttpResponse res{http::status::ok, 11};
        res.set(http::field::content_type, "application/octet-stream");
        res.body() = std::move(reply.body);
        return res;
    } catch (const SandboxError& e) {
        if (e.code() != "is_a_directory") throw;
    }
    return json_response(200, volume_file_op(context, "files.list", {{"path", path}}).result);
}

HttpResponse write_volume_file(RouteContext& context) {
    const std::string path = parse_files_path(context.query);
    json params = {{"path", path}, {"parents", true}};
    if (auto it = context.query.find("mode"); it != context.query.end())
        params["mode"] = it->second;
    return json_response(
        200, volume_file_op(context, "files.write", params, context.request().body()).result);
}

HttpResponse remove_volume_file(RouteContext& context) {
    const std::string path = parse_files_path(context.query);
    const json params = {{"path", path}, {"recursive", bool_query(context.query, "recursive")}};
    return json_response(200, volume_file_op(context, "files.remove", params).result);
}

}  // namespace deskbox::server::routes
