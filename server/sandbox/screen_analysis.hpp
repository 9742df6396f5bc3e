// What the screen's analysis files share (screen_analysis.cpp, screen_wait.cpp): the frame a
// request looks at, the per-sandbox analysis state, and finding an image or text on a frame.
// Internal to SandboxScreen.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "common/elapsed.hpp"
#include "server/sandbox/sandbox_screen.hpp"
#include "streaming/analysis/text_recognition.hpp"

namespace deskbox::server {

using AnalysisClock = std::chrono::steady_clock;

struct SandboxScreen::View {
    streaming::FrameSnapshot snapshot;
    std::optional<analysis::OwnedImage> scaled;  // the frame at the API resolution
    streaming::ImageView view() const { return scaled ? scaled->view() : snapshot.frame->view(); }
    int width() const { return view().width; }
    int height() const { return view().height; }
    // `asked` (default: the whole screen), checked to lie on it; errors name `field`.
    streaming::Rect region(const std::optional<streaming::Rect>& asked,
                           const std::string& field) const;
};

struct SandboxScreen::AnalysisState {
    std::mutex mutex;
    std::size_t waits = 0;
    struct CachedOcr {
        std::uint64_t version, generation;
        streaming::Rect region;
        std::string lang;
        std::shared_ptr<const analysis::OcrResult> result;
    };
    std::deque<CachedOcr> ocr;
};

// Counts a sandbox's waits in flight (each holds a request's thread); over_capacity past the limit.
class WaitSlot {
  public:
    explicit WaitSlot(SandboxScreen::AnalysisState& state);
    ~WaitSlot();
    WaitSlot(const WaitSlot&) = delete;
    WaitSlot& operator=(const WaitSlot&) = delete;

  private:
    SandboxScreen::AnalysisState& state_;
};

// A wait wakes on frames only, not on the cursor moving.
inline constexpr auto kNoCursorWake = std::numeric_limits<std::uint64_t>::max();

struct Found {
    streaming::Rect box;
    double score = 0;
    double scale = 1;
    std::string text;  // text matches
};

// Best first; text through the OCR cache.
std::vector<Found> find_on(SandboxScreen::AnalysisState& state, const SandboxScreen::View& view,
                           const TargetSpec& spec);
nlohmann::json found_json(const Found& found, bool text);
nlohmann::json rect_json(const streaming::Rect& r);

}  // namespace deskbox::server
