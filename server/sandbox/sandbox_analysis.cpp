// Screen analysis on a sandbox's frame mirror: locate, OCR, compare and wait, and the targets
// of actions that aim at what is on the screen. The work is in streaming/analysis/; this file
// reads requests, picks frames and converts between screen and API pixels.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <set>

#include "common/base64.hpp"
#include "server/sandbox/request_reader.hpp"
#include "server/sandbox/sandbox.hpp"
#include "streaming/analysis/image_search.hpp"
#include "streaming/analysis/screen_compare.hpp"
#include "streaming/analysis/text_recognition.hpp"

namespace deskbox::server {

using nlohmann::json;
using streaming::Rect;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kDefaultWaitMs = 10'000;
constexpr int kMaxWaitMs = 120'000;
constexpr int kDefaultTargetWaitMs = 5'000;
constexpr int kMaxTargetWaitMs = 60'000;
constexpr int kDefaultStableMs = 300;
constexpr std::size_t kMaxWaitsPerSandbox = 4;  // each holds an HTTP thread while it waits
constexpr std::size_t kOcrCacheEntries = 4;

std::string join_field(const std::string& prefix, const std::string& name) {
    return prefix.empty() ? name : prefix + "." + name;
}

// A request object's fields, each read once, type-checked, errors naming prefix.field.
class Body {
  public:
    Body(const json& body, std::string prefix, const std::set<std::string>& allowed)
        : body_(body), prefix_(std::move(prefix)) {
        if (!body_.is_object())
            throw bad_request(prefix_,
                              "expected a JSON object, got " + std::string(body_.type_name()));
        RequestReader fields(body_, prefix_);  // the one unknown-field rule
        for (const auto& name : allowed) fields.raw(name);
        fields.finish();
    }
    std::string field(const std::string& name) const { return join_field(prefix_, name); }
    const std::string& prefix() const { return prefix_; }
    bool has(const char* name) const { return get(name) != nullptr; }
    const json* get(const char* name) const {
        auto it = body_.find(name);
        return it == body_.end() || it->is_null() ? nullptr : &*it;
    }
    double number(const char* name, double lo, double hi, double fallback) const {
        const json* v = get(name);
        if (!v) return fallback;
        if (!v->is_number() || !(v->get<double>() >= lo && v->get<double>() <= hi))
            throw bad_request(field(name),
                              "expected a number from " + shown(lo) + " to " + shown(hi));
        return v->get<double>();
    }
    int integer(const char* name, int lo, int hi, int fallback) const {
        const json* v = get(name);
        if (!v) return fallback;
        if (!v->is_number_integer() &&
            !(v->is_number_float() && std::floor(v->get<double>()) == v->get<double>()))
            throw bad_request(field(name), "expected a whole number");
        const double d = v->get<double>();
        if (d < lo || d > hi)
            throw bad_request(field(name),
                              "expected " + std::to_string(lo) + " to " + std::to_string(hi));
        return int(d);
    }
    bool flag(const char* name, bool fallback) const {
        const json* v = get(name);
        if (!v) return fallback;
        if (!v->is_boolean()) throw bad_request(field(name), "expected true or false");
        return v->get<bool>();
    }
    std::string string(const char* name) const {
        const json* v = get(name);
        if (!v) return {};
        if (!v->is_string()) throw bad_request(field(name), "expected a string");
        return v->get<std::string>();
    }
    std::optional<Rect> rect(const char* name) const {
        const json* v = get(name);
        return v ? std::optional(read_rect(*v, field(name))) : std::nullopt;
    }
    static Rect read_rect(const json& v, const std::string& field) {
        if (!v.is_array() || v.size() != 4)
            throw bad_request(field, "expected [x, y, width, height]");
        int n[4];
        for (int i = 0; i < 4; ++i) {
            if (!v[i].is_number_integer())
                throw bad_request(field, "expected [x, y, width, height] in whole pixels");
            const auto value = v[i].get<long long>();
            if (value < 0 || value > 32767) throw bad_request(field, "values must be 0..32767");
            n[i] = int(value);
        }
        if (n[2] == 0 || n[3] == 0) throw bad_request(field, "width and height must be > 0");
        return {n[0], n[1], n[2], n[3]};
    }

