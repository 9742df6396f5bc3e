#include "server/api/api_routes.hpp"

namespace deskbox::server {

namespace {

using boost::beast::http::verb;

std::vector<std::string_view> segments(std::string_view path) {
    std::vector<std::string_view> out;
    std::size_t start = 1;
    while (start <= path.size()) {
        std::size_t end = path.find('/', start);
        if (end == std::string_view::npos) end = path.size();
        out.push_back(path.substr(start, end - start));
        start = end + 1;
    }
    return out;
}

bool matches(const std::vector<std::string_view>& want,
             const std::vector<std::string_view>& parts) {
    for (std::size_t i = 0; i < want.size(); ++i) {
        const bool rest = want[i] == "{path}" && i + 1 == want.size();
        if (rest) return parts.size() >= i;  // "" and deeper paths alike
        if (i >= parts.size()) return false;
        const bool variable = want[i].size() > 2 && want[i].front() == '{';
        if (variable ? parts[i].empty() : parts[i] != want[i]) return false;
    }
    return parts.size() == want.size();
}

}  // namespace

const std::vector<ApiRoute>& api_routes() {
    static const std::vector<ApiRoute> routes = {
        {"/healthz", {verb::get, verb::head}},
        {"/metrics", {verb::get}},
        {"/v1/openapi.json", {verb::get}},
        {"/mcp", {verb::post, verb::get, verb::delete_}},
        {"/v1/sandboxes", {verb::get, verb::post}},
        {"/v1/sandboxes/{id}", {verb::get, verb::delete_}},
        {"/v1/sandboxes/{id}/timeout", {verb::post}},
        {"/v1/sandboxes/{id}/pause", {verb::post}},
        {"/v1/sandboxes/{id}/resume", {verb::post}},
        {"/v1/sandboxes/{id}/screenshot", {verb::get}},
        {"/v1/sandboxes/{id}/actions", {verb::post}},
        {"/v1/sandboxes/{id}/wait", {verb::post}},
        {"/v1/sandboxes/{id}/locate", {verb::post}},
        {"/v1/sandboxes/{id}/ocr", {verb::post}},
        {"/v1/sandboxes/{id}/compare", {verb::post}},
        {"/v1/sandboxes/{id}/commands", {verb::post}},
        {"/v1/sandboxes/{id}/processes/kill", {verb::post}},
        {"/v1/sandboxes/{id}/files", {verb::get, verb::put, verb::delete_}},
        {"/v1/sandboxes/{id}/recording", {verb::get, verb::post, verb::delete_}},
        {"/v1/sandboxes/{id}/ports", {verb::get}},
        {"/v1/sandboxes/{id}/ports/{port}/{path}",
         {verb::get, verb::post, verb::put, verb::patch, verb::delete_, verb::head, verb::options}},
        {"/v1/sandboxes/{id}/windows", {verb::get}},
        {"/v1/sandboxes/{id}/cursor", {verb::get}},
        {"/v1/sandboxes/{id}/clipboard", {verb::get, verb::put, verb::post}},
        {"/v1/sandboxes/{id}/stream", {verb::get}},
        {"/v1/sandboxes/{id}/vnc", {verb::get}},
        {"/v1/recordings", {verb::get}},
        {"/v1/recordings/{id}", {verb::get, verb::head, verb::delete_}},
        {"/v1/recordings/{id}/events", {verb::get, verb::head}},
        {"/v1/templates", {verb::get}},
        {"/view/{id}", {verb::get}},
        {"/", {verb::get, verb::head}},
        {"/assets/{name}", {verb::get, verb::head}},
    };
    return routes;
}

const ApiRoute* match_api_route(std::string_view path) {
    if (path.empty() || path.front() != '/') return nullptr;
    if (path == "/index.html") path = "/";
    if (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
    auto parts = segments(path);
    if (path == "/") parts.clear();
    // The templates split once, not on every request.
    static const std::vector<std::vector<std::string_view>> templates = [] {
        std::vector<std::vector<std::string_view>> out;
        for (const auto& route : api_routes()) out.push_back(segments(route.path));
        return out;
    }();
    const auto& routes = api_routes();
    for (std::size_t i = 0; i < routes.size(); ++i) {
        if (routes[i].path == "/" ? path == "/" : matches(templates[i], parts)) return &routes[i];
    }
    return nullptr;
}

}  // namespace deskbox::server
