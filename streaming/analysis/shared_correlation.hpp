// Normalised correlation (OpenCV's TM_CCOEFF_NORMED) of several templates of one size over one
// area, sharing what does not depend on the template: the area's spectrum and the contrast of
// every window. The coarse level of the image search matches one template per pixel phase
// (four or more); matchTemplate would transform the area and sum its windows again for each.
#pragma once

#include <opencv2/core.hpp>

namespace deskbox::analysis {

class SharedCorrelation {
  public:
    // `area`: 8-bit, one channel; `templ`: the size every template will have (fits the area).
    SharedCorrelation(const cv::Mat& area, cv::Size templ);

    // CV_32F, (area - templ + 1) placements, scores in -1..1 as matchTemplate's; -1 where the
    // area has no contrast under the template or the template has none (the score is undefined).
    // `templ`: 8-bit, one channel, the size given at construction. Safe to call concurrently.
    cv::Mat scores(const cv::Mat& templ) const;

  private:
    cv::Size area_;
    cv::Size templ_;
    cv::Mat spectrum_;     // the area's, less its mean (CV_32F, packed)
    cv::Mat window_norm_;  // per placement: the root of the summed squared deviations
};

}  // namespace deskbox::analysis
