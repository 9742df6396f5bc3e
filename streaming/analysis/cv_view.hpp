// Inside streaming/analysis only: OpenCV headers over our pixel views, without copies.
#pragma once

#include <opencv2/core.hpp>

#include "streaming/types.hpp"

namespace deskbox::analysis {

// A read-only 4-channel Mat over `image` (BGRX or BGRA). OpenCV never writes through it here.
inline cv::Mat as_mat(const streaming::ImageView& image) {
    return cv::Mat(image.height, image.width, CV_8UC4, const_cast<std::uint8_t*>(image.data),
                   image.stride);
}

inline cv::Rect as_cv(const streaming::Rect& r) {
    return {r.x, r.y, r.width, r.height};
}
inline streaming::Rect from_cv(const cv::Rect& r) {
    return {r.x, r.y, r.width, r.height};
}

}  // namespace deskbox::analysis
