// Still-image encoders for screenshots: PNG, JPEG and WebP from BGRX pixels, with optional crop,
// scaling and cursor compositing. JPEG and scaling by OpenCV; PNG by our writer on libdeflate
// and WebP by libwebp, each about 2-4x less CPU than OpenCV's (bench/streaming/encode_bench).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "streaming/frame_mirror.hpp"
#include "streaming/types.hpp"

namespace deskbox::streaming {

enum class ImageFormat { png, jpeg, webp };

// "png", "jpeg" (or "jpg"), "webp"; anything else is a ParameterError on "format".
ImageFormat parse_image_format(std::string_view name);
std::string_view format_name(ImageFormat format);
std::string_view content_type(ImageFormat format);  // "image/png", ...

inline constexpr int kDefaultQuality = 80;
inline constexpr int kDefaultPngCompression = 1;  // zlib level: screenshots must be fast
inline constexpr int kMaxOutputDimension = 8192;

struct EncodeOptions {
    ImageFormat format = ImageFormat::png;
    std::optional<int> quality;          // jpeg, webp: 1..100 (default 80); refused for png
    std::optional<int> png_compression;  // png: zlib level 0..9 (default 1); refused otherwise
    // Output size, 1..8192 each. One given: the other follows the aspect ratio. Neither: the
    // source (or region) size. Downscaling averages (exact integer factors by area, 2x and
    // more by a Gaussian pyramid, the rest under 2x bilinear); upscaling is bilinear.
    std::optional<int> width;
    std::optional<int> height;
    std::optional<Rect> region;     // crop, in source pixels, applied before scaling
    bool composite_cursor = false;  // draw the pointer (when one is known) into the image
};

struct EncodedImage {
    std::vector<std::uint8_t> bytes;
    std::string content_type;
    int width = 0;  // of the encoded image
    int height = 0;
};

// The output size `options` ask for from a width x height source (after the crop); throws
// ParameterError like encode_image would. For callers that want to check before encoding.
std::pair<int, int> output_size(int source_width, int source_height, const EncodeOptions& options);

// Throws ParameterError naming the bad option ("format", "quality", "png_compression",
// "width", "height", "region"), or "image" for an empty source; std::runtime_error if the codec
// fails.
EncodedImage encode_image(const ImageView& image, const EncodeOptions& options,
                          const CursorState* cursor = nullptr);
// The snapshot's frame (and its cursor, if options.composite_cursor).
EncodedImage encode_image(const FrameSnapshot& snapshot, const EncodeOptions& options);

}  // namespace deskbox::streaming
