// The web viewer's files (viewer.html, viewer.js, dashboard.html...), embedded at build time.
#pragma once

#include <optional>
#include <string_view>

namespace deskbox::streaming {

struct ViewerAsset {
    std::string_view content;
    std::string_view content_type;
};

// By file name ("viewer.js"); nullopt if there is no such asset.
std::optional<ViewerAsset> find_viewer_asset(std::string_view name);

}  // namespace deskbox::streaming
