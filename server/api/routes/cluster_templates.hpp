// Routes only the nodes of a cluster call (RouteAuth::cluster_secret): a template's image for a
// node that lacks it (docs/CLUSTER.md, "Templates across nodes").
#pragma once

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

// GET /v1/cluster/templates/{image_id}?ref=name:tag: the image stream (template_transfer.hpp)
// of `ref`, which must point at that image here. Written straight to the connection as tar
// reads the rootfs (hundreds of MB are never held in memory); the body ends when the
// connection closes, and a stream cut short is refused by its reader.
HttpResponse serve_template_image(RouteContext& context);

}  // namespace deskbox::server::routes
