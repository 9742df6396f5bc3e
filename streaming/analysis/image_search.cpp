#include "streaming/analysis/image_search.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <optional>

#include <opencv2/core/utility.hpp>
#include <opencv2/imgproc.hpp>

#include "streaming/analysis/cv_view.hpp"
#include "streaming/analysis/shared_correlation.hpp"

namespace deskbox::analysis {

namespace {

constexpr int kMinCoarseSide = 12;  // template pixels a side the coarse level keeps
constexpr int kMaxLevel = 3;
// The coarse level sees a blurred, shifted copy of the template; a true match scores lower
// there, so it lets through spots this far below the threshold, and always its best few.
constexpr double kCoarseSlackPerLevel = 0.2;
constexpr int kAlwaysRefined = 4;

void check(const ImageSearch& s, const ImageView& screen) {
    if (!(s.threshold >= 0 && s.threshold <= 1))
        throw ParameterError("threshold", "expected a number from 0 to 1");
    if (s.max_results < 1 || s.max_results > 100)
        throw ParameterError("max_results", "expected 1 to 100");
    if (s.scales.empty() || s.scales.size() > 8)
        throw ParameterError("scales", "expected 1 to 8 scales");
    for (double scale : s.scales)
        if (!(scale >= 0.25 && scale <= 4))
            throw ParameterError("scales", "each scale must be from 0.25 to 4");
    if (s.region && (s.region->empty() ||
                     intersect(*s.region, {0, 0, screen.width, screen.height}) != *s.region))
        throw ParameterError("region", "must lie on the " + std::to_string(screen.width) + "x" +
                                           std::to_string(screen.height) + " screen");
}

// One template at one scale, ready to match: colour or gray, with its mask (empty: opaque).
struct Prepared {
    cv::Mat image;
    cv::Mat mask;
    bool flat = false;  // no contrast: correlation is undefined, compare differences instead
    double scale = 1;
};

Prepared prepare(const Picture& templ, double scale, bool grayscale) {
    cv::Mat bgra(templ.height, templ.width, CV_8UC4, const_cast<std::uint8_t*>(templ.bgra.data()));
    cv::Mat sized = bgra;
    if (scale != 1) {
        cv::Size size(std::max(1, int(std::lround(templ.width * scale))),
                      std::max(1, int(std::lround(templ.height * scale))));
        cv::resize(bgra, sized, size, 0, 0, scale < 1 ? cv::INTER_AREA : cv::INTER_LINEAR);
    }
    Prepared p;
    p.scale = scale;
    cv::cvtColor(sized, p.image, grayscale ? cv::COLOR_BGRA2GRAY : cv::COLOR_BGRA2BGR);
    if (templ.has_transparency) {
        cv::extractChannel(sized, p.mask, 3);
        cv::threshold(p.mask, p.mask, 127, 255, cv::THRESH_BINARY);
    }
    cv::Scalar mean, stddev;
    cv::meanStdDev(p.image, mean, stddev, p.mask);
    double spread = 0;
    for (int c = 0; c < p.image.channels(); ++c) spread = std::max(spread, stddev[c]);
    p.flat = spread < 1.0;
    return p;
}

// Scores in 0..1, higher is better, for every placement of `t` in `area`.
cv::Mat score_map(const cv::Mat& area, const Prepared& t) {
    cv::Mat result;
    if (t.flat) {
        // A one-colour template: 1 - RMS difference / 255.
        cv::matchTemplate(area, t.image, result, cv::TM_SQDIFF, t.mask);
        const double n =
            std::max(1, t.mask.empty() ? t.image.rows * t.image.cols : cv::countNonZero(t.mask)) *
            double(t.image.channels());
        result.forEach<float>([n](float& v, const int*) {
            v = float(1.0 - std::sqrt(std::max(0.0, double(v)) / n) / 255.0);
        });
        return result;
    }
    cv::matchTemplate(area, t.image, result, cv::TM_CCOEFF_NORMED, t.mask);
    // Where the screen has no contrast under the template the correlation is undefined: OpenCV
    // leaves NaN, or +-inf with a mask. No match there.
    cv::patchNaNs(result, -1);
    result.setTo(-1, (result > 1.001) | (result < -1.001));
    return result;
}

struct Peak {
    cv::Point at;
    double score;
};

// The best placements, each at least one template away from the others, best first.
std::vector<Peak> peaks(cv::Mat& scores, cv::Size templ, double threshold, std::size_t at_least,
                        std::size_t at_most) {
    std::vector<Peak> out;
    while (out.size() < at_most) {
        double best = 0;
        cv::Point at;
        cv::minMaxLoc(scores, nullptr, &best, nullptr, &at);
        if (best < threshold && out.size() >= at_least) break;
        if (best <= -1) break;
        out.push_back({at, best});
        cv::Rect around(at.x - templ.width / 2, at.y - templ.height / 2, templ.width, templ.height);
        scores(around & cv::Rect(0, 0, scores.cols, scores.rows)).setTo(-1);
    }
    return out;
}

// Two matches are one if they share more than half of the smaller box.
bool overlapping(const streaming::Rect& a, const streaming::Rect& b) {
    return intersect(a, b).area() * 2 > std::min(a.area(), b.area());
}

std::vector<ImageMatch> merge(std::vector<ImageMatch> all, int max_results) {
    std::sort(all.begin(), all.end(),
              [](const ImageMatch& a, const ImageMatch& b) { return a.score > b.score; });
    std::vector<ImageMatch> kept;
    for (const auto& m : all) {
        bool overlaps = std::any_of(kept.begin(), kept.end(),
                                    [&](const ImageMatch& k) { return overlapping(k.box, m.box); });
        if (!overlaps) kept.push_back(m);
        if (int(kept.size()) == max_results) break;
    }
    return kept;
}

struct Area {
    cv::Mat pixels;  // colour or gray, as the templates
    cv::Point origin;
};

Area search_area(const ImageView& screen, const ImageSearch& search) {
    const streaming::Rect r =
        search.region.value_or(streaming::Rect{0, 0, screen.width, screen.height});
    Area a;
    a.origin = {r.x, r.y};
    cv::cvtColor(as_mat(crop(screen, r)), a.pixels,
                 search.grayscale ? cv::COLOR_BGRA2GRAY : cv::COLOR_BGRA2BGR);
    return a;
}

std::vector<Prepared> prepared_scales(const Picture& templ, const ImageSearch& search,
                                      const cv::Size& area) {
    std::vector<Prepared> out;
    for (double scale : search.scales) {
        auto p = prepare(templ, scale, search.grayscale);
        if (p.image.cols <= area.width && p.image.rows <= area.height) out.push_back(std::move(p));
    }
    if (out.empty())
        throw ParameterError(
            "image", "the template (" + std::to_string(templ.width) + "x" +
                         std::to_string(templ.height) + ") is larger than the area searched (" +
                         std::to_string(area.width) + "x" + std::to_string(area.height) + ")");
    return out;
}

ImageMatch to_match(const Area& area, cv::Point at, const Prepared& t, double score) {
    return {{area.origin.x + at.x, area.origin.y + at.y, t.image.cols, t.image.rows},
            std::clamp(score, 0.0, 1.0),
            t.scale};
}

}  // namespace

std::vector<ImageMatch> find_image_exhaustive(const ImageView& screen, const Picture& templ,
                                              const ImageSearch& search) {
    check(search, screen);
    Area area = search_area(screen, search);
    std::vector<ImageMatch> all;
    for (const auto& t : prepared_scales(templ, search, area.pixels.size())) {
        cv::Mat scores = score_map(area.pixels, t);
        for (const auto& peak :
             peaks(scores, t.image.size(), search.threshold, 0, std::size_t(search.max_results)))
            all.push_back(to_match(area, peak.at, t, peak.score));
    }
    return merge(std::move(all), search.max_results);
}

namespace {

// The best placement of `t` inside `window` of `area` (`window` clipped to the area); nullopt
// if the template does not fit there.
std::optional<Peak> best_in(const cv::Mat& area, cv::Rect window, const Prepared& t) {
    window &= cv::Rect(0, 0, area.cols, area.rows);
    if (window.width < t.image.cols || window.height < t.image.rows) return std::nullopt;
    cv::Mat scores = score_map(area(window), t);
    double best = 0;
    cv::Point at;
    cv::minMaxLoc(scores, nullptr, &best, nullptr, &at);
    return Peak{at + window.tl(), best};
}

// `t` shrunk by 2^level (pyrDown, as the area's levels), with its mask.
Prepared shrunk(const Prepared& t, int level) {
    Prepared out;
    out.image = t.image;
    for (int i = 0; i < level; ++i) cv::pyrDown(out.image, out.image);
    if (!t.mask.empty()) {
        cv::resize(t.mask, out.mask, out.image.size(), 0, 0, cv::INTER_AREA);
        cv::threshold(out.mask, out.mask, 127, 255, cv::THRESH_BINARY);
        if (cv::countNonZero(out.mask) == 0) out.mask = cv::Mat();
    }
    out.scale = t.scale;
    return out;
}

// The coarse level is the screen shrunk by 2^level from its pixel 0. A template placed at an
// x or y that is not on that grid shrinks differently: its thin detail (text, one-pixel
// lines) blurs with another phase, and a perfect match scored below a hundred lookalikes (a
// title bar's gradient strip). So the template is shrunk once per phase, cropped so that its
// first kept pixel lands on the grid; phases 2 pixels apart leave at most 1 pixel of error,
// as little as the half level's own. Every phase keeps the same size, so they share the
// screen's side of the correlation.
struct PhaseTemplate {
    Prepared coarse;
    cv::Point dropped;  // template pixels cropped off at the left and the top
};

std::vector<PhaseTemplate> phase_templates(const Prepared& t, int level) {
    const int grid = 1 << level;
    const int most_dropped = grid - 2;
    const int w = (t.image.cols - most_dropped) / grid * grid;
    const int h = (t.image.rows - most_dropped) / grid * grid;
    std::vector<PhaseTemplate> out;
    if (w < grid || h < grid) return out;
    for (int py = 0; py < grid; py += 2)
        for (int px = 0; px < grid; px += 2) {
            const cv::Point dropped((grid - px) % grid, (grid - py) % grid);
            const cv::Rect keep(dropped.x, dropped.y, w, h);
            Prepared cropped;
            cropped.image = t.image(keep);
            if (!t.mask.empty()) cropped.mask = t.mask(keep);
            cropped.scale = t.scale;
            out.push_back({shrunk(cropped, level), dropped});
        }
    return out;
}

// Every phase matched on the coarse level; per placement the best score, and where the whole
// template's top-left corner would be on the full-size area.
struct CoarseScores {
    cv::Mat best;    // CV_32F, -1 where no phase fits
    cv::Mat phase;   // CV_32S: index into the phase templates
    cv::Size templ;  // the coarse template's size (for peak suppression)
};

CoarseScores coarse_scores(const cv::Mat& level_pixels, const std::vector<PhaseTemplate>& phases) {
    CoarseScores out;
    std::vector<cv::Mat> maps(phases.size());
    if (phases.empty()) return out;
    const Prepared& first = phases.front().coarse;
    if (first.image.cols > level_pixels.cols || first.image.rows > level_pixels.rows) return out;
    // Opaque templates share the screen's spectrum and window sums (one transform instead of
    // one per phase); masked ones need matchTemplate's masked formula.
    std::optional<SharedCorrelation> shared;
    if (first.mask.empty()) shared.emplace(level_pixels, first.image.size());
    // The phases are independent and OpenCV's matching uses little of a second core.
    cv::parallel_for_(cv::Range(0, int(phases.size())), [&](const cv::Range& range) {
        for (int i = range.start; i < range.end; ++i) {
            const Prepared& t = phases[std::size_t(i)].coarse;
            maps[std::size_t(i)] =
                t.mask.empty() && shared ? shared->scores(t.image) : score_map(level_pixels, t);
        }
    });
    cv::Size size(0, 0);
    for (std::size_t i = 0; i < maps.size(); ++i) {
        if (maps[i].empty()) continue;
        size.width = std::max(size.width, maps[i].cols);
        size.height = std::max(size.height, maps[i].rows);
        out.templ = phases[i].coarse.image.size();
    }
    out.best = cv::Mat(size, CV_32F, cv::Scalar(-1));
    out.phase = cv::Mat(size, CV_32S, cv::Scalar(0));
    for (std::size_t i = 0; i < maps.size(); ++i) {
        if (maps[i].empty()) continue;
        const cv::Rect roi(0, 0, maps[i].cols, maps[i].rows);
        cv::Mat better = maps[i] > out.best(roi);
        maps[i].copyTo(out.best(roi), better);
        out.phase(roi).setTo(int(i), better);
    }
    return out;
}

// Candidates are refined best coarse score first, but a later one may still refine higher, so
// all are tried, unless `wanted` distinct ones already scored a perfect 1 (to float rounding):
// nothing can beat those (a template cut from the screen, the usual case, ends after its first
// candidate).
class PerfectMatches {
  public:
    explicit PerfectMatches(int wanted) : wanted_(std::size_t(wanted)) {}
    bool settled() const { return settled_.load(std::memory_order_relaxed); }
    void offer(const ImageMatch& m) {
        if (m.score < kPerfectScore) return;
        std::lock_guard lock(mutex_);
        if (std::any_of(boxes_.begin(), boxes_.end(),
                        [&](const streaming::Rect& b) { return overlapping(b, m.box); }))
            return;
        boxes_.push_back(m.box);
        if (boxes_.size() >= wanted_) settled_ = true;
    }

