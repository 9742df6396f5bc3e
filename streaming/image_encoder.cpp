#include "streaming/image_encoder.hpp"

#include <cmath>
#include <stdexcept>

#include <webp/encode.h>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "streaming/png_writer.hpp"

namespace deskbox::streaming {
namespace {

// libwebp's speed/size knob, 0 (fastest) .. 6: screenshots must be fast.
constexpr int kWebpMethod = 0;

std::string range_error(int low, int high, int got) {
    return "must be " + std::to_string(low) + ".." + std::to_string(high) + ", got " +
           std::to_string(got);
}

// The other side of a one-sided resize, keeping the aspect ratio.
int follow_aspect(int given, int given_source, int other_source) {
    double exact = static_cast<double>(given) * other_source / given_source;
    return std::max(1, static_cast<int>(std::lround(exact)));
}

Rect source_area(const ImageView& image, const EncodeOptions& options) {
    Rect whole{0, 0, image.width, image.height};
    if (!options.region) return whole;
    const Rect& r = *options.region;
    if (r.empty()) throw ParameterError("region", "must not be empty, got " + to_string(r));
    if (!contains(whole, r))
        throw ParameterError("region", to_string(r) + " leaves the " + std::to_string(image.width) +
                                           "x" + std::to_string(image.height) + " image");
    return r;
}

void check_quality(const EncodeOptions& options) {
    if (options.format == ImageFormat::png) {
        if (options.quality)
            throw ParameterError("quality",
                                 "applies to jpeg and webp only (png is lossless; "
                                 "use png_compression)");
        if (options.png_compression &&
            (*options.png_compression < 0 || *options.png_compression > 9))
            throw ParameterError("png_compression", range_error(0, 9, *options.png_compression));
    } else {
        if (options.png_compression) throw ParameterError("png_compression", "applies to png only");
        if (options.quality && (*options.quality < 1 || *options.quality > 100))
            throw ParameterError("quality", range_error(1, 100, *options.quality));
    }
}

// Downscaling: INTER_AREA on exact integer factors (OpenCV's fast path); otherwise Gaussian-
// pyramid halving while 2x or more too big, then bilinear for the rest. OpenCV's general
// INTER_AREA costs 7-10x as much (1280x800 -> 1024x640: 18 ms vs 2.6 ms CPU on a loaded
// 2-core machine), too much for the screenshot path; under 2x bilinear stays within 34-39 dB
// PSNR of it on a busy screen, while above 2x plain bilinear drops to 26 dB (aliasing), which
// the pyramid avoids.
cv::Mat scale(const cv::Mat& source, cv::Size size) {
    cv::Mat out;
    bool enlarging = size.width >= source.cols && size.height >= source.rows;
    if (enlarging) {
        cv::resize(source, out, size, 0, 0, cv::INTER_LINEAR);
        return out;
    }
    if (source.cols % size.width == 0 && source.rows % size.height == 0) {
        cv::resize(source, out, size, 0, 0, cv::INTER_AREA);
        return out;
    }
    cv::Mat current = source;
    while (current.cols >= 2 * size.width && current.rows >= 2 * size.height) {
        cv::Mat half;
        cv::pyrDown(current, half);
        current = half;
    }
    // Only when the aspect ratio changes a lot can one axis still be 2x too big.
    bool still_large = current.cols >= 2 * size.width || current.rows >= 2 * size.height;
    cv::resize(current, out, size, 0, 0, still_large ? cv::INTER_AREA : cv::INTER_LINEAR);
    return out;
}

std::vector<std::uint8_t> encode_jpeg(const cv::Mat& bgrx, int quality) {
    // OpenCV's JPEG writer takes 4 channels and drops the 4th per row (libjpeg-turbo).
    std::vector<std::uint8_t> bytes;
    bool ok = false;
    try {
        ok = cv::imencode(".jpg", bgrx, bytes, {cv::IMWRITE_JPEG_QUALITY, quality});
    } catch (const cv::Exception& e) {
        throw std::runtime_error(std::string("jpeg encoding failed: ") + e.what());
    }
    if (!ok) throw std::runtime_error("jpeg encoding failed");
    return bytes;
}

// libwebp directly rather than through OpenCV, which neither reads BGRX nor lets us pick the
// speed: method 0 takes ~1/3 of the CPU of OpenCV's fixed method 4 for ~20% more bytes.
std::vector<std::uint8_t> encode_webp(const ImageView& image, int quality) {
    WebPConfig config;
    if (!WebPConfigInit(&config)) throw std::runtime_error("webp: library version mismatch");
    config.quality = static_cast<float>(quality);
    config.method = kWebpMethod;
    WebPPicture picture;
    if (!WebPPictureInit(&picture)) throw std::runtime_error("webp: library version mismatch");
    struct PictureGuard {
        WebPPicture* picture;
        ~PictureGuard() { WebPPictureFree(picture); }
    } picture_guard{&picture};
    struct WriterGuard {
        WebPMemoryWriter writer;
        ~WriterGuard() { WebPMemoryWriterClear(&writer); }
    } output;
    WebPMemoryWriterInit(&output.writer);
    picture.width = image.width;
    picture.height = image.height;
    picture.use_argb = 0;  // lossy: straight to YUV
    picture.writer = WebPMemoryWrite;
    picture.custom_ptr = &output.writer;
    if (!WebPPictureImportBGRX(&picture, image.data, static_cast<int>(image.stride)))
        throw std::runtime_error("webp: out of memory importing the picture");
    if (!WebPEncode(&config, &picture))
        throw std::runtime_error("webp encoding failed (error " +
                                 std::to_string(static_cast<int>(picture.error_code)) + ")");
    return std::vector<std::uint8_t>(output.writer.mem, output.writer.mem + output.writer.size);
}

}  // namespace

ImageFormat parse_image_format(std::string_view name) {
    if (name == "png") return ImageFormat::png;
    if (name == "jpeg" || name == "jpg") return ImageFormat::jpeg;
    if (name == "webp") return ImageFormat::webp;
    throw ParameterError("format", "expected png, jpeg or webp, got '" + std::string(name) + "'");
}

std::string_view format_name(ImageFormat format) {
    switch (format) {
        case ImageFormat::png:
            return "png";
        case ImageFormat::jpeg:
            return "jpeg";
        case ImageFormat::webp:
            return "webp";
    }
    return "unknown";
}

std::string_view content_type(ImageFormat format) {
    switch (format) {
        case ImageFormat::png:
            return "image/png";
        case ImageFormat::jpeg:
            return "image/jpeg";
        case ImageFormat::webp:
            return "image/webp";
    }
    return "application/octet-stream";
}

std::pair<int, int> output_size(int source_width, int source_height, const EncodeOptions& options) {
    auto check = [](const char* field, int value) {
        if (value < 1 || value > kMaxOutputDimension)
            throw ParameterError(field, range_error(1, kMaxOutputDimension, value));
    };
    if (options.width) check("width", *options.width);
    if (options.height) check("height", *options.height);
    int width = source_width, height = source_height;
    if (options.width && options.height) {
        width = *options.width;
        height = *options.height;
    } else if (options.width) {
        width = *options.width;
        height = follow_aspect(width, source_width, source_height);
        if (height > kMaxOutputDimension)
            throw ParameterError("width", std::to_string(width) + " makes the height " +
                                              std::to_string(height) + ", above " +
                                              std::to_string(kMaxOutputDimension));
    } else if (options.height) {
        height = *options.height;
        width = follow_aspect(height, source_height, source_width);
        if (width > kMaxOutputDimension)
            throw ParameterError("height", std::to_string(height) + " makes the width " +
                                               std::to_string(width) + ", above " +
                                               std::to_string(kMaxOutputDimension));
    } else if (width > kMaxOutputDimension || height > kMaxOutputDimension) {
        throw ParameterError(width > kMaxOutputDimension ? "width" : "height",
                             "the image is " + std::to_string(width) + "x" +
                                 std::to_string(height) + ", above " +
                                 std::to_string(kMaxOutputDimension) + "; ask for a smaller size");
    }
    return {width, height};
}

EncodedImage encode_image(const ImageView& image, const EncodeOptions& options,
                          const CursorState* cursor) {
    if (image.empty())
        throw ParameterError("image", "no pixels (the screen size is not known yet)");
    if (image.stride < static_cast<std::size_t>(image.width) * kBytesPerPixel)
        throw ParameterError("image", "stride is shorter than a row");
    check_quality(options);
    Rect area = source_area(image, options);
    auto [out_width, out_height] = output_size(area.width, area.height, options);

    // Everything stays 4 bytes per pixel (aligned, SIMD-friendly) up to the codec, which drops X
    // itself: no separate colour conversion pass.
    cv::Mat source(image.height, image.width, CV_8UC4, const_cast<std::uint8_t*>(image.data),
                   image.stride);
    cv::Mat work = source(cv::Rect(area.x, area.y, area.width, area.height));
    if (options.composite_cursor && cursor && cursor->shape && cursor->position_known) {
        work = work.clone();  // never draw into the shared frame
        composite_cursor(work.data, work.cols, work.rows, work.step, area.x, area.y, *cursor);
    }
    if (out_width != area.width || out_height != area.height)
        work = scale(work, cv::Size(out_width, out_height));
    ImageView pixels{work.data, work.cols, work.rows, work.step};

    EncodedImage result;
    switch (options.format) {
        case ImageFormat::png:
            result.bytes =
                write_png(pixels, options.png_compression.value_or(kDefaultPngCompression));
            break;
        case ImageFormat::jpeg:
            result.bytes = encode_jpeg(work, options.quality.value_or(kDefaultQuality));
            break;
        case ImageFormat::webp:
            result.bytes = encode_webp(pixels, options.quality.value_or(kDefaultQuality));
            break;
    }
    result.content_type = content_type(options.format);
    result.width = out_width;
    result.height = out_height;
    return result;
}

EncodedImage encode_image(const FrameSnapshot& snapshot, const EncodeOptions& options) {
    if (!snapshot.frame)
        throw ParameterError("image", "no frame yet (the screen size is not known)");
    return encode_image(snapshot.frame->view(), options, &snapshot.cursor);
}

}  // namespace deskbox::streaming
