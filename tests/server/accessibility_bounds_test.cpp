// An agent answer's bounds (screen pixels) in API pixels: clipped to the screen, first and last
// pixel mapped as screenshots are, an element wholly off the screen marked, nested children and
// every list of the answer covered. The API test checks the same on a real Firefox button.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/sandbox/accessibility.hpp"

namespace deskbox::server {
namespace {

using nlohmann::json;

json box(int x, int y, int w, int h) {
    return {{"x", x}, {"y", y}, {"width", w}, {"height", h}};
}

TEST(AccessibleBounds, SameSizeScreenClipsAndMarksOffscreen) {
    json answer = {{"windows",
                    {{{"bounds", box(-10, 0, 110, 50)},
                      {"children",
                       {{{"bounds", box(1200, 790, 200, 40)}},
                        {{"bounds", box(2000, 10, 5, 5)}, {"children", json::array()}}}}}}}};
    accessible_bounds_to_api(answer, {1280, 800}, std::nullopt);
    const json& window = answer["windows"][0];
    EXPECT_EQ(window["bounds"], box(0, 0, 100, 50));
    EXPECT_EQ(window["children"][0]["bounds"], box(1200, 790, 80, 10));
    EXPECT_FALSE(window["children"][1].contains("bounds"));
    EXPECT_EQ(window["children"][1]["offscreen"], true);
}

TEST(AccessibleBounds, ScaledScreenMapsFirstAndLastPixel) {
    // A 2560x1600 screen shown to the client as 1280x800: everything halves.
    const input::CoordinateScaler scaler({1280, 800}, {2560, 1600});
    json answer = {
        {"matches", {{{"bounds", box(0, 0, 2560, 1600)}}, {{"bounds", box(600, 400, 480, 180)}}}},
        {"node", {{"bounds", box(2558, 1598, 2, 2)}}}};
    accessible_bounds_to_api(answer, {2560, 1600}, scaler);
    EXPECT_EQ(answer["matches"][0]["bounds"], box(0, 0, 1280, 800));
    const json& b = answer["matches"][1]["bounds"];
    EXPECT_NEAR(b["x"].get<int>(), 300, 1);
    EXPECT_NEAR(b["y"].get<int>(), 200, 1);
    EXPECT_NEAR(b["width"].get<int>(), 240, 1);
    EXPECT_NEAR(b["height"].get<int>(), 90, 1);
    EXPECT_EQ(answer["node"]["bounds"], box(1279, 799, 1, 1));
}

TEST(AccessibleBounds, AnswersWithoutBoundsAreLeftAlone) {
    json answer = {{"matches", {{{"role", "label"}}}}, {"truncated", false}};
    const json before = answer;
    accessible_bounds_to_api(answer, {1280, 800}, std::nullopt);
    EXPECT_EQ(answer, before);
}

}  // namespace
}  // namespace deskbox::server