  private:
    static constexpr double kPerfectScore = 1.0 - 1e-4;  // float rounding of an exact match
    std::size_t wanted_;
    std::mutex mutex_;
    std::vector<streaming::Rect> boxes_;
    std::atomic<bool> settled_{false};
};

// The deepest pyramid level where template `t` still keeps kMinCoarseSide pixels a side.
int pyramid_level(const Prepared& t) {
    int level = 0;
    while (level < kMaxLevel &&
           (std::min(t.image.cols, t.image.rows) >> (level + 1)) >= kMinCoarseSide)
        ++level;
    return level;
}

// What every template scale is searched in: the area's luminance (and its pyramid, grown as
// scales need deeper levels) and colour.
struct SearchArea {
    const ImageSearch& search;
    Area gray;
    cv::Mat bgrx;
    std::vector<cv::Mat> levels;

    const cv::Mat& level(int n) {
        while (int(levels.size()) <= n) {
            cv::Mat smaller;
            cv::pyrDown(levels.back(), smaller);
            levels.push_back(std::move(smaller));
        }
        return levels[std::size_t(n)];
    }
};

// Small or plain templates: the whole area at full size.
void find_at_full_size(const SearchArea& a, const Prepared& judge, std::vector<ImageMatch>& all) {
    Area area{a.gray.pixels, a.gray.origin};
    if (!a.search.grayscale) cv::cvtColor(a.bgrx, area.pixels, cv::COLOR_BGRA2BGR);
    cv::Mat scores = score_map(area.pixels, judge);
    for (const auto& peak : peaks(scores, judge.image.size(), a.search.threshold, 0,
                                  std::size_t(a.search.max_results)))
        all.push_back(to_match(area, peak.at, judge, peak.score));
}

// One template scale down the pyramid from the coarse level's spots: half size first (cheap,
// drops most spots), then full size, then colour.
class PyramidRefiner {
  public:
    PyramidRefiner(SearchArea& area, const Prepared& t, const Prepared& colour, int level)
        : a_(area),
          t_(t),
          colour_(colour),
          level_(level),
          phases_(phase_templates(t, level)),
          half_template_(level >= 2 ? shrunk(t, 1) : Prepared{}) {}

