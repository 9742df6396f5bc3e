// Finding a template image on the screen (OpenCV template matching, normalised correlation).
//
// Fast by a coarse-to-fine search: the screen and the template are shrunk by 2^L (L so that the
// template keeps at least 12 pixels a side, at most 8x), matched there, and every promising spot
// is then matched again at full resolution in a small window around it. The score reported is
// always the full-resolution one. bench/server/analysis_bench compares it with matching the
// whole screenshot at full size, what pyautogui-style locators do.
#pragma once

#include <optional>
#include <vector>

#include "streaming/analysis/picture.hpp"

namespace deskbox::analysis {

struct ImageSearch {
    double threshold = 0.9;                 // 0..1: normalised correlation a match needs
    int max_results = 10;                   // 1..100
    std::vector<double> scales{1.0};        // the template is tried at each size (0.25..4)
    bool grayscale = false;                 // compare luminance only (colour-blind, tolerant)
    std::optional<streaming::Rect> region;  // where to look (on the screen); default everywhere
};

struct ImageMatch {
    streaming::Rect box;  // on the screen
    double score = 0;     // 0..1
    double scale = 1;
};

// Best score first, overlapping matches merged (the better one stays). Transparent template
// pixels are left out. Throws ParameterError: "image" (larger than the area searched at every
// scale), "threshold", "max_results", "scales", "region".
std::vector<ImageMatch> find_image(const ImageView& screen, const Picture& templ,
                                   const ImageSearch& search);

// The same search, exhaustively at full resolution (what the coarse-to-fine search is checked
// and benchmarked against).
std::vector<ImageMatch> find_image_exhaustive(const ImageView& screen, const Picture& templ,
                                              const ImageSearch& search);

}  // namespace deskbox::analysis
