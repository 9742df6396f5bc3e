#include "streaming/encoded_image_cache.hpp"

#include <vector>

#include <gtest/gtest.h>
#include <opencv2/imgcodecs.hpp>

namespace deskbox::streaming {
namespace {

// One rect of a single colour (B, G, R), as the agent would send it.
void paint(FrameMirror& mirror, std::uint64_t seq, Rect rect, std::uint8_t b, std::uint8_t g,
           std::uint8_t r) {
    std::vector<std::uint8_t> pixels(static_cast<std::size_t>(rect.area()) * 4);
    for (std::size_t i = 0; i < pixels.size(); i += 4) {
        pixels[i] = b;
        pixels[i + 1] = g;
        pixels[i + 2] = r;
    }
    mirror.apply_damage(seq, rect.x, rect.y, rect.width, rect.height, pixels);
}

cv::Vec3b pixel_of(const EncodedImage& image, int x, int y) {
    cv::Mat decoded = cv::imdecode(image.bytes, cv::IMREAD_COLOR);
    EXPECT_FALSE(decoded.empty());
    return decoded.at<cv::Vec3b>(y, x);
}

TEST(EncodedImageCache, AnUnchangedFrameIsEncodedOnceAndAnyDamageEncodesAgain) {
    FrameMirror mirror;
    mirror.reset(64, 48, 0);
    paint(mirror, 1, {0, 0, 64, 48}, 0, 0, 255);
    EncodedImageCache cache;
    const EncodeOptions png;

    const EncodedImage first = cache.encode(mirror.snapshot(), png);
    const EncodedImage again = cache.encode(mirror.snapshot(), png);
    EXPECT_EQ(first.bytes, again.bytes);
    EXPECT_EQ(cache.stats().hits, 1u);
    EXPECT_EQ(cache.stats().misses, 1u);

    // One changed pixel is enough to make a new image, showing it.
    paint(mirror, 2, {10, 20, 1, 1}, 0, 255, 0);
    const EncodedImage changed = cache.encode(mirror.snapshot(), png);
    EXPECT_EQ(cache.stats().misses, 2u);
    EXPECT_NE(changed.bytes, first.bytes);
    EXPECT_EQ(pixel_of(changed, 10, 20), cv::Vec3b(0, 255, 0));
    EXPECT_EQ(pixel_of(changed, 11, 20), cv::Vec3b(0, 0, 255));
    EXPECT_EQ(cache.stats().entries, 1u) << "the older frame's image can never be asked again";

    // Damage that writes the same pixels again still counts as a change: the cache never
    // judges pixels, only the mirror's version.
    paint(mirror, 3, {10, 20, 1, 1}, 0, 255, 0);
    cache.encode(mirror.snapshot(), png);
    EXPECT_EQ(cache.stats().misses, 3u);
}

TEST(EncodedImageCache, OptionsAndANewScreenSizeAreTheirOwnEntries) {
    FrameMirror mirror;
    mirror.reset(64, 48, 0);
    paint(mirror, 1, {0, 0, 64, 48}, 255, 0, 0);
    EncodedImageCache cache(2);
    EncodeOptions png, jpeg, small;
    jpeg.format = ImageFormat::jpeg;
    small.width = 32;

    EXPECT_EQ(cache.encode(mirror.snapshot(), png).content_type, "image/png");
    EXPECT_EQ(cache.encode(mirror.snapshot(), jpeg).content_type, "image/jpeg");
    EXPECT_EQ(cache.encode(mirror.snapshot(), png).content_type, "image/png");  // both kept
    EXPECT_EQ(cache.stats().hits, 1u);
    EXPECT_EQ(cache.encode(mirror.snapshot(), small).width, 32);  // evicts jpeg (least recent)
    EXPECT_EQ(cache.encode(mirror.snapshot(), jpeg).content_type, "image/jpeg");
    EXPECT_EQ(cache.stats().misses, 4u);

    mirror.reset(32, 16);  // black at the new size
    const EncodedImage resized = cache.encode(mirror.snapshot(), png);
    EXPECT_EQ(resized.width, 32);
    EXPECT_EQ(resized.height, 16);
    EXPECT_EQ(pixel_of(resized, 0, 0), cv::Vec3b(0, 0, 0));
}

TEST(EncodedImageCache, TheCursorMattersOnlyWhenItIsDrawn) {
    FrameMirror mirror;
    mirror.reset(64, 48, 0);
    paint(mirror, 1, {0, 0, 64, 48}, 0, 0, 0);
    const std::vector<std::uint8_t> white(4 * 4 * 4, 0xff);  // opaque white, premultiplied
    mirror.set_cursor_shape(4, 4, 0, 0, 1, white);
    mirror.set_cursor_position(5, 5);
    EncodedImageCache cache;
    EncodeOptions plain, with_cursor;
    with_cursor.composite_cursor = true;

    cache.encode(mirror.snapshot(), plain);
    cache.encode(mirror.snapshot(), with_cursor);
    mirror.set_cursor_position(30, 30);
    cache.encode(mirror.snapshot(), plain);  // the pixels did not change: a hit
    EXPECT_EQ(cache.stats().hits, 1u);
    const EncodedImage moved = cache.encode(mirror.snapshot(), with_cursor);
    EXPECT_EQ(cache.stats().misses, 3u);
    EXPECT_EQ(pixel_of(moved, 31, 31), cv::Vec3b(255, 255, 255));
    EXPECT_EQ(pixel_of(moved, 6, 6), cv::Vec3b(0, 0, 0));
}

}  // namespace
}  // namespace deskbox::streaming
