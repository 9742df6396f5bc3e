#include "streaming/analysis/image_search.hpp"

#include <algorithm>
#include <cmath>

#include <opencv2/imgproc.hpp>

#include "streaming/analysis/cv_view.hpp"

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

std::vector<ImageMatch> merge(std::vector<ImageMatch> all, int max_results) {
    std::sort(all.begin(), all.end(),
              [](const ImageMatch& a, const ImageMatch& b) { return a.score > b.score; });
    std::vector<ImageMatch> kept;
    for (const auto& m : all) {
        bool overlaps = std::any_of(kept.begin(), kept.end(), [&](const ImageMatch& k) {
            return intersect(k.box, m.box).area() * 2 > std::min(k.box.area(), m.box.area());
        });
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

std::vector<ImageMatch> find_image(const ImageView& screen, const Picture& templ,
                                   const ImageSearch& search) {
    check(search, screen);
    Area area = search_area(screen, search);
    auto templates = prepared_scales(templ, search, area.pixels.size());
    std::vector<ImageMatch> all;
    // Shrunk copies of the area, made once for all scales that use them.
    std::vector<cv::Mat> levels{area.pixels};
    for (const auto& t : templates) {
        int level = 0;
        while (level < kMaxLevel &&
               (std::min(t.image.cols, t.image.rows) >> (level + 1)) >= kMinCoarseSide)
            ++level;
        if (level == 0 || t.flat) {
            cv::Mat scores = score_map(area.pixels, t);
            for (const auto& peak : peaks(scores, t.image.size(), search.threshold, 0,
                                          std::size_t(search.max_results)))
                all.push_back(to_match(area, peak.at, t, peak.score));
            continue;
        }
        while (int(levels.size()) <= level) {
            cv::Mat smaller;
            cv::pyrDown(levels.back(), smaller);
            levels.push_back(std::move(smaller));
        }
        // The coarse pass always compares luminance: it only proposes spots.
        const cv::Mat& coarse_area = levels[level];
        cv::Mat coarse_gray;
        if (coarse_area.channels() == 3)
            cv::cvtColor(coarse_area, coarse_gray, cv::COLOR_BGR2GRAY);
        else
            coarse_gray = coarse_area;
        Prepared small;
        cv::Mat small_image = t.image;
        for (int i = 0; i < level; ++i) cv::pyrDown(small_image, small_image);
        if (small_image.channels() == 3)
            cv::cvtColor(small_image, small.image, cv::COLOR_BGR2GRAY);
        else
            small.image = small_image;
        if (!t.mask.empty()) {
            cv::resize(t.mask, small.mask, small.image.size(), 0, 0, cv::INTER_AREA);
            cv::threshold(small.mask, small.mask, 127, 255, cv::THRESH_BINARY);
            if (cv::countNonZero(small.mask) == 0) small.mask = cv::Mat();
        }
        if (small.image.cols > coarse_gray.cols || small.image.rows > coarse_gray.rows) continue;
        cv::Mat coarse = score_map(coarse_gray, small);
        const double coarse_threshold = search.threshold - kCoarseSlackPerLevel * level;
        const int step = 1 << level;
        for (const auto& peak : peaks(coarse, small.image.size(), coarse_threshold, kAlwaysRefined,
                                      std::size_t(4 * search.max_results + 16))) {
            // Full resolution, around the spot: the shift a shrink can hide, either way.
            cv::Rect window(peak.at.x * step - step - 1, peak.at.y * step - step - 1,
                            t.image.cols + 2 * step + 2, t.image.rows + 2 * step + 2);
            window &= cv::Rect(0, 0, area.pixels.cols, area.pixels.rows);
            if (window.width < t.image.cols || window.height < t.image.rows) continue;
            cv::Mat fine = score_map(area.pixels(window), t);
            double best = 0;
            cv::Point at;
            cv::minMaxLoc(fine, nullptr, &best, nullptr, &at);
            if (best >= search.threshold) all.push_back(to_match(area, at + window.tl(), t, best));
        }
    }
    return merge(std::move(all), search.max_results);
}

}  // namespace deskbox::analysis
