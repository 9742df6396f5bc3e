// Screen analysis on a sandbox's frame mirror: locate, OCR, compare, and finding the targets of
// actions that aim at what is on the screen. The work is in streaming/analysis/; this file picks
// frames and converts between screen and API pixels. wait is in screen_wait.cpp.
#include "server/sandbox/screen_analysis.hpp"

#include <cmath>

#include "common/base64.hpp"
#include "streaming/analysis/image_search.hpp"
#include "streaming/analysis/screen_compare.hpp"

namespace deskbox::server {

using nlohmann::json;
using streaming::Rect;

namespace {

constexpr std::size_t kMaxWaitsPerSandbox = 4;  // each holds a request's thread while it waits
constexpr std::size_t kOcrCacheEntries = 4;

json box_json(const Rect& box, double score) {
    return {{"x", box.x},
            {"y", box.y},
            {"width", box.width},
            {"height", box.height},
            {"score", std::round(score * 10000) / 10000},
            {"center", {box.x + box.width / 2, box.y + box.height / 2}}};
}

std::shared_ptr<const analysis::OcrResult> read_text(SandboxScreen::AnalysisState& state,
                                                     const streaming::FrameSnapshot& snapshot,
                                                     const streaming::ImageView& view,
                                                     const Rect& region, const std::string& lang,
                                                     const std::string& prefix) {
    {
        std::lock_guard lock(state.mutex);
        for (const auto& c : state.ocr)
            if (c.version == snapshot.version && c.generation == snapshot.generation &&
                c.region == region && c.lang == lang)
                return c.result;
    }
    auto result = std::make_shared<const analysis::OcrResult>(checked(prefix, [&] {
        return analysis::TextRecognizer::shared().recognize(analysis::crop(view, region), lang);
    }));
    std::lock_guard lock(state.mutex);
    state.ocr.push_back({snapshot.version, snapshot.generation, region, lang, result});
    while (state.ocr.size() > kOcrCacheEntries) state.ocr.pop_front();
    return result;
}

}  // namespace

json rect_json(const Rect& r) {
    return json::array({r.x, r.y, r.width, r.height});
}

json found_json(const Found& f, bool text) {
    json j = box_json(f.box, f.score);
    if (text)
        j["text"] = f.text;
    else
        j["scale"] = f.scale;
    return j;
}

Rect SandboxScreen::View::region(const std::optional<Rect>& asked, const std::string& field) const {
    const Rect whole{0, 0, width(), height()};
    const Rect r = asked.value_or(whole);
    if (intersect(r, whole) != r)
        throw invalid_field(field, "must lie on the " + std::to_string(width()) + "x" +
                                       std::to_string(height()) + " screen");
    return r;
}

WaitSlot::WaitSlot(SandboxScreen::AnalysisState& state) : state_(state) {
    std::lock_guard lock(state_.mutex);
    if (state_.waits >= kMaxWaitsPerSandbox)
        throw SandboxError(SandboxFault::over_capacity, "too_many_waits",
                           "this sandbox already has " + std::to_string(kMaxWaitsPerSandbox) +
                               " waits (or targeted actions) waiting; try again when one ends");
    ++state_.waits;
}

WaitSlot::~WaitSlot() {
    std::lock_guard lock(state_.mutex);
    --state_.waits;
}

std::vector<Found> find_on(SandboxScreen::AnalysisState& state, const SandboxScreen::View& v,
                           const TargetSpec& spec) {
    const Rect region = v.region(spec.search.region, join_field(spec.field, "region"));
    std::vector<Found> out;
    if (spec.image) {
        auto matches = checked(
            spec.field, [&] { return analysis::find_image(v.view(), *spec.image, spec.search); });
        for (const auto& m : matches) out.push_back({m.box, m.score, m.scale, {}});
        return out;
    }
    auto ocr = read_text(state, v.snapshot, v.view(), region, spec.lang, spec.field);
    auto matches =
        checked(spec.field, [&] { return analysis::find_text(*ocr, spec.text, spec.exact); });
    for (const auto& m : matches) {
        if (int(out.size()) == spec.search.max_results) break;
        Rect box = m.box;
        box.x += region.x;
        box.y += region.y;
        out.push_back({box, m.score, 1, m.text});
    }
    return out;
}

json SandboxScreen::locate(const TargetSpec& spec) {
    const auto start = AnalysisClock::now();
    auto view = this->view(true);
    json matches = json::array();
    for (const auto& f : find_on(*analysis_, view, spec))
        matches.push_back(found_json(f, !spec.image));
    return {{"matches", matches},
            {"frame_version", view.snapshot.version},
            {"elapsed_ms", ms_since(start)}};
}

json SandboxScreen::ocr(const OcrRequest& request) {
    const auto start = AnalysisClock::now();
    auto view = this->view(true);
    const Rect region = view.region(request.region, "region");
    auto result = read_text(*analysis_, view.snapshot, view.view(), region, request.lang, "");
    json lines = json::array(), words = json::array();
    std::vector<int> line_index(result->lines.size(), -1);
    std::vector<std::string> line_text(result->lines.size());
    for (const auto& w : result->words) {
        if (w.confidence < request.min_confidence) continue;
        const auto l = std::size_t(w.line);
        if (line_index[l] < 0) {
            line_index[l] = int(lines.size());
            const auto& line = result->lines[l];
            lines.push_back({{"text", ""},
                             {"x", line.box.x + region.x},
                             {"y", line.box.y + region.y},
                             {"width", line.box.width},
                             {"height", line.box.height},
                             {"confidence", std::round(line.confidence * 10) / 10}});
        }
        auto& text = line_text[l];
        text += (text.empty() ? "" : " ") + w.text;
        words.push_back({{"text", w.text},
                         {"x", w.box.x + region.x},
                         {"y", w.box.y + region.y},
                         {"width", w.box.width},
                         {"height", w.box.height},
                         {"confidence", std::round(w.confidence * 10) / 10},
                         {"line", line_index[l]}});
    }
    std::string all;
    for (std::size_t l = 0; l < result->lines.size(); ++l) {
        if (line_index[l] < 0) continue;
        lines[std::size_t(line_index[l])]["text"] = line_text[l];
        all += (all.empty() ? "" : "\n") + line_text[l];
    }
    return {{"text", all},
            {"lines", lines},
            {"words", words},
            {"frame_version", view.snapshot.version},
            {"elapsed_ms", ms_since(start)}};
}

json SandboxScreen::compare(const CompareRequest& request) {
    const auto start = AnalysisClock::now();
    analysis::CompareOptions options;
    options.tolerance = request.tolerance;
    options.diff_image = request.diff_image;
    auto view = this->view(true);
    const Rect region = view.region(request.region, "region");
    // Mask rects are screen coordinates; the comparison runs on the region's own pixels.
    for (std::size_t i = 0; i < request.mask.size(); ++i) {
        Rect inside = intersect(request.mask[i], region);
        view.region(request.mask[i], "mask[" + std::to_string(i) + "]");
        if (inside.empty()) continue;
        options.mask.push_back(
            {inside.x - region.x, inside.y - region.y, inside.width, inside.height});
    }
    auto result = checked("", [&] {
        return analysis::compare_images(analysis::crop(view.view(), region),
                                        request.baseline.view(), options);
    });
    json changed = json::array();
    for (const auto& r : result.changed)
        changed.push_back(rect_json({r.x + region.x, r.y + region.y, r.width, r.height}));
    json answer = {{"identical", result.identical},
                   {"ssim", std::round(result.ssim * 1e6) / 1e6},
                   {"psnr", result.psnr ? json(std::round(*result.psnr * 1000) / 1000) : json()},
                   {"changed_pixels", result.changed_pixels},
                   {"changed_ratio", result.changed_ratio},
                   {"changed", changed},
                   {"width", region.width},
                   {"height", region.height},
                   {"frame_version", view.snapshot.version},
                   {"elapsed_ms", ms_since(start)}};
    if (options.diff_image) answer["diff_image"] = base64_encode(result.diff_png);
    return answer;
}

TargetSighting SandboxScreen::seek(const TargetSpec& spec) {
    const auto start = AnalysisClock::now();
    const auto deadline = start + std::chrono::milliseconds(spec.timeout_ms);
    WaitSlot slot(*analysis_);
    auto view = this->view(true);
    while (true) {
        auto found = find_on(*analysis_, view, spec);
        if (found.size() > std::size_t(spec.index)) {
            const Found& hit = found[std::size_t(spec.index)];
            json match = found_json(hit, !spec.image);
            match["elapsed_ms"] = ms_since(start);
            return {hit.box, view.width(), view.height(), std::move(match)};
        }
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - AnalysisClock::now());
        const std::uint64_t seen = view.snapshot.version;
        bool changed = left.count() > 0 && mirror_.wait_for_change(seen, kNoCursorWake, left);
        if (mirror_.closed())
            throw SandboxError(SandboxFault::conflict, "conflict",
                               "the sandbox ended while looking for the target");
        if (!changed) {
            const std::string what = spec.image ? std::string("the image")
                                                : "the text " + input::quote_for_error(spec.text);
            throw SandboxError(
                SandboxFault::unprocessable, "target_not_found",
                spec.field + ": " + what + " was not on the screen" +
                    (spec.index ? " " + std::to_string(spec.index + 1) + " times" : "") +
                    " within " + std::to_string(spec.timeout_ms) +
                    " ms (actions before it have run)",
                spec.field);
        }
        view = this->view(false);
    }
}

}  // namespace deskbox::server