    // The spots on the coarse level that may be a match (first grows the pyramid to it: refine()
    // runs in parallel and only reads it).
    std::vector<Peak> candidates() {
        coarse_ = coarse_scores(a_.level(level_), phases_);
        if (coarse_.best.empty()) return {};
        const double threshold = a_.search.threshold - kCoarseSlackPerLevel * level_;
        return peaks(coarse_.best, coarse_.templ, threshold, kAlwaysRefined,
                     std::size_t(4 * a_.search.max_results + 16));
    }

    std::optional<ImageMatch> refine(const Peak& peak) const {
        const PhaseTemplate& phase = phases_[std::size_t(coarse_.phase.at<int>(peak.at))];
        cv::Point guess = peak.at * (1 << level_) - phase.dropped;
        int margin = (1 << level_) + 1;
        if (level_ >= 2) {
            auto half = best_in(a_.levels[1],
                                {guess.x / 2 - 2, guess.y / 2 - 2, half_template_.image.cols + 4,
                                 half_template_.image.rows + 4},
                                half_template_);
            if (!half || half->score < a_.search.threshold - kCoarseSlackPerLevel)
                return std::nullopt;
            guess = half->at * 2;
            margin = 2;
        }
        auto fine = best_in(a_.gray.pixels,
                            {guess.x - margin, guess.y - margin, t_.image.cols + 2 * margin,
                             t_.image.rows + 2 * margin},
                            t_);
        if (!fine) return std::nullopt;
        if (a_.search.grayscale) {
            if (fine->score < a_.search.threshold) return std::nullopt;
            return to_match(a_.gray, fine->at, t_, fine->score);
        }
        return judge_colour(*fine);
    }

