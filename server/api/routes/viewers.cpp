#include "server/api/routes/viewers.hpp"

#include <boost/beast/websocket.hpp>

#include "server/api/http_util.hpp"
#include "server/stream/vnc_proxy.hpp"
#include "streaming/viewer/viewer_assets.hpp"

namespace deskbox::server::routes {

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

// What a WebSocket route needs before it takes the connection: an upgrade, room for one more
// viewer, and a connection (in-process callers such as the HTTP fuzzer have none).
void check_socket_request(const RouteContext& context) {
    if (!boost::beast::websocket::is_upgrade(context.request()))
        throw ApiError(426, "upgrade_required", "this endpoint is a WebSocket");
    if (context.api.viewers.connected.load() >= kMaxViewers)
        throw ApiError(503, "too_many_viewers",
                       "the server has " + std::to_string(kMaxViewers) + " viewers already");
    if (!context.exchange.stream)
        throw ApiError(400, "no_connection", "this request has no connection to upgrade");
}

}  // namespace

streaming::StreamSettings parse_stream_query(const Query& query) {
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
    return streaming::snap_to_preset(settings);
}

HttpResponse stream_socket(RouteContext& context) {
    check_socket_request(context);
    const streaming::StreamSettings settings = parse_stream_query(context.query);
    Sandbox& sandbox = *context.sandbox;
    if (sandbox.status() == SandboxStatus::error || sandbox.status() == SandboxStatus::killed)
        throw ApiError(409, "conflict", std::string("sandbox is ") + to_string(sandbox.status()));
    // Held until the session has its own: over the sandbox's cap of encoders, an answer before
    // the upgrade rather than a closed socket.
    std::shared_ptr<streaming::LiveEncoder> encoder;
    try {
        encoder = sandbox.media().streams().encoder(settings);
    } catch (const streaming::TooManyEncoders& e) {
        throw ApiError(503, "too_many_encoders", e.what());
    }
    start_viewer_session(context.exchange, context.sandbox, settings,
                         context.access == Access::control, context.api.viewers,
                         std::move(encoder));
    return HttpResponse{};
}

HttpResponse vnc_socket(RouteContext& context) {
    check_socket_request(context);
    allow_only(context.query, {"token"});
    start_vnc_proxy(context.exchange, context.sandbox, context.api.viewers);
    return HttpResponse{};
}

HttpResponse viewer_page(RouteContext& context) {
    allow_only(context.query,
               {"token", "codec", "control", "scale", "fps", "quality", "width", "height"});
    return asset_response(*streaming::find_viewer_asset("viewer.html"));
}

HttpResponse dashboard_page(RouteContext&) {
    // The page itself is public; the sandbox list it fetches needs the key.
    return asset_response(*streaming::find_viewer_asset("dashboard.html"));
}

HttpResponse viewer_asset(RouteContext& context) {
    auto asset = streaming::find_viewer_asset(context.params.at("name"));
    if (!asset) throw ApiError(404, "not_found", "no such asset: " + context.path);
    return asset_response(*asset);
}

}  // namespace deskbox::server::routes
