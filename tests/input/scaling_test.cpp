// Coordinate scaling between the API resolution an agent was told and the real screen.
#include "input/scaling.hpp"

#include <gtest/gtest.h>

#include <ostream>
#include <random>
#include <vector>

#include "input/parse.hpp"

namespace deskbox::input {

// Readable failure output for gtest.
inline void PrintTo(const Point& p, std::ostream* os) {
    *os << "(" << p.x << ", " << p.y << ")";
}
inline void PrintTo(const Action& a, std::ostream* os) {
    *os << to_native_json(a).dump();
}

namespace {

struct MapCase {
    Size api;
    Size screen;
    Point in;
    Point out;
};

TEST(CoordinateScaler, MapsKnownPoints) {
    const std::vector<MapCase> cases = {
        // The common case: agent told 1280x800 (WXGA), real screen 1920x1200 (x1.5 on both axes).
        {{1280, 800}, {1920, 1200}, {0, 0}, {0, 0}},
        {{1280, 800}, {1920, 1200}, {1279, 799}, {1919, 1199}},
        {{1280, 800}, {1920, 1200}, {640, 400}, {960, 600}},  // 640*1919/1279 = 960.25
        {{1280, 800}, {1920, 1200}, {1, 1}, {2, 2}},          // 1.50039 rounds up
        // Downscale: 1920x1080 screen told as 1366x768.
        {{1366, 768}, {1920, 1080}, {683, 384}, {960, 540}},
        {{1366, 768}, {1920, 1080}, {1365, 767}, {1919, 1079}},
        // Identity.
        {{1024, 768}, {1024, 768}, {517, 33}, {517, 33}},
        // One-pixel axes: the only API point is 0, and it maps to 0.
        {{1, 1}, {1920, 1080}, {0, 0}, {0, 0}},
        // Tiny to huge: ends stay ends.
        {{2, 2}, {4000, 3000}, {1, 1}, {3999, 2999}},
        // Exact half: 1 * 2 / 4 = 0.5 rounds up.
        {{5, 5}, {3, 3}, {1, 1}, {1, 1}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(testing::Message() << c.api.width << "x" << c.api.height << " -> "
                                        << c.screen.width << "x" << c.screen.height);
        const CoordinateScaler scaler(c.api, c.screen);
        EXPECT_EQ(scaler.to_screen(c.in), c.out);
    }
}

TEST(CoordinateScaler, ReportsIdentity) {
    EXPECT_TRUE(CoordinateScaler({800, 600}, {800, 600}).identity());
    EXPECT_FALSE(CoordinateScaler({800, 600}, {1600, 1200}).identity());
}

TEST(CoordinateScaler, RejectsNonPositiveSizes) {
    EXPECT_THROW(CoordinateScaler({0, 600}, {800, 600}), std::invalid_argument);
    EXPECT_THROW(CoordinateScaler({800, -1}, {800, 600}), std::invalid_argument);
    EXPECT_THROW(CoordinateScaler({800, 600}, {800, 0}), std::invalid_argument);
}

void expect_action_error(const std::function<void()>& call, const std::string& field,
                         const std::string& reason_part) {
    try {
        call();
        ADD_FAILURE() << "no error; expected " << field;
    } catch (const ActionError& e) {
        EXPECT_EQ(e.field(), field);
        EXPECT_NE(e.reason().find(reason_part), std::string::npos) << e.reason();
    }
}

TEST(CoordinateScaler, RejectsPointsOffTheScreenTheyAreMeantFor) {
    const CoordinateScaler scaler({1280, 800}, {1920, 1200});
    expect_action_error(
        [&] {
            scaler.to_screen({1280, 5}, "coordinate");
        },
        "coordinate", "x=1280 is outside the 1280x800 screen (x must be 0..1279)");
    expect_action_error(
        [&] {
            scaler.to_screen({5, 800});
        },
        "coordinate", "y=800 is outside the 1280x800 screen");
    expect_action_error([&] { scaler.to_screen({-1, 0}, "at"); }, "at", "x=-1");
    // to_api checks against the real screen.
    EXPECT_EQ(scaler.to_api({1919, 1199}), (Point{1279, 799}));
    expect_action_error(
        [&] {
            scaler.to_api({1920, 0}, "cursor");
        },
        "cursor", "x=1920 is outside the 1920x1200 screen");
}

// For many API/screen size pairs: every API point lands on the screen, the ends map to the ends,
// the mapping never goes backwards, and when the screen is at least as large, going back to the
// API gives the point the agent sent.
TEST(CoordinateScaler, PropertiesHoldForManySizePairs) {
    std::mt19937 random(20240601);  // fixed seed: the same pairs every run
    std::uniform_int_distribution<int> api_length(1, 3000);
    std::uniform_int_distribution<int> screen_length(1, 6000);
    std::vector<std::pair<int, int>> pairs = {
        {1, 1},       {1, 7},      {7, 1},       {2, 3},       {1280, 1920}, {1920, 1280},
        {1366, 1920}, {768, 1080}, {1024, 1024}, {3000, 6000}, {5999, 6000}, {6000, 5999}};
    for (int i = 0; i < 300; ++i) pairs.emplace_back(api_length(random), screen_length(random));

    for (const auto& [api, screen] : pairs) {
        SCOPED_TRACE(testing::Message() << "api " << api << ", screen " << screen);
        // Use the pair on x and swapped on y, so both axes get both directions.
        const CoordinateScaler scaler({api, screen}, {screen, api});
        int previous = -1;
        for (int v = 0; v < api; ++v) {
            const int mapped = scaler.to_screen({v, 0}).x;
            ASSERT_GE(mapped, 0);
            ASSERT_LT(mapped, screen);
            ASSERT_GE(mapped, previous) << "not monotonic at " << v;
            previous = mapped;
            if (screen >= api) {
                ASSERT_EQ(scaler.to_api({mapped, 0}).x, v) << "round trip failed at " << v;
            }
        }
        EXPECT_EQ(scaler.to_screen({0, 0}), (Point{0, 0}));
        EXPECT_EQ(scaler.to_screen({api - 1, 0}).x, api > 1 ? screen - 1 : 0);
        EXPECT_EQ(scaler.to_api({screen - 1, 0}).x, screen > 1 ? api - 1 : 0);
        // The y axis maps screen -> api lengths.
        EXPECT_EQ(scaler.to_screen({0, screen - 1}).y, screen > 1 ? api - 1 : 0);
    }
}

TEST(CoordinateScaler, MapsEveryCoordinateOfEveryAction) {
    const CoordinateScaler scaler({100, 100}, {199, 199});  // exactly x2: p -> 2p
    struct Case {
        Action in;
        Action out;
    };
    const std::vector<Case> cases = {
        {Click{Point{10, 20}, Button::right, 2, {}}, Click{Point{20, 40}, Button::right, 2, {}}},
        {Click{std::nullopt, Button::left, 1, {}}, Click{std::nullopt, Button::left, 1, {}}},
        {Move{{99, 0}}, Move{{198, 0}}},
        {MouseDown{Button::left, Point{1, 2}}, MouseDown{Button::left, Point{2, 4}}},
        {MouseUp{Button::middle, Point{3, 4}}, MouseUp{Button::middle, Point{6, 8}}},
        {MouseUp{Button::left, std::nullopt}, MouseUp{Button::left, std::nullopt}},
        {Drag{{{0, 0}, {5, 5}, {99, 99}}, Button::left, {}},
         Drag{{{0, 0}, {10, 10}, {198, 198}}, Button::left, {}}},
        {Scroll{Point{50, 60}, 0, 3, {}}, Scroll{Point{100, 120}, 0, 3, {}}},
        {Type{"unchanged"}, Type{"unchanged"}},
        {Wait{250}, Wait{250}},
        {Screenshot{}, Screenshot{}},
        {CursorPosition{}, CursorPosition{}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(action_type_name(c.in));
        EXPECT_EQ(scaler.to_screen(c.in), c.out);
    }
}

TEST(CoordinateScaler, ActionErrorsNameTheFieldTheAgentSent) {
    const CoordinateScaler scaler({1280, 800}, {1920, 1200});
    const Action drag = Drag{{{10, 10}, {1280, 10}}, Button::left, {}};
    const Action three_point_drag = Drag{{{10, 10}, {20, 20}, {30, 900}}, Button::left, {}};
    const Action click = Click{Point{5, 800}, Button::left, 1, {}};

    expect_action_error([&] { scaler.to_screen(drag, "actions[1]", Dialect::anthropic); },
                        "actions[1].coordinate[0]", "x=1280 is outside the 1280x800 screen");
    expect_action_error([&] { scaler.to_screen(drag, "", Dialect::native); }, "path[1][0]",
                        "x=1280");
    expect_action_error([&] { scaler.to_screen(three_point_drag, "", Dialect::openai); },
                        "path[2].y", "y=900");
    expect_action_error([&] { scaler.to_screen(click, "actions[0]", Dialect::anthropic); },
                        "actions[0].coordinate[1]", "y=800");
    expect_action_error([&] { scaler.to_screen(click, "", Dialect::openai); }, "y", "y=800");
}

// End to end: parse an Anthropic payload told 1280x800 and land it on a 1920x1200 screen.
TEST(CoordinateScaler, ScalesAParsedAnthropicDrag) {
    const CoordinateScaler scaler({1280, 800}, {1920, 1200});
    const Action parsed = parse_action(
        nlohmann::json::parse(
            R"({"action":"left_click_drag","start_coordinate":[0,0],"coordinate":[1279,799]})"),
        Dialect::anthropic);
    EXPECT_EQ(scaler.to_screen(parsed, "", Dialect::anthropic),
              (Action{Drag{{{0, 0}, {1919, 1199}}, Button::left, {}}}));
}

}  // namespace
}  // namespace deskbox::input
