// Screen analysis (server/sandbox/screen_request.cpp reads the bodies): wait for the
// screen to show something or settle, locate an image or text, read text, compare images.
#pragma once

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse wait_for_screen(RouteContext& context);   // POST /v1/sandboxes/{id}/wait
HttpResponse locate_on_screen(RouteContext& context);  // POST /v1/sandboxes/{id}/locate
HttpResponse read_screen_text(RouteContext& context);  // POST /v1/sandboxes/{id}/ocr
HttpResponse compare_screen(RouteContext& context);    // POST /v1/sandboxes/{id}/compare

}  // namespace deskbox::server::routes
