#include "server/api/routes/secrets.hpp"

#include "server/api/http_util.hpp"
#include "server/sandbox/request_reader.hpp"
#include "server/sandbox/sandbox_manager.hpp"
#include "server/sandbox/store_errors.hpp"

namespace deskbox::server::routes {

using nlohmann::json;

HttpResponse set_secret(RouteContext& context) {
    json body = parse_body(context.request());
    RequestReader reader(body);
    const std::string name = reader.required_string("name", secrets::kMaxSecretName);
    const std::string value = reader.required_string("value", secrets::kMaxSecretValue);
    reader.finish();
    return as_sandbox_error([&] {
        auto& store = context.api.manager.secrets();
        const bool created = store.set(name, value);
        for (const auto& info : store.list())
            if (info.name == name) return json_response(created ? 201 : 200, info.to_json());
        return json_response(created ? 201 : 200, {{"name", name}});
    });
}

HttpResponse list_secrets(RouteContext& context) {
    allow_only(context.query, {});
    json list = json::array();
    for (const auto& info : context.api.manager.secrets().list()) list.push_back(info.to_json());
    return json_response(200, {{"secrets", list}});
}

HttpResponse delete_secret(RouteContext& context) {
    allow_only(context.query, {});
    return as_sandbox_error([&] {
        context.api.manager.secrets().remove(context.params.at("name"));
        return json_response(200, {{"deleted", context.params.at("name")}});
    });
}

}  // namespace deskbox::server::routes
