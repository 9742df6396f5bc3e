// Images clients send for screen analysis (templates, baselines): decoded PNGs, 4 bytes per
// pixel B, G, R, A. Pixels with alpha below 128 are "transparent": template matching leaves
// them out.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "streaming/types.hpp"

namespace deskbox::analysis {

using streaming::ImageView;
using streaming::ParameterError;

struct Picture {
    int width = 0;
    int height = 0;
    std::vector<std::uint8_t> bgra;  // rows tightly packed
    bool has_transparency = false;   // some pixel's alpha is below 128

    std::size_t stride() const { return static_cast<std::size_t>(width) * 4; }
    // The pixels as a frame-like view (the 4th byte is alpha, which ImageView ignores).
    ImageView view() const { return {bgra.data(), width, height, stride()}; }
};

inline constexpr int kMaxPictureDimension = 8192;

// A PNG, or base64 of one (an optional "data:image/png;base64," prefix is accepted). Throws
// ParameterError naming `field` if it is not base64, not a PNG, or larger than 8192 a side.
Picture decode_png_picture(std::string_view bytes, const std::string& field);
Picture decode_base64_picture(std::string_view text, const std::string& field);

// An owned BGRX copy of `image` scaled to width x height (area averaging when shrinking).
struct OwnedImage {
    int width = 0;
    int height = 0;
    std::vector<std::uint8_t> bgrx;
    ImageView view() const { return {bgrx.data(), width, height, std::size_t(width) * 4}; }
};
OwnedImage scale_image(const ImageView& image, int width, int height);

// PNG bytes of BGRX or BGRA pixels (alpha ignored), for diff images.
std::vector<std::uint8_t> encode_png(const ImageView& image);

}  // namespace deskbox::analysis

namespace deskbox::analysis {

// The part of `image` inside `rect` (which must lie on it), without copying.
inline ImageView crop(const ImageView& image, const streaming::Rect& rect) {
    return {image.row(rect.y) + std::size_t(rect.x) * 4, rect.width, rect.height, image.stride};
}

}  // namespace deskbox::analysis