  private:
    static std::string shown(double v) {
        std::string s = std::to_string(v);
        while (s.size() > 1 && s.back() == '0') s.pop_back();
        if (!s.empty() && s.back() == '.') s.pop_back();
        return s;
    }
    const json& body_;
    std::string prefix_;
};

// Analysis errors name a field of the request; `prefix` puts them where the request had it.
template <typename F>
auto checked(const std::string& prefix, F&& f) {
    try {
        return f();
    } catch (const streaming::ParameterError& e) {
        const std::string field = join_field(prefix, e.field());
        std::string reason = e.what();
        if (reason.rfind(e.field() + ": ", 0) == 0) reason = reason.substr(e.field().size() + 2);
        throw bad_request(field, reason);
    }
}

long long ms_since(Clock::time_point start) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

json rect_json(const Rect& r) {
    return json::array({r.x, r.y, r.width, r.height});
}

json box_json(const Rect& box, double score) {
    return {{"x", box.x},
            {"y", box.y},
            {"width", box.width},
            {"height", box.height},
            {"score", std::round(score * 10000) / 10000},
            {"center", {box.x + box.width / 2, box.y + box.height / 2}}};
}

}  // namespace

// What to look for: an image or a text, and how.
struct Sandbox::TargetSpec {
    std::optional<analysis::Picture> image;
    std::string text;
    analysis::ImageSearch search;
    bool exact = false;
    std::string lang = "eng";
    // Targets only.
    int index = 0;
    input::Point offset;
    int timeout_ms = kDefaultTargetWaitMs;
    std::string field;  // where the spec sat ("target", "actions[2].target", "" for locate)
};

struct Sandbox::ScreenView {
    streaming::FrameSnapshot snapshot;
    std::optional<analysis::OwnedImage> scaled;  // the frame at the API resolution
    streaming::ImageView view() const { return scaled ? scaled->view() : snapshot.frame->view(); }
    int width() const { return view().width; }
    int height() const { return view().height; }
    // `asked` (default: the whole screen), checked to lie on it; errors name `field`.
    Rect region(const std::optional<Rect>& asked, const std::string& field) const {
        const Rect whole{0, 0, width(), height()};
        const Rect r = asked.value_or(whole);
        if (intersect(r, whole) != r)
            throw bad_request(field, "must lie on the " + std::to_string(width()) + "x" +
                                         std::to_string(height()) + " screen");
        return r;
    }
};

struct Sandbox::AnalysisState {
    std::mutex mutex;
    std::size_t waits = 0;
    struct CachedOcr {
        std::uint64_t version, generation;
        Rect region;
        std::string lang;
        std::shared_ptr<const analysis::OcrResult> result;
    };
    std::deque<CachedOcr> ocr;
};

std::shared_ptr<Sandbox::AnalysisState> Sandbox::new_analysis_state() {
    return std::make_shared<AnalysisState>();
}

namespace {

const std::set<std::string> kSeekFields = {
    "image", "text", "region", "threshold", "max_results", "scales", "grayscale", "exact", "lang"};

// The seek fields of `b` (locate, wait, target); `need`: one of image / text is required.
void read_seek(const Body& b, Sandbox::TargetSpec& spec, bool need) {
    const bool image = b.has("image"), text = b.has("text");
    if (image && text) throw bad_request(b.field("text"), "give image or text, not both");
    if (need && !image && !text) throw bad_request(b.field("image"), "give image or text");
    if (image) {
        const json& v = *b.get("image");
        if (!v.is_string()) throw bad_request(b.field("image"), "expected base64 of a PNG image");
        spec.image = checked(b.prefix(), [&] {
            return analysis::decode_base64_picture(v.get<std::string>(), "image");
        });
    }
    if (text) {
        spec.text = b.string("text");
        if (spec.text.find_first_not_of(" \t\n\r") == std::string::npos)
            throw bad_request(b.field("text"), "expected some text to find");
        if (spec.text.size() > 1000) throw bad_request(b.field("text"), "at most 1000 bytes");
    }
    spec.search.region = b.rect("region");
    spec.search.threshold = b.number("threshold", 0, 1, 0.9);
    spec.search.max_results = b.integer("max_results", 1, 100, 10);
    if (const json* scales = b.get("scales")) {
        if (!scales->is_array() || scales->empty() || scales->size() > 8)
            throw bad_request(b.field("scales"), "expected 1 to 8 numbers");
        spec.search.scales.clear();
        for (const auto& s : *scales) {
            if (!s.is_number() || !(s.get<double>() >= 0.25 && s.get<double>() <= 4))
                throw bad_request(b.field("scales"), "each scale must be from 0.25 to 4");
            spec.search.scales.push_back(s.get<double>());
        }
    }
    spec.search.grayscale = b.flag("grayscale", false);
    spec.exact = b.flag("exact", false);
    if (b.has("lang")) spec.lang = b.string("lang");
    for (const char* name : {"exact", "lang"})
        if (image && b.has(name)) throw bad_request(b.field(name), "only for text");
    for (const char* name : {"scales", "grayscale"})
        if (text && b.has(name)) throw bad_request(b.field(name), "only for image");
}

}  // namespace

