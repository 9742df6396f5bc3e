// A deterministic, realistically busy desktop image for the streaming benchmarks.
#pragma once

#include <opencv2/core.hpp>

namespace deskbox::bench {

// BGRX (CV_8UC4, X = 0 as XShm delivers it): a gradient wallpaper, a top panel, overlapping
// windows full of anti-aliased text, buttons, a photo-like patch and a noise patch (video).
cv::Mat make_busy_screen(int width, int height, unsigned seed = 1);

}  // namespace deskbox::bench
