#include "streaming/region.hpp"

#include <random>

#include <gtest/gtest.h>

namespace deskbox::streaming {
namespace {

std::vector<bool> mask_of(const std::vector<Rect>& rects, int width, int height) {
    std::vector<bool> mask(static_cast<std::size_t>(width) * height, false);
    for (const Rect& r : rects)
        for (int y = r.y; y < r.bottom(); ++y)
            for (int x = r.x; x < r.right(); ++x)
                mask[static_cast<std::size_t>(y) * width + x] = true;
    return mask;
}

TEST(SimplifyRegion, DropsDuplicatesContainedAndEmptyRects) {
    auto out = simplify_region({{0, 0, 10, 10}, {2, 2, 3, 3}, {0, 0, 10, 10}, {5, 5, 0, 4}}, 8);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], (Rect{0, 0, 10, 10}));
}

TEST(SimplifyRegion, JoinsRectsWhoseUnionIsARectangle) {
    // Three stacked rows of one column (like scanline damage) and two side by side.
    auto out = simplify_region(
        {{4, 0, 8, 2}, {4, 2, 8, 2}, {4, 4, 8, 2}, {20, 0, 5, 5}, {25, 0, 5, 5}}, 8);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(mask_of(out, 40, 10), mask_of({{4, 0, 8, 6}, {20, 0, 10, 5}}, 40, 10));
}

TEST(SimplifyRegion, KeepsDisjointRectsExactWhileUnderTheLimit) {
    std::vector<Rect> in = {{0, 0, 3, 3}, {10, 10, 2, 5}, {30, 1, 4, 4}};
    auto out = simplify_region(in, 3);
    EXPECT_EQ(out.size(), 3u);
    EXPECT_EQ(mask_of(out, 40, 20), mask_of(in, 40, 20));
}

TEST(SimplifyRegion, OverTheLimitCoversEverythingWithFewerRects) {
    std::mt19937 rng(9);
    for (std::size_t limit : {1u, 4u, 16u}) {
        for (std::size_t count : {20u, 300u, 1000u}) {
            std::vector<Rect> in;
            for (std::size_t i = 0; i < count; ++i) {
                int x = static_cast<int>(rng() % 600), y = static_cast<int>(rng() % 400);
                in.push_back(
                    {x, y, 1 + static_cast<int>(rng() % 40), 1 + static_cast<int>(rng() % 30)});
            }
            auto out = simplify_region(in, limit);
            EXPECT_LE(out.size(), limit);
            auto want = mask_of(in, 700, 500), got = mask_of(out, 700, 500);
            for (std::size_t i = 0; i < want.size(); ++i)
                ASSERT_TRUE(!want[i] || got[i]) << "limit " << limit << " count " << count;
        }
    }
}

TEST(SimplifyRegion, TileCoverIsTighterThanTheBoundingBox) {
    // Two far corners: the bounding box would be the whole 1000x1000 square.
    auto out = simplify_region({{0, 0, 5, 5}, {995, 995, 5, 5}, {0, 995, 5, 5}}, 2);
    EXPECT_LE(out.size(), 2u);
    std::int64_t area = 0;
    for (const Rect& r : out) area += r.area();
    EXPECT_LT(area, 1000 * 1000 / 2);
}

}  // namespace
}  // namespace deskbox::streaming