Sandbox::ScreenView Sandbox::screen_view(bool sync) {
    if (sync) sync_screen(0);
    ScreenView v;
    v.snapshot = mirror_.snapshot();
    if (!v.snapshot.frame) throw ApiError(409, "conflict", "the sandbox has no screen yet");
    if (scaler_ && !scaler_->identity())
        v.scaled = analysis::scale_image(v.snapshot.frame->view(), scaler_->api().width,
                                         scaler_->api().height);
    return v;
}

namespace {

// Screen pixels to the client's and back (identity without an API resolution).
Rect scale_rect(const Rect& r, double sx, double sy) {
    const int x0 = int(std::floor(r.x * sx)), y0 = int(std::floor(r.y * sy));
    const int x1 = int(std::ceil(r.right() * sx)), y1 = int(std::ceil(r.bottom() * sy));
    return {x0, y0, std::max(1, x1 - x0), std::max(1, y1 - y0)};
}

}  // namespace

// ---- finding ----

namespace {

struct Found {
    Rect box;
    double score = 0;
    double scale = 1;
    std::string text;  // text matches
};

json found_json(const Found& f, bool text) {
    json j = box_json(f.box, f.score);
    if (text)
        j["text"] = f.text;
    else
        j["scale"] = f.scale;
    return j;
}

}  // namespace

