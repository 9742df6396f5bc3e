// Screen analysis end to end: the real server, real containers of the `minimal` template (Xvfb,
// openbox, xterm), and answers checked against what the test itself put on the screen.
#include <gtest/gtest.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <future>
#include <thread>

#include "common/base64.hpp"
#include "tests/server/deskboxd_fixture.hpp"

namespace deskbox {
namespace {

using namespace test;

cv::Mat decode_png(const std::string& bytes) {
    return cv::imdecode(std::vector<uchar>(bytes.begin(), bytes.end()), cv::IMREAD_COLOR);
}

std::string png_base64(const cv::Mat& image) {
    std::vector<uchar> png;
    cv::imencode(".png", image, png);
    return base64_encode(std::span<const std::uint8_t>(png.data(), png.size()));
}

// A sandbox with its terminal found and focused.
struct Desktop {
    Server& s;
    std::string base;
    cv::Rect terminal;

    explicit Desktop(Server& server, json create = json::object()) : s(server) {
        auto created = s.post("/v1/sandboxes", create);
        if (created.status != 201u) {
            ADD_FAILURE() << created.body << s.log();
            return;
        }
        base = "/v1/sandboxes/" + created.js()["id"].get<std::string>();
        EXPECT_TRUE(eventually([&] {
            auto found = find_terminal();
            if (found) terminal = *found;
            return found.has_value();
        })) << s.get(base + "/windows").body;
    }
    std::optional<cv::Rect> find_terminal() {
        json windows = s.get(base + "/windows").js();
        for (auto& w : windows["windows"])
            if (w.value("class", "") == "XTerm")
                return cv::Rect(w["x"].get<int>(), w["y"].get<int>(), w["width"].get<int>(),
                                w["height"].get<int>());
        return std::nullopt;
    }
    Answer act(const json& actions) { return s.post(base + "/actions", actions); }
    void type_in_terminal(const std::string& text) {
        auto a = act({{"actions",
                       {{{"type", "click"},
                         {"x", terminal.x + terminal.width / 2},
                         {"y", terminal.y + terminal.height / 2}},
                        {{"type", "type"}, {"text", text}}}}});
        EXPECT_EQ(a.status, 200u) << a.body;
    }
    cv::Mat screenshot() { return decode_png(s.get(base + "/screenshot").body); }
};

std::string error_field(const Answer& a) {
    return a.js()["error"].value("field", std::string("(none)"));
}

TEST(AnalysisApi, OcrReadsTypedTextAndActionsClickWhatTheyName) {
    REQUIRE_TEMPLATE();
    Server s;
    Desktop d(s);
    ASSERT_FALSE(d.base.empty());
    d.type_in_terminal("echo zebra quartz 4711\n");
    // The echo's output is the second "quartz" on the screen.
    auto waited = s.post(d.base + "/wait",
                         {{"until", "text"}, {"text", "zebra quartz 4711"}, {"timeout_ms", 20000}});
    ASSERT_EQ(waited.status, 200u) << waited.body;
    ASSERT_TRUE(waited.js()["matched"]) << waited.body;

    auto ocr = s.post(d.base + "/ocr", json::object());
    ASSERT_EQ(ocr.status, 200u) << ocr.body;
    const std::string text = ocr.js()["text"];
    EXPECT_NE(text.find("echo zebra quartz 4711"), std::string::npos) << text;
    int quartz_words = 0;
    const json read = ocr.js();
    for (auto& w : read["words"]) {
        if (w["text"] != "quartz") continue;
        ++quartz_words;
        cv::Rect box(w["x"], w["y"], w["width"], w["height"]);
        EXPECT_EQ(box & d.terminal, box) << "a word of the terminal lies in the terminal";
        EXPECT_GT(w["confidence"].get<double>(), 60);
        EXPECT_LT(w["line"].get<std::size_t>(), read["lines"].size());
    }
    EXPECT_EQ(quartz_words, 2) << text;

    auto located = s.post(d.base + "/locate", {{"text", "QUARTZ"}});
    ASSERT_EQ(located.status, 200u) << located.body;
    json matches = located.js()["matches"];
    ASSERT_EQ(matches.size(), 2u) << located.body;
    EXPECT_LT(matches[0]["y"].get<int>(), matches[1]["y"].get<int>()) << "reading order";
    EXPECT_TRUE(
        s.post(d.base + "/locate", {{"text", "QUARTZ"}, {"exact", true}}).js()["matches"].empty());

    // Clicking the second one: the pointer lands on its centre, and the answer says what it hit.
    auto clicked = d.act({{"type", "move"}, {"target", {{"text", "quartz"}, {"index", 1}}}});
    ASSERT_EQ(clicked.status, 200u) << clicked.body;
    json hit = clicked.js()["results"][0]["target"];
    EXPECT_EQ(hit["center"], matches[1]["center"]) << clicked.body;
    auto cursor = s.get(d.base + "/cursor").js();
    EXPECT_EQ(json::array({cursor["x"], cursor["y"]}), matches[1]["center"]);
    // With an offset, and in a batch after another action.
    clicked = d.act({{"actions",
                      {{{"type", "move"}, {"x", 5}, {"y", 5}},
                       {{"type", "move"}, {"target", {{"text", "4711"}, {"offset", {0, -30}}}}}}}});
    ASSERT_EQ(clicked.status, 200u) << clicked.body;
    json first_4711 = s.post(d.base + "/locate", {{"text", "4711"}}).js()["matches"][0];
    cursor = s.get(d.base + "/cursor").js();
    EXPECT_EQ(cursor["x"], first_4711["center"][0]);
    EXPECT_EQ(cursor["y"].get<int>(), first_4711["center"][1].get<int>() - 30);

    // Something that is not there: a clear error after the wait, the earlier actions done.
    auto missing = d.act(
        {{"actions",
          {{{"type", "move"}, {"x", 7}, {"y", 9}},
           {{"type", "click"}, {"target", {{"text", "no such words"}, {"timeout_ms", 300}}}}}}});
    EXPECT_EQ(missing.status, 422u) << missing.body;
    EXPECT_EQ(missing.js()["error"]["code"], "target_not_found");
    EXPECT_EQ(error_field(missing), "actions[1].target");
    cursor = s.get(d.base + "/cursor").js();
    EXPECT_EQ(cursor["x"], 7);
}

TEST(AnalysisApi, LocateFindsAMovedWindowWithinTwoPixels) {
    REQUIRE_TEMPLATE();
    Server s;
    Desktop d(s);
    ASSERT_FALSE(d.base.empty());
    d.type_in_terminal("printf 'locate me %s\\n' 42\n");
    ASSERT_TRUE(s.post(d.base + "/wait",
                       {{"until", "text"}, {"text", "locate me 42"}, {"timeout_ms", 20000}})
                    .js()["matched"]);
    // The window's top-left corner: frame, icon, the start of the title and of the prompt.
    cv::Mat before = d.screenshot();
    const cv::Rect cut(d.terminal.x, d.terminal.y - 18, 96, 64);
    ASSERT_EQ(cut & cv::Rect(0, 0, before.cols, before.rows), cut);
    const std::string templ = png_base64(before(cut).clone());
    auto found = s.post(d.base + "/locate", {{"image", templ}});
    ASSERT_EQ(found.status, 200u) << found.body;
    ASSERT_FALSE(found.js()["matches"].empty());
    EXPECT_EQ(found.js()["matches"][0]["x"], cut.x);
    EXPECT_EQ(found.js()["matches"][0]["y"], cut.y);
    EXPECT_GT(found.js()["matches"][0]["score"].get<double>(), 0.99);

    run(s, d.base.substr(d.base.rfind('/') + 1),
        "DISPLAY=:0 xdotool search --class xterm windowmove 40 300");
    cv::Rect moved;
    ASSERT_TRUE(eventually([&] {
        auto now = d.find_terminal();
        if (now) moved = *now;
        return now && (moved.x != d.terminal.x || moved.y != d.terminal.y);
    }));
    // The window repaints after it moved, later on a loaded machine: wait for the image itself
    // (a timer-based "stable" could end before the repaint began).
    auto appeared =
        s.post(d.base + "/wait",
               {{"until", "image"}, {"image", templ}, {"threshold", 0.8}, {"timeout_ms", 20000}});
    ASSERT_TRUE(appeared.js()["matched"]) << appeared.body;
    found = s.post(d.base + "/locate", {{"image", templ}, {"threshold", 0.8}});
    ASSERT_EQ(found.status, 200u) << found.body;
    ASSERT_FALSE(found.js()["matches"].empty()) << found.body;
    json best = found.js()["matches"][0];
    EXPECT_NEAR(best["x"].get<int>(), cut.x - d.terminal.x + moved.x, 2) << found.body;
    EXPECT_NEAR(best["y"].get<int>(), cut.y - d.terminal.y + moved.y, 2) << found.body;
    // Looking only where the window is not finds nothing.
    found = s.post(d.base + "/locate",
                   {{"image", templ}, {"region", {800, 0, 480, 200}}, {"threshold", 0.8}});
    EXPECT_TRUE(found.js()["matches"].empty()) << found.body;
}

TEST(AnalysisApi, WaitAnswersWhenItsRegionChangesAndOnlyThen) {
    REQUIRE_TEMPLATE();
    Server s;
    Desktop d(s);
    ASSERT_FALSE(d.base.empty());
    d.type_in_terminal("");
    ASSERT_TRUE(
        s.post(d.base + "/wait", {{"until", "stable"}, {"stable_ms", 500}}).js()["matched"]);
    const json terminal_region = {d.terminal.x, d.terminal.y, d.terminal.width, d.terminal.height};
    // Both waits count from the frame before the typing (`since`), so whether a wait is already
    // waiting when the keys land or starts just after, it sees exactly this change: no sleep
    // to order them.
    auto before = s.post(d.base + "/locate", {{"text", "ZZZ"}}).js()["frame_version"];
    // A far corner of the desktop: typing in the terminal does not change it.
    auto quiet = std::async(std::launch::async, [&] {
        return s.post(d.base + "/wait", {{"until", "change"},
                                         {"since", before},
                                         {"region", {0, 700, 200, 100}},
                                         {"timeout_ms", 3000}});
    });
    auto waiting = std::async(std::launch::async, [&] {
        return s.post(d.base + "/wait", {{"until", "change"},
                                         {"since", before},
                                         {"region", terminal_region},
                                         {"timeout_ms", 20000}});
    });
    d.act({{"type", "type"}, {"text", "ZZZ"}});
    auto changed = waiting.get();
    ASSERT_EQ(changed.status, 200u) << changed.body;
    EXPECT_TRUE(changed.js()["matched"]) << changed.body;
    EXPECT_GT(changed.js()["frame_version"].get<std::uint64_t>(), before.get<std::uint64_t>());
    const json changed_rects = changed.js()["changed"];
    ASSERT_FALSE(changed_rects.empty());
    for (auto& r : changed_rects) {
        cv::Rect box(r[0], r[1], r[2], r[3]);
        EXPECT_EQ(box & d.terminal, box) << changed.body;
        EXPECT_LT(box.area(), d.terminal.area() / 4) << "only the typed characters changed";
    }
    auto still = quiet.get();
    ASSERT_EQ(still.status, 200u) << still.body;
    EXPECT_FALSE(still.js()["matched"]) << still.body;

    // `since` closes the race between an action and the wait after it.
    auto mark = s.post(d.base + "/ocr", {{"region", {0, 0, 10, 10}}}).js()["frame_version"];
    d.act({{"type", "type"}, {"text", "Y"}});
    auto after = s.post(
        d.base + "/wait",
        {{"until", "change"}, {"since", mark}, {"region", terminal_region}, {"timeout_ms", 20000}});
    EXPECT_TRUE(after.js()["matched"]) << after.body;
    // And gone: the typed text disappears once the line is erased.
    d.act({{"type", "key"}, {"keys", "ctrl+u"}});
    auto gone =
        s.post(d.base + "/wait", {{"until", "gone"}, {"text", "ZZZY"}, {"timeout_ms", 20000}});
    EXPECT_TRUE(gone.js()["matched"]) << gone.body;
}

TEST(AnalysisApi, CompareReportsExactlyTheRegionThatChanged) {
    REQUIRE_TEMPLATE();
    Server s;
    Desktop d(s);
    ASSERT_FALSE(d.base.empty());
    ASSERT_TRUE(
        s.post(d.base + "/wait", {{"until", "stable"}, {"stable_ms", 500}}).js()["matched"]);
    cv::Mat screen = d.screenshot();
    auto same = s.post(d.base + "/compare", {{"baseline", png_base64(screen)}});
    ASSERT_EQ(same.status, 200u) << same.body;
    EXPECT_TRUE(same.js()["identical"]);
    EXPECT_EQ(same.js()["ssim"], 1.0);
    EXPECT_TRUE(same.js()["psnr"].is_null());

    // The baseline differs from the screen in one known rect.
    cv::Mat painted = screen.clone();
    cv::rectangle(painted, cv::Rect(200, 300, 50, 40), cv::Scalar(1, 254, 3), cv::FILLED);
    auto diff = s.post(d.base + "/compare", {{"baseline", png_base64(painted)}, {"diff", true}});
    ASSERT_EQ(diff.status, 200u) << diff.body;
    EXPECT_FALSE(diff.js()["identical"]);
    EXPECT_LT(diff.js()["ssim"].get<double>(), 1.0);
    EXPECT_EQ(diff.js()["changed"], json::array({json::array({200, 300, 50, 40})})) << diff.body;
    EXPECT_EQ(diff.js()["changed_pixels"], 50 * 40);
    auto diff_png = base64_decode(diff.js()["diff_image"].get<std::string>());
    ASSERT_TRUE(diff_png);
    EXPECT_EQ(decode_png(*diff_png).cols, 1280);
    auto masked = s.post(d.base + "/compare",
                         {{"baseline", png_base64(painted)}, {"mask", {{190, 290, 70, 60}}}});
    EXPECT_TRUE(masked.js()["identical"]) << masked.body;
    // A region: the baseline is that region, boxes stay in screen coordinates.
    auto region = s.post(d.base + "/compare",
                         {{"baseline", png_base64(painted(cv::Rect(100, 250, 300, 200)).clone())},
                          {"region", {100, 250, 300, 200}}});
    ASSERT_EQ(region.status, 200u) << region.body;
    EXPECT_EQ(region.js()["changed"], json::array({json::array({200, 300, 50, 40})}));

    // A real change: typing changes the terminal and nothing else.
    d.type_in_terminal("W");
    ASSERT_TRUE(
        s.post(d.base + "/wait", {{"until", "text"}, {"text", "$ W"}, {"timeout_ms", 20000}})
            .js()["matched"]);
    auto typed = s.post(d.base + "/compare", {{"baseline", png_base64(screen)}});
    const json typed_rects = typed.js()["changed"];
    ASSERT_FALSE(typed_rects.empty()) << typed.body;
    for (auto& r : typed_rects) {
        cv::Rect box(r[0], r[1], r[2], r[3]);
        EXPECT_EQ(box & d.terminal, box) << typed.body;
    }
}

TEST(AnalysisApi, ScaledSandboxesAnswerInTheClientsPixels) {
    REQUIRE_TEMPLATE();
    Server s;
    Desktop d(s, {{"api_resolution", {1024, 640}}});
    ASSERT_FALSE(d.base.empty());
    ASSERT_TRUE(
        s.post(d.base + "/wait", {{"until", "stable"}, {"stable_ms", 500}}).js()["matched"]);
    // Unsized, a screenshot is at the API size: the pixels every coordinate is in.
    cv::Mat screen = decode_png(s.get(d.base + "/screenshot").body);
    ASSERT_EQ(screen.cols, 1024);
    ASSERT_EQ(screen.rows, 640);
    EXPECT_EQ(decode_png(s.get(d.base + "/screenshot?width=1024&height=640").body).cols, 1024);
    // windows answers in API pixels too: the terminal's box, scaled from the 1280x800 screen,
    // is where the screenshot shows it.
    const int x = d.terminal.x, y = d.terminal.y;
    EXPECT_LE(d.terminal.x + d.terminal.width, 1024 + 1);
    const cv::Rect cut(x, y - 14, 80, 50);
    auto found = s.post(d.base + "/locate", {{"image", png_base64(screen(cut).clone())}});
    ASSERT_EQ(found.status, 200u) << found.body;
    ASSERT_FALSE(found.js()["matches"].empty()) << found.body;
    EXPECT_EQ(found.js()["matches"][0]["x"], cut.x);
    EXPECT_EQ(found.js()["matches"][0]["y"], cut.y);
    auto bad = s.post(d.base + "/compare", {{"baseline", png_base64(cv::Mat(800, 1280, CV_8UC3))}});
    EXPECT_EQ(bad.status, 400u);
    EXPECT_EQ(error_field(bad), "baseline");
    // A target resolves in API pixels and lands on the right screen pixel.
    auto moved =
        d.act({{"type", "move"}, {"target", {{"image", png_base64(screen(cut).clone())}}}});
    ASSERT_EQ(moved.status, 200u) << moved.body;
    EXPECT_EQ(moved.js()["results"][0]["target"]["center"],
              json::array({cut.x + cut.width / 2, cut.y + cut.height / 2}));
    // GET /cursor answers in the pixels the move was given in (not the screen's 1280x800).
    ASSERT_EQ(d.act({{"type", "move"}, {"x", 1000}, {"y", 600}}).status, 200u);
    EXPECT_EQ(s.get(d.base + "/cursor").js(), json({{"x", 1000}, {"y", 600}}));
    auto reported = d.act({{"type", "cursor_position"}});
    EXPECT_EQ(reported.js()["results"][0], json({{"x", 1000}, {"y", 600}})) << reported.body;
}

TEST(AnalysisApi, BadRequestsGetA400NamingTheField) {
    REQUIRE_TEMPLATE();
    Server s;
    Desktop d(s);
    ASSERT_FALSE(d.base.empty());
    const std::string small = png_base64(cv::Mat(8, 8, CV_8UC3, cv::Scalar(1, 2, 3)));
    const std::string wide = png_base64(cv::Mat(10, 1300, CV_8UC3, cv::Scalar(1, 2, 3)));
    struct Case {
        std::string route;
        json body;
        std::string field;
    };
    const std::vector<Case> cases = {
        {"locate", {{"image", "%%%"}}, "image"},
        {"locate", {{"image", base64_encode(std::string_view("GIF89a not a png"))}}, "image"},
        {"locate", {{"image", wide}}, "image"},
        {"locate", {{"image", 17}}, "image"},
        {"locate", json::object(), "image"},
        {"locate", {{"text", "  "}}, "text"},
        {"locate", {{"text", "a"}, {"image", small}}, "text"},
        {"locate", {{"image", small}, {"threshold", 2}}, "threshold"},
        {"locate", {{"image", small}, {"max_results", 0}}, "max_results"},
        {"locate", {{"image", small}, {"scales", {9}}}, "scales"},
        {"locate", {{"image", small}, {"region", {1200, 700, 200, 200}}}, "region"},
        {"locate", {{"image", small}, {"region", "all"}}, "region"},
        {"locate", {{"image", small}, {"colour", true}}, "colour"},
        {"locate", {{"text", "a"}, {"lang", "../../etc"}}, "lang"},
        {"locate", {{"text", "a"}, {"lang", "xyz"}}, "lang"},
        {"ocr", {{"region", {0, 0, 0, 10}}}, "region"},
        {"ocr", {{"min_confidence", 101}}, "min_confidence"},
        {"compare", json::object(), "baseline"},
        {"compare", {{"baseline", small}}, "baseline"},
        {"compare", {{"baseline", small}, {"region", {0, 0, 8, 8}}, {"mask", {{0, 0}}}}, "mask[0]"},
        {"compare",
         {{"baseline", small}, {"region", {0, 0, 8, 8}}, {"tolerance", 300}},
         "tolerance"},
        {"wait", json::object(), "until"},
        {"wait", {{"until", "soon"}}, "until"},
        {"wait", {{"until", "image"}}, "image"},
        {"wait", {{"until", "change"}, {"timeout_ms", -1}}, "timeout_ms"},
        {"wait", {{"until", "change"}, {"since", 1u << 30}}, "since"},
        {"wait", {{"until", "change"}, {"stable_ms", 10}}, "stable_ms"},
        {"actions", {{"type", "click"}, {"x", 1}, {"target", {{"text", "a"}}}}, "x"},
        {"actions", {{"type", "click"}, {"target", "OK"}}, "target"},
        {"actions", {{"type", "click"}, {"target", {{"text", "a"}, {"when", 1}}}}, "target.when"},
        {"actions",
         {{"actions", {{{"type", "click"}, {"target", {{"image", "!"}}}}}}},
         "actions[0].target.image"},
    };
    for (const auto& c : cases) {
        auto a = s.post(d.base + "/" + c.route, c.body);
        EXPECT_EQ(a.status, 400u) << c.route << " " << c.body.dump().substr(0, 200) << ": "
                                  << a.body;
        EXPECT_EQ(error_field(a), c.field) << c.route << " " << c.body.dump().substr(0, 200);
    }
    // Not JSON at all, and a body that is not an object.
    EXPECT_EQ(s.call(http::verb::post, d.base + "/wait", "{nope").status, 400u);
    EXPECT_EQ(s.post(d.base + "/ocr", json::array()).status, 400u);
    EXPECT_EQ(s.get(d.base + "/ocr").status, 405u);
    // The sandbox still answers, and no wait is left behind holding a slot.
    for (int i = 0; i < 6; ++i)
        EXPECT_EQ(s.post(d.base + "/wait", {{"until", "stable"}, {"stable_ms", 1}}).status, 200u);
}

}  // namespace
}  // namespace deskbox
