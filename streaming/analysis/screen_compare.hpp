// Visual assertions: the screen (or a region of it) against a baseline image. Scores by SSIM
// (OpenCV's quality module) and PSNR, and the boxes of what changed, each the tight bounding
// box of changed pixels that lie close together.
#pragma once

#include <optional>
#include <vector>

#include "streaming/analysis/picture.hpp"

namespace deskbox::analysis {

struct CompareOptions {
    std::vector<streaming::Rect> mask;  // ignored areas, in the compared image's pixels
    int tolerance = 0;  // 0..255: a pixel changed when a channel differs by more than this
    int merge_gap = 8;  // changed pixels this close (px) share a box
    bool diff_image = false;
    std::size_t max_boxes = 100;  // past this the boxes are merged into their bounding box
};

struct CompareResult {
    bool identical = false;      // no pixel outside the mask differs by more than the tolerance
    double ssim = 1;             // mean over B, G, R
    std::optional<double> psnr;  // dB; none when the images are equal
    std::uint64_t changed_pixels = 0;
    double changed_ratio = 0;
    std::vector<streaming::Rect> changed;  // largest first
    std::vector<std::uint8_t> diff_png;    // the current image dimmed, changes in red
};

// `current` and `baseline` must have the same size (ParameterError "baseline" otherwise); mask
// rects must lie on the image (ParameterError "mask").
CompareResult compare_images(const ImageView& current, const ImageView& baseline,
                             const CompareOptions& options);

}  // namespace deskbox::analysis
