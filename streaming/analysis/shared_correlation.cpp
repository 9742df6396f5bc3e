#include "streaming/analysis/shared_correlation.hpp"

#include <stdexcept>

#include <opencv2/imgproc.hpp>

namespace deskbox::analysis {

namespace {

// Below this (in gray levels, summed over the window) there is no pattern to correlate with:
// matchTemplate's NaN, and noise that would correlate with anything.
constexpr double kMinNorm = 1.0;

}  // namespace

SharedCorrelation::SharedCorrelation(const cv::Mat& area, cv::Size templ)
    : area_(area.size()), templ_(templ) {
    if (area.type() != CV_8UC1 || templ.width < 1 || templ.height < 1 || templ.width > area.cols ||
        templ.height > area.rows)
        throw std::invalid_argument("SharedCorrelation: gray area and a template that fits");
    // Placements keep the template inside the area, so a circular correlation of the area's own
    // size never wraps where it is read: no padding. The area's mean is taken out (a zero-mean
    // template ignores it) to keep float rounding small beside the numerators.
    cv::Mat pixels;
    area.convertTo(pixels, CV_32F);
    pixels -= cv::mean(pixels)[0];
    cv::dft(pixels, spectrum_, 0, area.rows);

    cv::Mat sum, square_sum;
    cv::integral(area, sum, square_sum, CV_64F, CV_64F);
    const cv::Size placements(area.cols - templ.width + 1, area.rows - templ.height + 1);
    auto window = [&](const cv::Mat& integral) {
        const cv::Rect at(0, 0, placements.width, placements.height);
        const cv::Point right(templ.width, 0), down(0, templ.height);
        return cv::Mat(integral(at + right + down) - integral(at + right) - integral(at + down) +
                       integral(at));
    };
    const double n = double(templ.area());
    cv::Mat s = window(sum), q = window(square_sum);
    cv::Mat deviations = q - s.mul(s) / n;
    cv::max(deviations, 0, deviations);
    cv::sqrt(deviations, deviations);
    deviations.convertTo(window_norm_, CV_32F);
}

cv::Mat SharedCorrelation::scores(const cv::Mat& templ) const {
    if (templ.type() != CV_8UC1 || templ.size() != templ_)
        throw std::invalid_argument("SharedCorrelation: template of another size or type");
    const cv::Size placements(area_.width - templ_.width + 1, area_.height - templ_.height + 1);
    cv::Mat zero_mean;
    templ.convertTo(zero_mean, CV_32F);
    zero_mean -= cv::mean(zero_mean)[0];
    const double templ_norm = cv::norm(zero_mean);
    if (templ_norm < kMinNorm) return cv::Mat(placements, CV_32F, cv::Scalar(-1));

    cv::Mat padded = cv::Mat::zeros(area_, CV_32F);
    zero_mean.copyTo(padded(cv::Rect({0, 0}, templ_)));
    cv::Mat templ_spectrum, product, correlation;
    cv::dft(padded, templ_spectrum, 0, templ_.height);
    cv::mulSpectrums(spectrum_, templ_spectrum, product, 0, /*conjB=*/true);
    cv::idft(product, correlation, cv::DFT_SCALE | cv::DFT_REAL_OUTPUT, area_.height);

    cv::Mat out = correlation(cv::Rect({0, 0}, placements)).clone();
    out /= window_norm_ * templ_norm;
    out.setTo(-1, window_norm_ < kMinNorm);
    cv::min(out, 1, out);
    cv::max(out, -1, out);
    return out;
}

}  // namespace deskbox::analysis