namespace {

std::shared_ptr<const analysis::OcrResult> read_text(Sandbox::AnalysisState& state,
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

std::vector<Found> find_on(Sandbox::AnalysisState& state, const Sandbox::ScreenView& v,
                           const Sandbox::TargetSpec& spec) {
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

// Which rects of `changes` (screen pixels) touch `region` (screen pixels), clipped to it.
std::vector<Rect> touching(const streaming::FrameChanges& changes, const Rect& region) {
    std::vector<Rect> out;
    for (const auto& r : changes.rects) {
        Rect hit = intersect(r, region);
        if (!hit.empty()) out.push_back(hit);
    }
    return out;
}

// Boxes that overlap or touch become one (a glyph across two damage tiles is one change).
std::vector<Rect> merge_touching(std::vector<Rect> boxes) {
    for (bool merged = true; merged;) {
        merged = false;
        for (std::size_t i = 0; i < boxes.size() && !merged; ++i)
            for (std::size_t j = i + 1; j < boxes.size() && !merged; ++j) {
                const Rect grown{boxes[i].x - 1, boxes[i].y - 1, boxes[i].width + 2,
                                 boxes[i].height + 2};
                if (intersect(grown, boxes[j]).empty()) continue;
                boxes[i] = bounding(boxes[i], boxes[j]);
                boxes.erase(boxes.begin() + std::ptrdiff_t(j));
                merged = true;
            }
    }
    return boxes;
}

// The tight box of the pixels that differ between two frames of one size inside `rect`.
Rect changed_box(const streaming::Frame& a, const streaming::Frame& b, const Rect& rect) {
    Rect box;
    for (int y = rect.y; y < rect.bottom(); ++y) {
        const std::size_t row = std::size_t(y) * a.stride();
        if (!std::memcmp(a.pixels.data() + row + std::size_t(rect.x) * 4,
                         b.pixels.data() + row + std::size_t(rect.x) * 4,
                         std::size_t(rect.width) * 4))
            continue;
        for (int x = rect.x; x < rect.right(); ++x) {
            const std::size_t at = row + std::size_t(x) * 4;
            if (std::memcmp(a.pixels.data() + at, b.pixels.data() + at, 3))
                box = bounding(box, Rect{x, y, 1, 1});
        }
    }
    return box;
}

}  // namespace

nlohmann::json Sandbox::locate(const nlohmann::json& body) {
    const auto start = Clock::now();
    TargetSpec spec;
    read_seek(Body(body, "", kSeekFields), spec, true);
    auto view = screen_view(true);
    json matches = json::array();
    for (const auto& f : find_on(*analysis_, view, spec))
        matches.push_back(found_json(f, !spec.image));
    return {{"matches", matches},
            {"frame_version", view.snapshot.version},
            {"elapsed_ms", ms_since(start)}};
}

nlohmann::json Sandbox::ocr(const nlohmann::json& body) {
    const auto start = Clock::now();
    Body b(body, "", {"region", "lang", "min_confidence"});
    const auto region_asked = b.rect("region");
    const std::string lang = b.has("lang") ? b.string("lang") : "eng";
    const double min_confidence = b.number("min_confidence", 0, 100, 0);
    auto view = screen_view(true);
    const Rect region = view.region(region_asked, "region");
    auto result = read_text(*analysis_, view.snapshot, view.view(), region, lang, "");
    json lines = json::array(), words = json::array();
    std::vector<int> line_index(result->lines.size(), -1);
    std::vector<std::string> line_text(result->lines.size());
    for (const auto& w : result->words) {
        if (w.confidence < min_confidence) continue;
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

nlohmann::json Sandbox::compare(const nlohmann::json& body) {
    const auto start = Clock::now();
    Body b(body, "", {"baseline", "region", "mask", "tolerance", "diff"});
    const json* baseline_json = b.get("baseline");
    if (!baseline_json || !baseline_json->is_string())
        throw bad_request("baseline", "expected base64 of a PNG image");
    auto baseline = checked("", [&] {
        return analysis::decode_base64_picture(baseline_json->get<std::string>(), "baseline");
    });
    const auto region_asked = b.rect("region");
    analysis::CompareOptions options;
    options.tolerance = b.integer("tolerance", 0, 255, 0);
    options.diff_image = b.flag("diff", false);
    std::vector<Rect> mask;
    if (const json* m = b.get("mask")) {
        if (!m->is_array() || m->size() > 1000)
            throw bad_request("mask", "expected a list of [x, y, width, height] (at most 1000)");
        for (std::size_t i = 0; i < m->size(); ++i)
            mask.push_back(Body::read_rect((*m)[i], "mask[" + std::to_string(i) + "]"));
    }
    auto view = screen_view(true);
    const Rect region = view.region(region_asked, "region");
    // Mask rects are screen coordinates; the comparison runs on the region's own pixels.
    for (std::size_t i = 0; i < mask.size(); ++i) {
        Rect inside = intersect(mask[i], region);
        view.region(mask[i], "mask[" + std::to_string(i) + "]");
        if (inside.empty()) continue;
        options.mask.push_back(
            {inside.x - region.x, inside.y - region.y, inside.width, inside.height});
    }
    auto result = checked("", [&] {
        return analysis::compare_images(analysis::crop(view.view(), region), baseline.view(),
                                        options);
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

namespace {

// Counts a sandbox's waits in flight; refuses past the limit.
class WaitSlot {
  public:
    explicit WaitSlot(Sandbox::AnalysisState& state) : state_(state) {
        std::lock_guard lock(state_.mutex);
        if (state_.waits >= kMaxWaitsPerSandbox)
            throw ApiError(429, "too_many_waits",
                           "this sandbox already has " + std::to_string(kMaxWaitsPerSandbox) +
                               " waits (or targeted actions) waiting; try again when one ends");
        ++state_.waits;
    }
    ~WaitSlot() {
        std::lock_guard lock(state_.mutex);
        --state_.waits;
    }
    WaitSlot(const WaitSlot&) = delete;
    WaitSlot& operator=(const WaitSlot&) = delete;

  private:
    Sandbox::AnalysisState& state_;
};

constexpr auto kNoCursorWake = std::numeric_limits<std::uint64_t>::max();

}  // namespace

nlohmann::json Sandbox::wait(const nlohmann::json& body) {
    const auto start = Clock::now();
    std::set<std::string> fields = kSeekFields;
    fields.insert({"until", "timeout_ms", "stable_ms", "since"});
    Body b(body, "", fields);
    const std::string until = b.string("until");
    static const std::set<std::string> kinds = {"change", "stable", "image", "text", "gone"};
    if (!kinds.count(until))
        throw bad_request("until", "expected change, stable, image, text or gone");
    TargetSpec spec;
    read_seek(b, spec, until == "image" || until == "text" || until == "gone");
    if (until == "image" && !spec.image) throw bad_request("image", "required for until=image");
    if (until == "text" && spec.text.empty()) throw bad_request("text", "required for until=text");
    if ((until == "change" || until == "stable") && (spec.image || !spec.text.empty()))
        throw bad_request(spec.image ? "image" : "text", "not used by until=" + until);
    const int timeout_ms = b.integer("timeout_ms", 0, kMaxWaitMs, kDefaultWaitMs);
    const int stable_ms = b.integer("stable_ms", 1, 60'000, kDefaultStableMs);
    if (b.has("stable_ms") && until != "stable")
        throw bad_request("stable_ms", "only for until=stable");
    std::optional<std::uint64_t> since;
    if (const json* s = b.get("since")) {
        if (!s->is_number_unsigned()) throw bad_request("since", "expected a frame_version");
        if (until != "change") throw bad_request("since", "only for until=change");
        since = s->get<std::uint64_t>();
    }
    const auto deadline = start + std::chrono::milliseconds(timeout_ms);
    WaitSlot slot(*analysis_);
    auto view = screen_view(true);
    const Rect region = view.region(spec.search.region, "region");
    if (since && *since > view.snapshot.version)
        throw bad_request("since", "frame " + std::to_string(*since) +
                                       " has not happened yet (now " +
                                       std::to_string(view.snapshot.version) + ")");
    // The region in screen pixels, for the mirror's damage.
    const double to_screen_x = double(config_.width) / view.width();
    const double to_screen_y = double(config_.height) / view.height();
    const Rect screen_region = intersect(scale_rect(region, to_screen_x, to_screen_y),
                                         {0, 0, config_.width, config_.height});

    auto answer = [&](bool matched, std::uint64_t version) {
        return json{{"matched", matched},
                    {"until", until},
                    {"elapsed_ms", ms_since(start)},
                    {"frame_version", version}};
    };
    auto remaining = [&] {
        return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    };
    // Sleeps until the frame passes `version` or the deadline (or `limit`); false at the end.
    auto next_frame = [&](std::uint64_t version, std::chrono::milliseconds limit) {
        limit = std::min(limit, remaining());
        if (limit.count() <= 0) return false;
        const bool woke = mirror_.wait_for_change(version, kNoCursorWake, limit);
        if (mirror_.closed())
            throw ApiError(409, "conflict", "the sandbox ended while the wait was waiting");
        return woke;
    };
    const auto forever = std::chrono::milliseconds(kMaxWaitMs);

    if (until == "change") {
        // From `since`, or from the frame the wait started with (kept to compare pixels, so a
        // damage rect that only brushes the region does not count).
        const std::uint64_t from = since.value_or(view.snapshot.version);
        auto baseline = since && *since != view.snapshot.version ? nullptr : view.snapshot.frame;
        std::uint64_t seen = from;
        while (true) {
            auto update = mirror_.update_since(from);
            if (update.snapshot.version != seen || from != view.snapshot.version) {
                auto hits = touching(update.changes, screen_region);
                const bool reset = update.snapshot.generation != view.snapshot.generation;
                if (baseline && !reset) {
                    // Damage comes in tiles: keep the pixels that really differ.
                    std::vector<Rect> exact;
                    for (const auto& r : hits) {
                        Rect box = changed_box(*baseline, *update.snapshot.frame, r);
                        if (!box.empty()) exact.push_back(box);
                    }
                    hits = merge_touching(std::move(exact));
                }
                if (!hits.empty() || reset) {
                    {
                        json out = answer(true, update.snapshot.version);
                        json changed = json::array();
                        for (const auto& r : hits)
                            changed.push_back(rect_json(intersect(
                                scale_rect(r, 1 / to_screen_x, 1 / to_screen_y), region)));
                        out["changed"] = changed;
                        return out;
                    }
                }
                seen = update.snapshot.version;
            }
            if (!next_frame(seen, forever)) return answer(false, mirror_.version());
        }
    }
    if (until == "stable") {
        std::uint64_t seen = view.snapshot.version;
        auto quiet_since = Clock::now();
        const auto quiet_needed = std::chrono::milliseconds(stable_ms);
        while (true) {
            const auto quiet_for = Clock::now() - quiet_since;
            if (quiet_for >= quiet_needed) return answer(true, seen);
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                quiet_needed - quiet_for + std::chrono::milliseconds(1));
            if (remaining().count() <= 0) return answer(false, mirror_.version());
            if (!next_frame(seen, left)) continue;  // quiet so far: check the time again
            auto changes = mirror_.changes_since(seen);
            if (!touching(changes, screen_region).empty() || changes.full)
                quiet_since = Clock::now();
            seen = changes.version;
        }
    }
    // image, text, gone: look at each new frame (the latest one, after a slow look).
    const bool want_gone = until == "gone";
    spec.field = "";
    while (true) {
        auto found = find_on(*analysis_, view, spec);
        if (found.empty() == want_gone) {
            json out = answer(true, view.snapshot.version);
            if (!found.empty()) out["match"] = found_json(found.front(), !spec.image);
            return out;
        }
        const std::uint64_t seen = view.snapshot.version;
        while (true) {
            if (!next_frame(seen, forever)) return answer(false, mirror_.version());
            auto changes = mirror_.changes_since(seen);
            if (changes.full || !touching(changes, screen_region).empty()) break;
        }
        view = screen_view(false);
    }
}

// ---- targets of actions ----

Sandbox::TargetSpecs Sandbox::read_targets(const std::vector<input::Action>& actions,
                                           const std::vector<std::string>& fields) {
    TargetSpecs out(actions.size());
    for (std::size_t i = 0; i < actions.size(); ++i) {
        const input::Target* target = input::target_of(actions[i]);
        if (!target) continue;
        const std::string field = join_field(i < fields.size() ? fields[i] : "", "target");
        std::set<std::string> allowed = kSeekFields;
        allowed.insert({"index", "offset", "timeout_ms"});
        allowed.erase("max_results");
        json object = json::parse(target->json);
        Body b(object, field, allowed);
        auto spec = std::make_shared<TargetSpec>();
        spec->field = field;
        read_seek(b, *spec, true);
        spec->index = b.integer("index", 0, 99, 0);
        spec->search.max_results = spec->index + 1;
        if (const json* offset = b.get("offset")) {
            if (!offset->is_array() || offset->size() != 2 || !(*offset)[0].is_number_integer() ||
                !(*offset)[1].is_number_integer())
                throw bad_request(b.field("offset"), "expected [dx, dy] in whole pixels");
            spec->offset = {(*offset)[0].get<int>(), (*offset)[1].get<int>()};
        }
        spec->timeout_ms = b.integer("timeout_ms", 0, kMaxTargetWaitMs, kDefaultTargetWaitMs);
        out[i] = std::move(spec);
    }
    return out;
}

nlohmann::json Sandbox::resolve_target(input::Action& action, const TargetSpec& spec) {
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::milliseconds(spec.timeout_ms);
    WaitSlot slot(*analysis_);
    auto view = screen_view(true);
    while (true) {
        auto found = find_on(*analysis_, view, spec);
        if (found.size() > std::size_t(spec.index)) {
            const Found& hit = found[std::size_t(spec.index)];
            input::Point point{hit.box.x + hit.box.width / 2 + spec.offset.x,
                               hit.box.y + hit.box.height / 2 + spec.offset.y};
            if (point.x < 0 || point.y < 0 || point.x >= view.width() || point.y >= view.height())
                throw bad_request(join_field(spec.field, "offset"),
                                  "the point it gives (" + std::to_string(point.x) + "," +
                                      std::to_string(point.y) + ") is off the screen");
            if (scaler_) point = scaler_->to_screen(point, spec.field);
            input::aim(action, point);
            json match = found_json(hit, !spec.image);
            match["elapsed_ms"] = ms_since(start);
            return match;
        }
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        const std::uint64_t seen = view.snapshot.version;
        bool changed = left.count() > 0 && mirror_.wait_for_change(seen, kNoCursorWake, left);
        if (mirror_.closed())
            throw ApiError(409, "conflict", "the sandbox ended while looking for the target");
        if (!changed) {
            const std::string what = spec.image ? std::string("the image")
                                                : "the text " + input::quote_for_error(spec.text);
            throw ApiError(422, "target_not_found",
                           spec.field + ": " + what + " was not on the screen" +
                               (spec.index ? " " + std::to_string(spec.index + 1) + " times" : "") +
                               " within " + std::to_string(spec.timeout_ms) +
                               " ms (actions before it have run)",
                           spec.field);
        }
        view = screen_view(false);
    }
}

}  // namespace deskbox::server
