#include "streaming/image_encoder.hpp"

#include <cmath>
#include <random>

#include <gtest/gtest.h>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

namespace deskbox::streaming {
namespace {

// A BGRX image owned by the test. The X byte is random: encoders must ignore it.
struct TestImage {
    int width, height;
    std::vector<std::uint8_t> pixels;
    ImageView view() const {
        return {pixels.data(), width, height, static_cast<std::size_t>(width) * 4};
    }
    cv::Mat bgr() const {
        cv::Mat bgrx(height, width, CV_8UC4, const_cast<std::uint8_t*>(pixels.data()));
        cv::Mat out;
        cv::cvtColor(bgrx, out, cv::COLOR_BGRA2BGR);
        return out;
    }
};

TestImage random_image(int width, int height, unsigned seed = 1) {
    std::mt19937 rng(seed);
    TestImage img{width, height,
                  std::vector<std::uint8_t>(static_cast<std::size_t>(width) * height * 4)};
    for (auto& b : img.pixels) b = static_cast<std::uint8_t>(rng());
    return img;
}

// Smooth gradients with mild noise, like a photo or a rendered page: what lossy codecs are for.
TestImage photo_like(int width, int height) {
    std::mt19937 rng(2);
    std::normal_distribution<double> noise(0, 4);
    TestImage img{width, height,
                  std::vector<std::uint8_t>(static_cast<std::size_t>(width) * height * 4)};
    for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x) {
            std::uint8_t* p = &img.pixels[(static_cast<std::size_t>(y) * width + x) * 4];
            double u = static_cast<double>(x) / width, v = static_cast<double>(y) / height;
            double base[3] = {128 + 100 * std::sin(6 * u + 2 * v),
                              128 + 90 * std::cos(4 * v - 3 * u), 60 + 150 * u * v};
            for (int c = 0; c < 3; ++c)
                p[c] = cv::saturate_cast<std::uint8_t>(base[c] + noise(rng));
            p[3] = 0x5a;
        }
    return img;
}

cv::Mat decode(const EncodedImage& encoded) {
    cv::Mat raw(1, static_cast<int>(encoded.bytes.size()), CV_8UC1,
                const_cast<std::uint8_t*>(encoded.bytes.data()));
    return cv::imdecode(raw, cv::IMREAD_COLOR);
}

std::string field_of(const ImageView& view, const EncodeOptions& options) {
    try {
        encode_image(view, options);
    } catch (const ParameterError& e) {
        return e.field();
    }
    return "accepted";
}

TEST(ImageEncoder, PngIsLosslessAndIgnoresTheXByte) {
    TestImage img = random_image(123, 77);
    EncodedImage png = encode_image(img.view(), {});
    EXPECT_EQ(png.content_type, "image/png");
    EXPECT_EQ(png.width, 123);
    EXPECT_EQ(png.height, 77);
    cv::Mat decoded = decode(png);
    ASSERT_FALSE(decoded.empty());
    EXPECT_EQ(decoded.size(), cv::Size(123, 77));
    EXPECT_EQ(cv::norm(decoded, img.bgr(), cv::NORM_INF), 0.0);

    EncodeOptions best;
    best.png_compression = 9;
    EXPECT_EQ(cv::norm(decode(encode_image(img.view(), best)), img.bgr(), cv::NORM_INF), 0.0);
}

TEST(ImageEncoder, PngHonoursAStrideWiderThanTheRow) {
    TestImage wide = random_image(40, 10);
    // A 30x10 view into the 40-pixel-wide buffer.
    ImageView view{wide.pixels.data(), 30, 10, 40 * 4};
    cv::Mat decoded = decode(encode_image(view, {}));
    EXPECT_EQ(cv::norm(decoded, wide.bgr()(cv::Rect(0, 0, 30, 10)), cv::NORM_INF), 0.0);
}

TEST(ImageEncoder, JpegIsCloseOnAPhotoLikeImage) {
    TestImage img = photo_like(320, 200);
    EncodeOptions options;
    options.format = ImageFormat::jpeg;
    EncodedImage jpeg = encode_image(img.view(), options);
    EXPECT_EQ(jpeg.content_type, "image/jpeg");
    ASSERT_GE(jpeg.bytes.size(), 3u);
    EXPECT_EQ(jpeg.bytes[0], 0xff);
    EXPECT_EQ(jpeg.bytes[1], 0xd8);
    cv::Mat decoded = decode(jpeg);
    ASSERT_EQ(decoded.size(), cv::Size(320, 200));
    EXPECT_GT(cv::PSNR(decoded, img.bgr()), 30.0);

    // Lower quality: smaller file.
    options.quality = 20;
    EXPECT_LT(encode_image(img.view(), options).bytes.size(), jpeg.bytes.size());
}

TEST(ImageEncoder, WebpDecodes) {
    TestImage img = photo_like(200, 120);
    EncodeOptions options;
    options.format = ImageFormat::webp;
    options.quality = 90;
    EncodedImage webp = encode_image(img.view(), options);
    EXPECT_EQ(webp.content_type, "image/webp");
    ASSERT_GE(webp.bytes.size(), 12u);
    EXPECT_EQ(std::string(webp.bytes.begin() + 8, webp.bytes.begin() + 12), "WEBP");
    cv::Mat decoded = decode(webp);
    ASSERT_EQ(decoded.size(), cv::Size(200, 120));
    EXPECT_GT(cv::PSNR(decoded, img.bgr()), 30.0);
}

TEST(ImageEncoder, ScalingGivesExactSizes) {
    TestImage img = photo_like(640, 400);
    struct Case {
        std::optional<int> width, height;
        int want_width, want_height;
    };
    const Case cases[] = {
        {320, std::nullopt, 320, 200},  // aspect kept, exact 2x
        {std::nullopt, 100, 160, 100},  // aspect kept, 4x
        {500, 375, 500, 375},           // both: exactly that (aspect changes)
        {683, std::nullopt, 683, 427},  // upscale, 426.875 rounds to 427
        {1, std::nullopt, 1, 1},        // never zero
        {1000, 150, 1000, 150},         // up in one direction, down in the other
        {123, 45, 123, 45},             // odd factors
    };
    for (const Case& c : cases) {
        EncodeOptions options;
        options.width = c.width;
        options.height = c.height;
        EncodedImage png = encode_image(img.view(), options);
        EXPECT_EQ(png.width, c.want_width);
        EXPECT_EQ(png.height, c.want_height);
        cv::Mat decoded = decode(png);
        EXPECT_EQ(decoded.size(), cv::Size(c.want_width, c.want_height));
    }
}

TEST(ImageEncoder, DownscalingAveragesPixels) {
    // A 2x2 checkerboard of black and white, halved, is uniform grey with area averaging.
    TestImage img{64, 64, std::vector<std::uint8_t>(64 * 64 * 4)};
    for (int y = 0; y < 64; ++y)
        for (int x = 0; x < 64; ++x)
            for (int c = 0; c < 3; ++c) img.pixels[(y * 64 + x) * 4 + c] = ((x + y) % 2) ? 255 : 0;
    EncodeOptions options;
    options.width = 32;
    cv::Mat decoded = decode(encode_image(img.view(), options));
    double low, high;
    cv::minMaxLoc(decoded.reshape(1), &low, &high);
    EXPECT_GE(low, 126);
    EXPECT_LE(high, 129);
}

TEST(ImageEncoder, DownscalingByAnOddFactorStillAverages) {
    // 1-pixel checkerboard shrunk 4.3x and 2.3x: sampling alone would give black and white
    // pixels; averaging gives grey everywhere.
    TestImage img{300, 300, std::vector<std::uint8_t>(300 * 300 * 4)};
    for (int y = 0; y < 300; ++y)
        for (int x = 0; x < 300; ++x)
            for (int c = 0; c < 3; ++c) img.pixels[(y * 300 + x) * 4 + c] = ((x + y) % 2) ? 255 : 0;
    for (int width : {70, 130}) {
        EncodeOptions options;
        options.width = width;
        cv::Mat decoded = decode(encode_image(img.view(), options));
        ASSERT_EQ(decoded.size(), cv::Size(width, width));
        double low, high;
        cv::minMaxLoc(decoded.reshape(1), &low, &high);
        EXPECT_GE(low, 90) << width;
        EXPECT_LE(high, 165) << width;
    }
    // Under 2x the encoder interpolates bilinearly (area averaging costs ~7x more; see
    // image_encoder.cpp): this worst case shows moire, but the brightness is kept.
    EncodeOptions mild;
    mild.width = 250;
    cv::Mat decoded = decode(encode_image(img.view(), mild));
    EXPECT_NEAR(cv::mean(decoded)[0], 127.5, 3);
}

TEST(ImageEncoder, JpegAndWebpOfACropMatchTheCrop) {
    TestImage img = photo_like(320, 200);
    cv::Mat want = img.bgr()(cv::Rect(33, 17, 150, 101));
    for (ImageFormat format : {ImageFormat::jpeg, ImageFormat::webp}) {
        EncodeOptions options;
        options.format = format;
        options.quality = 90;
        options.region = Rect{33, 17, 150, 101};
        cv::Mat decoded = decode(encode_image(img.view(), options));
        ASSERT_EQ(decoded.size(), cv::Size(150, 101));
        EXPECT_GT(cv::PSNR(decoded, want), 30.0) << format_name(format);
    }
}

TEST(ImageEncoder, PngCompressionLevelsAreAllLossless) {
    TestImage img = photo_like(97, 61);
    for (int level = 0; level <= 9; ++level) {
        EncodeOptions options;
        options.png_compression = level;
        cv::Mat decoded = decode(encode_image(img.view(), options));
        EXPECT_EQ(cv::norm(decoded, img.bgr(), cv::NORM_INF), 0.0) << "level " << level;
    }
}

TEST(ImageEncoder, RegionCropsExactlyAndThenScales) {
    TestImage img = random_image(100, 60, 3);
    EncodeOptions options;
    options.region = Rect{10, 5, 40, 20};
    EncodedImage crop = encode_image(img.view(), options);
    cv::Mat decoded = decode(crop);
    EXPECT_EQ(cv::norm(decoded, img.bgr()(cv::Rect(10, 5, 40, 20)), cv::NORM_INF), 0.0);

    options.width = 20;  // scaled relative to the region, not the whole image
    EncodedImage half = encode_image(img.view(), options);
    EXPECT_EQ(half.width, 20);
    EXPECT_EQ(half.height, 10);
}

TEST(ImageEncoder, CompositesTheCursorOnlyWhenAsked) {
    TestImage img{40, 30, std::vector<std::uint8_t>(40 * 30 * 4, 0)};  // black
    auto shape = std::make_shared<CursorImage>();
    shape->width = 3;
    shape->height = 3;
    shape->xhot = 1;
    shape->yhot = 1;
    // Opaque white, except a half-transparent white (premultiplied) corner and a clear pixel.
    shape->argb.assign(9, 0xffffffffu);
    shape->argb[0] = 0x80808080u;
    shape->argb[8] = 0;
    CursorState cursor;
    cursor.shape = shape;
    cursor.x = 10;
    cursor.y = 20;
    cursor.position_known = true;

    EncodeOptions options;
    cv::Mat plain = decode(encode_image(img.view(), options, &cursor));
    EXPECT_EQ(cv::countNonZero(plain.reshape(1)), 0);

    options.composite_cursor = true;
    cv::Mat with = decode(encode_image(img.view(), options, &cursor));
    EXPECT_EQ(with.at<cv::Vec3b>(20, 10), cv::Vec3b(255, 255, 255));  // hotspot at the position
    EXPECT_EQ(with.at<cv::Vec3b>(19, 9), cv::Vec3b(128, 128, 128));   // half over black
    EXPECT_EQ(with.at<cv::Vec3b>(21, 11), cv::Vec3b(0, 0, 0));        // transparent
    EXPECT_EQ(with.at<cv::Vec3b>(18, 10), cv::Vec3b(0, 0, 0));        // outside the cursor
    EXPECT_EQ(cv::countNonZero(with.reshape(1)), 8 * 3);
    EXPECT_EQ(img.pixels, std::vector<std::uint8_t>(40 * 30 * 4, 0));  // source untouched

    // In a region, the cursor stays at its screen position.
    options.region = Rect{5, 15, 20, 10};
    cv::Mat cropped = decode(encode_image(img.view(), options, &cursor));
    EXPECT_EQ(cropped.at<cv::Vec3b>(5, 5), cv::Vec3b(255, 255, 255));

    // Partly off screen: clipped, no overrun (ASan watches).
    cursor.x = 0;
    cursor.y = 29;
    options.region.reset();
    cv::Mat corner = decode(encode_image(img.view(), options, &cursor));
    EXPECT_EQ(corner.at<cv::Vec3b>(29, 0), cv::Vec3b(255, 255, 255));
}

TEST(ImageEncoder, EncodesAMirrorSnapshot) {
    FrameMirror mirror;
    mirror.reset(64, 32);
    std::vector<std::uint8_t> red(4 * 4 * 4);
    for (std::size_t i = 0; i < red.size(); i += 4) red[i + 2] = 255;
    mirror.apply_damage(1, 8, 8, 4, 4, std::span<const std::uint8_t>(red));
    cv::Mat decoded = decode(encode_image(mirror.snapshot(), {}));
    ASSERT_EQ(decoded.size(), cv::Size(64, 32));
    EXPECT_EQ(decoded.at<cv::Vec3b>(9, 9), cv::Vec3b(0, 0, 255));
    EXPECT_EQ(decoded.at<cv::Vec3b>(0, 0), cv::Vec3b(0, 0, 0));

    FrameMirror empty;
    EXPECT_THROW(encode_image(empty.snapshot(), {}), ParameterError);
}

TEST(ImageEncoder, RejectsBadParametersNamingThem) {
    TestImage img = random_image(100, 50);
    ImageView view = img.view();
    auto with = [](auto change) {
        EncodeOptions o;
        change(o);
        return o;
    };
    EXPECT_EQ(field_of(view, with([](auto& o) { o.format = ImageFormat::jpeg, o.quality = 0; })),
              "quality");
    EXPECT_EQ(field_of(view, with([](auto& o) { o.format = ImageFormat::webp, o.quality = 101; })),
              "quality");
    EXPECT_EQ(field_of(view, with([](auto& o) { o.quality = 80; })), "quality");  // png
    EXPECT_EQ(field_of(view, with([](auto& o) { o.png_compression = 10; })), "png_compression");
    EXPECT_EQ(field_of(view, with([](auto& o) { o.png_compression = -1; })), "png_compression");
    EXPECT_EQ(
        field_of(view, with([](auto& o) { o.format = ImageFormat::jpeg, o.png_compression = 1; })),
        "png_compression");
    EXPECT_EQ(field_of(view, with([](auto& o) { o.width = 0; })), "width");
    EXPECT_EQ(field_of(view, with([](auto& o) { o.width = 8193; })), "width");
    EXPECT_EQ(field_of(view, with([](auto& o) { o.height = -5; })), "height");
    ImageView tall{img.pixels.data(), 10, 50, 100 * 4};
    EXPECT_EQ(field_of(tall, with([](auto& o) { o.width = 8192; })), "width");    // 40960 high
    EXPECT_EQ(field_of(view, with([](auto& o) { o.height = 5000; })), "height");  // 10000 wide
    EXPECT_EQ(field_of(view, with([](auto& o) { o.region = Rect{90, 0, 11, 10}; })), "region");
    EXPECT_EQ(field_of(view, with([](auto& o) { o.region = Rect{-1, 0, 10, 10}; })), "region");
    EXPECT_EQ(field_of(view, with([](auto& o) { o.region = Rect{0, 0, 0, 10}; })), "region");
    EXPECT_EQ(field_of(ImageView{}, {}), "image");

    try {
        parse_image_format("gif");
        FAIL() << "gif accepted";
    } catch (const ParameterError& e) {
        EXPECT_EQ(e.field(), "format");
        EXPECT_NE(std::string(e.what()).find("gif"), std::string::npos);
    }
    EXPECT_EQ(parse_image_format("jpg"), ImageFormat::jpeg);
    EXPECT_EQ(parse_image_format("webp"), ImageFormat::webp);
    EXPECT_EQ(content_type(parse_image_format("png")), "image/png");
}

}  // namespace
}  // namespace deskbox::streaming
