#include "streaming/analysis/shared_correlation.hpp"

#include <algorithm>
#include <cmath>
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

    // Each window's sums from the integral images, in one pass (matchTemplate's own way):
    // integer sums, squared sums in double (float would lose the deviation to cancellation).
    cv::Mat sum, square_sum;
    cv::integral(area, sum, square_sum, CV_32S, CV_64F);
    const int w = templ.width, h = templ.height;
    const double n = double(templ.area());
    window_norm_.create(area.rows - h + 1, area.cols - w + 1, CV_32F);
    for (int y = 0; y < window_norm_.rows; ++y) {
        const int* s0 = sum.ptr<int>(y);
        const int* s1 = sum.ptr<int>(y + h);
        const double* q0 = square_sum.ptr<double>(y);
        const double* q1 = square_sum.ptr<double>(y + h);
        float* out = window_norm_.ptr<float>(y);
        for (int x = 0; x < window_norm_.cols; ++x) {
            const double s = double(s1[x + w] - s1[x] - s0[x + w] + s0[x]);
            const double q = q1[x + w] - q1[x] - q0[x + w] + q0[x];
            out[x] = float(std::sqrt(std::max(0.0, q - s * s / n)));
        }
    }
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
