// GET /v1/sandboxes/{id}/screenshot: the screen as PNG, JPEG or WebP, with its size in
// X-Screen-Width / X-Screen-Height. Ranges (quality, sizes) are the encoder's to check.
#pragma once

#include "server/api/route_context.hpp"
#include "streaming/image_encoder.hpp"

namespace deskbox::server::routes {

HttpResponse screenshot(RouteContext& context);

// ?format=png|jpeg|webp&quality=&compression=&width=&height=&cursor=; throws ApiError 400
// bad_request naming the parameter (also an unknown one).
streaming::EncodeOptions parse_screenshot_query(const Query& query);

}  // namespace deskbox::server::routes
