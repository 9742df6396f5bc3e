#include "server/api/routes/screen.hpp"

#include "server/api/http_util.hpp"
#include "server/sandbox/sandbox_config.hpp"
#include "server/sandbox/sandbox_screen.hpp"

namespace deskbox::server::routes {

streaming::EncodeOptions parse_screenshot_query(const Query& query) {
    allow_only(query, {"format", "quality", "width", "height", "cursor", "compression"});
    streaming::EncodeOptions options;
    try {
        if (query.count("format"))
            options.format = streaming::parse_image_format(query.at("format"));
    } catch (const std::invalid_argument& e) {
        throw bad_request("format", "expected png, jpeg or webp");
    }
    if (query.count("quality")) options.quality = int_query(query, "quality");
    if (query.count("compression")) options.png_compression = int_query(query, "compression");
    if (query.count("width")) options.width = int_query(query, "width");
    if (query.count("height")) options.height = int_query(query, "height");
    options.composite_cursor = bool_query(query, "cursor");
    return options;
}

HttpResponse screenshot(RouteContext& context) {
    auto options = parse_screenshot_query(context.query);
    // Unsized, at the API resolution: the pixels of every coordinate the API takes and answers.
    if (!options.width && !options.height) {
        const auto api = context.screen().api_sized();
        options.width = api.width;
        options.height = api.height;
    }
    ScopedTimer timer(context.api.metrics.screenshot_seconds);
    auto image = context.screen().screenshot(options);
    HttpResponse res{http::status::ok, 11};
    res.set(http::field::content_type, image.content_type);
    res.set("X-Screen-Width", std::to_string(context.config().width));
    res.set("X-Screen-Height", std::to_string(context.config().height));
    res.set(http::field::cache_control, "no-store");
    res.body().assign(image.bytes.begin(), image.bytes.end());
    return res;
}

}  // namespace deskbox::server::routes
