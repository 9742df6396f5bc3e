// A sandbox's screen as the server sees it: the frame mirror the agent's damage events feed,
// the screen's size and the API resolution clients see, screenshots and zooms, and the
// analysis on the mirror's frames (locate, OCR, compare, wait, and finding an action's target).
// It needs of its sandbox only the agent client, to ask for what the agent has not sent yet.
#pragma once

#include <memory>
#include <mutex>
#include <optional>

#include <nlohmann/json.hpp>

#include "input/scaling.hpp"
#include "server/sandbox/agent_client.hpp"
#include "server/sandbox/screen_request.hpp"
#include "streaming/encoded_image_cache.hpp"
#include "streaming/frame_mirror.hpp"
#include "streaming/image_encoder.hpp"

namespace deskbox::server {

// Where a target was found (TargetSpec): its box in API pixels on a width x height screen, and
// the match as the API answers it (with elapsed_ms).
struct TargetSighting {
    streaming::Rect box;
    int screen_width = 0;
    int screen_height = 0;
    nlohmann::json match;
};

class SandboxScreen {
  public:
    // `agent` outlives the screen (both are the sandbox's).
    SandboxScreen(AgentClient& agent, input::Size size, std::optional<input::Size> api_resolution);
    ~SandboxScreen();
    SandboxScreen(const SandboxScreen&) = delete;
    SandboxScreen& operator=(const SandboxScreen&) = delete;

    streaming::FrameMirror& mirror() { return mirror_; }
    // The screen's own size (after an agent says it) and the API resolution clients see.
    void set_size(input::Size size);
    void set_api_resolution(std::optional<input::Size> api_resolution);
    input::Size size() const;
    // Between API and screen pixels; nullopt without an API resolution.
    std::optional<input::CoordinateScaler> scaler() const;
    // A screenshot's options at the size the client sees (its API resolution, if any).
    streaming::EncodeOptions api_sized() const;

    // Each throws SandboxError.
    // Asks the agent for what it has not sent yet and waits until the mirror has it.
    void sync(int settle_ms);
    streaming::EncodedImage screenshot(const streaming::EncodeOptions& options, int settle_ms = 30);
    // The region at the screen's own pixels, shrunk only where it would be larger than a
    // screenshot the client sees.
    streaming::EncodedImage zoom(const input::Zoom& zoom);

    // ---- analysis, on the mirror's frames in API pixels (screen_analysis.cpp) ----
    // The answers are in server/api/openapi.json.
    nlohmann::json locate(const TargetSpec& request);
    nlohmann::json ocr(const OcrRequest& request);
    nlohmann::json compare(const CompareRequest& request);
    // Blocks until the condition holds or its timeout (answers matched:false); woken by the
    // mirror's damage, never by polling (screen_wait.cpp).
    nlohmann::json wait(const WaitRequest& request);
    // Waits up to the target's timeout for it to appear: its spec.index-th match. SandboxError
    // (unprocessable) target_not_found if it does not.
    TargetSighting seek(const TargetSpec& target);

    // Opaque here; screen_analysis.hpp defines them.
    struct View;
    struct AnalysisState;

  private:
    // The current frame at the size the client sees; `sync`: first ask the agent for what it
    // has not sent yet (so it shows the last action's effect).
    View view(bool sync);
    // One wait's request, deadline and region (screen_wait.cpp); a function per kind.
    struct WaitRun;
    nlohmann::json wait_for_change(WaitRun& run);
    nlohmann::json wait_for_stable(WaitRun& run);
    nlohmann::json wait_for_sight(WaitRun& run);

    AgentClient& agent_;
    streaming::FrameMirror mirror_;
    // Screenshots of a frame that did not change since the last one are not encoded again.
    streaming::EncodedImageCache encoded_;
    mutable std::mutex mutex_;  // the sizes: set by the sandbox, read by requests
    input::Size size_;
    std::optional<input::CoordinateScaler> scaler_;
    std::unique_ptr<AnalysisState> analysis_;  // OCR cache, waits in flight
};

}  // namespace deskbox::server