  private:
    // Colour tells apart shapes that luminance confuses (a red and a green button).
    std::optional<ImageMatch> judge_colour(const Peak& fine) const {
        if (fine.score < a_.search.threshold - 0.1) return std::nullopt;
        cv::Rect window(fine.at.x - 1, fine.at.y - 1, t_.image.cols + 2, t_.image.rows + 2);
        window &= cv::Rect(0, 0, a_.bgrx.cols, a_.bgrx.rows);
        cv::Mat colour_window;
        cv::cvtColor(a_.bgrx(window), colour_window, cv::COLOR_BGRA2BGR);
        auto judged = best_in(colour_window, {0, 0, window.width, window.height}, colour_);
        if (!judged || judged->score < a_.search.threshold) return std::nullopt;
        return to_match(a_.gray, judged->at + window.tl(), colour_, judged->score);
    }

    SearchArea& a_;
    const Prepared& t_;
    const Prepared& colour_;
    int level_;
    std::vector<PhaseTemplate> phases_;
    Prepared half_template_;
    CoarseScores coarse_;
};

// The spots are independent, so they are refined in parallel; enough perfect matches end it.
void refine_in_parallel(const PyramidRefiner& refiner, const std::vector<Peak>& candidates,
                        int max_results, std::vector<ImageMatch>& all) {
    std::vector<std::optional<ImageMatch>> refined(candidates.size());
    PerfectMatches perfect(max_results);
    cv::parallel_for_(cv::Range(0, int(candidates.size())), [&](const cv::Range& range) {
        for (int i = range.start; i < range.end; ++i) {
            if (perfect.settled()) return;
            auto& match = refined[std::size_t(i)];
            match = refiner.refine(candidates[std::size_t(i)]);
            if (match) perfect.offer(*match);
        }
    });
    for (auto& match : refined)
        if (match) all.push_back(*match);
}

}  // namespace

std::vector<ImageMatch> find_image(const ImageView& screen, const Picture& templ,
                                   const ImageSearch& search) {
    check(search, screen);
    const streaming::Rect r =
        search.region.value_or(streaming::Rect{0, 0, screen.width, screen.height});
    SearchArea area{search, Area{cv::Mat(), {r.x, r.y}}, as_mat(crop(screen, r)), {}};
    // The search runs on luminance; colour (unless grayscale) only checks what it found.
    cv::cvtColor(area.bgrx, area.gray.pixels, cv::COLOR_BGRA2GRAY);
    area.levels.push_back(area.gray.pixels);
    ImageSearch luminance = search;
    luminance.grayscale = true;
    std::vector<ImageMatch> all;
    for (const auto& t : prepared_scales(templ, luminance, area.gray.pixels.size())) {
        const Prepared colour = search.grayscale ? Prepared{} : prepare(templ, t.scale, false);
        const int level = pyramid_level(t);
        if (level == 0 || t.flat) {
            find_at_full_size(area, search.grayscale ? t : colour, all);
            continue;
        }
        PyramidRefiner refiner(area, t, colour, level);
        const auto candidates = refiner.candidates();
        if (!candidates.empty()) refine_in_parallel(refiner, candidates, search.max_results, all);
    }
    return merge(std::move(all), search.max_results);
}

}  // namespace deskbox::analysis
