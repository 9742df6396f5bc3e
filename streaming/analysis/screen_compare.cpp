#include "streaming/analysis/screen_compare.hpp"

#include <algorithm>
#include <cmath>

#include <opencv2/imgproc.hpp>
#include <opencv2/quality/qualityssim.hpp>

#include "streaming/analysis/cv_view.hpp"

namespace deskbox::analysis {

CompareResult compare_images(const ImageView& current, const ImageView& baseline,
                             const CompareOptions& options) {
    if (current.width != baseline.width || current.height != baseline.height)
        throw ParameterError(
            "baseline", "the baseline is " + std::to_string(baseline.width) + "x" +
                            std::to_string(baseline.height) + "; the image compared is " +
                            std::to_string(current.width) + "x" + std::to_string(current.height));
    if (options.tolerance < 0 || options.tolerance > 255)
        throw ParameterError("tolerance", "expected 0 to 255");
    const streaming::Rect whole{0, 0, current.width, current.height};
    for (const auto& m : options.mask)
        if (m.empty() || intersect(m, whole) != m)
            throw ParameterError("mask", "each rect must lie on the " +
                                             std::to_string(current.width) + "x" +
                                             std::to_string(current.height) + " image");
    cv::Mat a, b;
    cv::cvtColor(as_mat(current), a, cv::COLOR_BGRA2BGR);
    cv::cvtColor(as_mat(baseline), b, cv::COLOR_BGRA2BGR);
    // Masked areas count as equal everywhere: in the scores as well as in the boxes.
    for (const auto& m : options.mask) b(as_cv(m)).copyTo(a(as_cv(m)));

    cv::Mat difference, per_pixel, changed;
    cv::absdiff(a, b, difference);
    cv::Mat planes[3];
    cv::split(difference, planes);
    per_pixel = cv::max(cv::max(planes[0], planes[1]), planes[2]);
    cv::threshold(per_pixel, changed, options.tolerance, 255, cv::THRESH_BINARY);

    CompareResult result;
    result.changed_pixels = std::uint64_t(cv::countNonZero(changed));
    result.changed_ratio = double(result.changed_pixels) / double(whole.area());
    result.identical = result.changed_pixels == 0;
    if (cv::countNonZero(per_pixel) == 0) {
        result.ssim = 1;
    } else {
        cv::Scalar ssim = cv::quality::QualitySSIM::compute(a, b, cv::noArray());
        result.ssim = (ssim[0] + ssim[1] + ssim[2]) / 3;
        result.psnr = cv::PSNR(a, b);
    }

    if (result.changed_pixels) {
        // Group nearby changed pixels, then box each group tightly by its own pixels.
        cv::Mat grouped, labels;
        const int gap = std::max(1, options.merge_gap);
        cv::dilate(changed, grouped,
                   cv::getStructuringElement(cv::MORPH_RECT, {2 * gap + 1, 2 * gap + 1}));
        const int groups = cv::connectedComponents(grouped, labels, 8, CV_32S);
        std::vector<streaming::Rect> boxes(std::size_t(std::max(groups, 1)));
        std::vector<cv::Point> points;
        cv::findNonZero(changed, points);
        for (const auto& p : points) {
            auto& box = boxes[std::size_t(labels.at<int>(p))];
            box = bounding(box, streaming::Rect{p.x, p.y, 1, 1});
        }
        for (const auto& box : boxes)
            if (!box.empty()) result.changed.push_back(box);
        std::sort(result.changed.begin(), result.changed.end(),
                  [](const auto& l, const auto& r) { return l.area() > r.area(); });
        if (result.changed.size() > options.max_boxes) {
            streaming::Rect all;
            for (const auto& box : result.changed) all = bounding(all, box);
            result.changed = {all};
        }
    }

    if (options.diff_image) {
        cv::Mat shown;
        cv::cvtColor(a, shown, cv::COLOR_BGR2GRAY);
        shown = shown / 3 + 40;
        cv::Mat bgrx;
        cv::cvtColor(shown, bgrx, cv::COLOR_GRAY2BGRA);
        bgrx.setTo(cv::Scalar(0, 0, 255, 255), changed);
        for (const auto& box : result.changed)
            cv::rectangle(bgrx, as_cv(box), cv::Scalar(0, 0, 255, 255), 1);
        result.diff_png = encode_png({bgrx.data, bgrx.cols, bgrx.rows, std::size_t(bgrx.step)});
    }
    return result;
}

}  // namespace deskbox::analysis
