#include "streaming/analysis/picture.hpp"

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "common/base64.hpp"
#include "streaming/analysis/cv_view.hpp"
#include "streaming/png_writer.hpp"

namespace deskbox::analysis {

Picture decode_png_picture(std::string_view bytes, const std::string& field) {
    static constexpr std::string_view kSignature = "\x89PNG\r\n\x1a\n";
    if (bytes.substr(0, kSignature.size()) != kSignature)
        throw ParameterError(field, "expected a PNG image (base64)");
    // Check the size in the header before decoding: a tiny PNG can claim a huge image.
    if (bytes.size() < 24) throw ParameterError(field, "the PNG is truncated");
    auto be32 = [&](std::size_t at) {
        auto b = [&](std::size_t i) { return std::uint32_t(std::uint8_t(bytes[at + i])); };
        return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
    };
    const std::uint32_t w = be32(16), h = be32(20);
    if (w == 0 || h == 0 || w > kMaxPictureDimension || h > kMaxPictureDimension)
        throw ParameterError(field, "the PNG is " + std::to_string(w) + "x" + std::to_string(h) +
                                        "; at most " + std::to_string(kMaxPictureDimension) +
                                        " pixels a side");
    cv::Mat raw(1, int(bytes.size()), CV_8U, const_cast<char*>(bytes.data()));
    cv::Mat decoded;
    try {
        decoded = cv::imdecode(raw, cv::IMREAD_UNCHANGED);
    } catch (const cv::Exception&) {
    }
    if (decoded.empty()) throw ParameterError(field, "the PNG could not be decoded");
    if (decoded.depth() == CV_16U) decoded.convertTo(decoded, CV_8U, 1.0 / 257);
    Picture picture;
    picture.width = decoded.cols;
    picture.height = decoded.rows;
    picture.bgra.resize(picture.stride() * picture.height);
    cv::Mat out(picture.height, picture.width, CV_8UC4, picture.bgra.data());
    switch (decoded.channels()) {
        case 1:
            cv::cvtColor(decoded, out, cv::COLOR_GRAY2BGRA);
            break;
        case 2: {  // gray + alpha
            std::vector<cv::Mat> planes;
            cv::split(decoded, planes);
            cv::merge(std::vector<cv::Mat>{planes[0], planes[0], planes[0], planes[1]}, out);
            break;
        }
        case 3:
            cv::cvtColor(decoded, out, cv::COLOR_BGR2BGRA);
            break;
        default:
            decoded.copyTo(out);
            break;
    }
    for (std::size_t i = 3; i < picture.bgra.size(); i += 4)
        if (picture.bgra[i] < 128) {
            picture.has_transparency = true;
            break;
        }
    return picture;
}

Picture decode_base64_picture(std::string_view text, const std::string& field) {
    static constexpr std::string_view kPrefix = "data:image/png;base64,";
    if (text.substr(0, kPrefix.size()) == kPrefix) text.remove_prefix(kPrefix.size());
    auto bytes = base64_decode(text);
    if (!bytes) throw ParameterError(field, "expected base64 of a PNG image");
    return decode_png_picture(*bytes, field);
}

OwnedImage scale_image(const ImageView& image, int width, int height) {
    OwnedImage out{width, height, std::vector<std::uint8_t>(std::size_t(width) * height * 4)};
    cv::Mat dst(height, width, CV_8UC4, out.bgrx.data());
    cv::resize(as_mat(image), dst, dst.size(), 0, 0,
               width < image.width ? cv::INTER_AREA : cv::INTER_LINEAR);
    return out;
}

std::vector<std::uint8_t> encode_png(const ImageView& image) {
    return streaming::write_png(image, 1);
}

}  // namespace deskbox::analysis
