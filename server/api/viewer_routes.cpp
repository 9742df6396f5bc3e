// Routes for people watching sandboxes: the live stream WebSocket, RFB over WebSocket for noVNC,
// the viewer page with its assets, and the dashboard. Streams authorise with the sandbox's view
// or control token (or an API key), because browsers cannot set headers on WebSockets.
#include <boost/beast/websocket.hpp>

#include "server/api/api_router.hpp"
#include "server/api/http_util.hpp"
#include "server/stream/vnc_proxy.hpp"
#include "streaming/viewer/viewer_assets.hpp"

namespace deskbox::server {

using nlohmann::json;

namespace {

constexpr std::int64_t kMaxViewers = 512;  // over all sandboxes: each costs a socket and memory

HttpResponse asset_response(const streaming::ViewerAsset& asset) {
    HttpResponse res{http::status::ok, 11};
    res.set(http::field::content_type, std::string(asset.content_type));
    res.set(http::field::cache_control, "no-cache");
    // The page only talks to this server.
    res.set("Content-Security-Policy",
            "default-src 'self'; img-src 'self' data: blob:; connect-src 'self' ws: wss:; "
            "style-src 'self' 'unsafe-inline'");
    res.body() = std::string(asset.content);
    res.prepare_payload();
    return res;
}

std::string bearer(const HttpRequest& request) {
    if (auto it = request.find(http::field::authorization); it != request.end()) {
        std::string value(it->value());
        if (value.rfind("Bearer ", 0) == 0) return value.substr(7);
    }
    return {};
}

}  // namespace

ApiRouter::Access ApiRouter::sandbox_access(const HttpRequest& request, const Sandbox& sandbox,
                                            const std::map<std::string, std::string>& query,
                                            const std::string& query_key) const {
    for (const std::string& given :
         {query.count("token") ? query.at("token") : std::string(), bearer(request)}) {
        if (given.empty()) continue;
        if (constant_time_equal(given, sandbox.control_token())) return Access::control;
        if (constant_time_equal(given, sandbox.view_token())) return Access::view;
    }
    // With no API key configured (loopback only) an API key proves nothing: tokens are required.
    if (!options_.api_keys.empty() && authorised(request, query_key)) return Access::control;
    return Access::none;
}

std::optional<HttpResponse> ApiRouter::viewer_route(HttpExchange& exchange, const std::string& path,
                                                    std::map<std::string, std::string>& query,
                                                    const std::string& query_key) {
    HttpRequest& request = exchange.request;
    if (path.rfind("/assets/", 0) == 0) {
        require_method(request, {http::verb::get, http::verb::head});
        auto asset = streaming::find_viewer_asset(path.substr(8));
        if (!asset) throw ApiError(404, "not_found", "no such asset: " + path);
        return asset_response(*asset);
    }
    if (path == "/" || path == "/index.html") {
        require_method(request, {http::verb::get, http::verb::head});
        // The page itself is public; the sandbox list it fetches needs the key.
        return asset_response(*streaming::find_viewer_asset("dashboard.html"));
    }
    const std::string view_prefix = "/view/";
    const std::string sandboxes_prefix = "/v1/sandboxes/";
    std::string id, what;
    if (path.rfind(view_prefix, 0) == 0) {
        id = path.substr(view_prefix.size());
        what = "view";
    } else if (path.rfind(sandboxes_prefix, 0) == 0) {
        std::string rest = path.substr(sandboxes_prefix.size());
        auto slash = rest.find('/');
        if (slash == std::string::npos) return std::nullopt;
        what = rest.substr(slash + 1);
        if (what != "stream" && what != "vnc") return std::nullopt;
        id = rest.substr(0, slash);
    } else {
        return std::nullopt;
    }
    require_method(request, {http::verb::get});
    auto sandbox = manager_.find(id);  // 404 for unknown ids
    Access access = sandbox_access(request, *sandbox, query, query_key);
    if (access == Access::none)
        throw ApiError(401, "unauthorized",
                       "missing or wrong token: pass the sandbox's view_token or "
                       "control_token as ?token=");
    if (what == "view") {
        allow_only(query,
                   {"token", "codec", "control", "scale", "fps", "quality", "width", "height"});
        return asset_response(*streaming::find_viewer_asset("viewer.html"));
    }
    if (!boost::beast::websocket::is_upgrade(request))
        throw ApiError(426, "upgrade_required", "this endpoint is a WebSocket");
    if (viewers_.connected.load() >= kMaxViewers)
        throw ApiError(503, "too_many_viewers",
                       "the server has " + std::to_string(kMaxViewers) + " viewers already");
    // In-process callers (the HTTP fuzzer) have no connection to hand to a session.
    if (!exchange.stream)
        throw ApiError(400, "no_connection", "this request has no connection to upgrade");
    if (what == "vnc") {
        allow_only(query, {"token"});
        start_vnc_proxy(exchange, sandbox, viewers_);
        return HttpResponse{};
    }
    allow_only(query, {"token", "codec", "width", "height", "fps", "quality"});
    streaming::StreamSettings settings;
    try {
        if (query.count("codec")) settings.codec = streaming::parse_stream_codec(query.at("codec"));
        if (query.count("width")) settings.max_width = int_query(query, "width");
        if (query.count("height")) settings.max_height = int_query(query, "height");
        if (query.count("fps")) settings.max_fps = int_query(query, "fps");
        if (query.count("quality")) settings.quality = int_query(query, "quality");
        streaming::validate(settings);
    } catch (const streaming::ParameterError& e) {
        throw bad_request(e.field(), std::string(e.what()).substr(e.field().size() + 2));
    }
    if (sandbox->status() == SandboxStatus::error || sandbox->status() == SandboxStatus::killed)
        throw ApiError(409, "conflict", std::string("sandbox is ") + to_string(sandbox->status()));
    start_viewer_session(exchange, sandbox, settings, access == Access::control, viewers_);
    return HttpResponse{};
}

}  // namespace deskbox::server
