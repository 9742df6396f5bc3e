// SandboxScreen's frames and sizes: syncing with the agent, screenshots (scaled to the API
// resolution) and zooms. The analysis is in screen_analysis.cpp and screen_wait.cpp.
#include "server/sandbox/sandbox_screen.hpp"

#include <algorithm>

#include "server/sandbox/screen_analysis.hpp"

namespace deskbox::server {

SandboxScreen::SandboxScreen(AgentClient& agent, input::Size size,
                             std::optional<input::Size> api_resolution)
    : agent_(agent), size_(size), analysis_(std::make_unique<AnalysisState>()) {
    set_api_resolution(api_resolution);
}

SandboxScreen::~SandboxScreen() = default;

void SandboxScreen::set_size(input::Size size) {
    std::lock_guard lock(mutex_);
    size_ = size;
    if (scaler_) scaler_.emplace(scaler_->api(), size);
}

void SandboxScreen::set_api_resolution(std::optional<input::Size> api_resolution) {
    std::lock_guard lock(mutex_);
    if (api_resolution)
        scaler_.emplace(*api_resolution, size_);
    else
        scaler_.reset();
}

input::Size SandboxScreen::size() const {
    std::lock_guard lock(mutex_);
    return size_;
}

std::optional<input::CoordinateScaler> SandboxScreen::scaler() const {
    std::lock_guard lock(mutex_);
    return scaler_;
}

streaming::EncodeOptions SandboxScreen::api_sized() const {
    streaming::EncodeOptions options;
    if (auto scaler = this->scaler()) {
        options.width = scaler->api().width;
        options.height = scaler->api().height;
    }
    return options;
}

void SandboxScreen::sync(int settle_ms) {
    const std::uint64_t seq = agent_.sync_screen(settle_ms, 500).seq;
    if (!mirror_.wait_for_seq(seq, std::chrono::seconds(5)))
        throw SandboxError(SandboxFault::timed_out, "agent_timeout",
                           "the screen did not arrive from the agent in time");
}

streaming::EncodedImage SandboxScreen::screenshot(const streaming::EncodeOptions& options,
                                                  int settle_ms) {
    sync(settle_ms);
    auto snapshot = mirror_.snapshot();
    try {
        return encoded_.encode(snapshot, options);
    } catch (const std::invalid_argument& e) {
        throw SandboxError(SandboxFault::invalid, "bad_request", e.what());
    }
}

streaming::EncodedImage SandboxScreen::zoom(const input::Zoom& zoom) {
    // The region at the screen's own pixels (the point of zooming), shrunk only where it would
    // be larger than a screenshot the agent sees.
    streaming::EncodeOptions options;
    const int w = zoom.to.x - zoom.from.x + 1, h = zoom.to.y - zoom.from.y + 1;
    options.region = streaming::Rect{zoom.from.x, zoom.from.y, w, h};
    const auto scaler = this->scaler();
    const input::Size screen = size();
    const int max_w = scaler ? scaler->api().width : screen.width;
    const int max_h = scaler ? scaler->api().height : screen.height;
    if (w > max_w || h > max_h) {
        const double factor = std::min(double(max_w) / w, double(max_h) / h);
        options.width = std::max(1, int(w * factor));
        options.height = std::max(1, int(h * factor));
    }
    return screenshot(options);
}

SandboxScreen::View SandboxScreen::view(bool sync) {
    if (sync) this->sync(0);
    View v;
    v.snapshot = mirror_.snapshot();
    if (!v.snapshot.frame)
        throw SandboxError(SandboxFault::conflict, "conflict", "the sandbox has no screen yet");
    if (auto scaler = this->scaler(); scaler && !scaler->identity())
        v.scaled = analysis::scale_image(v.snapshot.frame->view(), scaler->api().width,
                                         scaler->api().height);
    return v;
}

}  // namespace deskbox::server
