// Claude's computer toolset end to end (issue 32): a recorded turn of several tool_use blocks
// replayed on the real deskboxd and a `minimal` container, through REST and MCP, the tool_results
// checked against the screen; the older drag from the pointer; a zoom to the screen's far edge;
// and every bad block a 400 naming where it is.
#include <gtest/gtest.h>

#include <boost/beast/core/detail/base64.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/server/deskboxd_fixture.hpp"

namespace deskbox {
namespace {

using namespace test;

cv::Mat decode_png(const std::string& b64) {
    std::string bytes(beast::detail::base64::decoded_size(b64.size()), '\0');
    bytes.resize(beast::detail::base64::decode(bytes.data(), b64.data(), b64.size()).first);
    return cv::imdecode(std::vector<uchar>(bytes.begin(), bytes.end()), cv::IMREAD_COLOR);
}

json member(const std::string& id, const std::string& name, json input) {
    return {{"type", "tool_use"},
            {"id", id},
            {"name", name},
            {"toolset_name", "computer"},
            {"input", std::move(input)},
            {"caller", {{"type", "direct"}}}};
}

// One assistant turn as the Messages API returns it (computer_toolset_20260801).
json recorded_turn() {
    return json::array({
        member("toolu_01", "mouse_move", {{"coordinate", {200, 100}}}),
        member("toolu_02", "left_click_drag",
               {{"start_coordinate", {210, 110}}, {"coordinate", {260, 130}}}),
        member("toolu_03", "key", {{"text", "shift+Left"}, {"repeat", 3}}),
        member("toolu_04", "cursor_position", json::object()),
        member("toolu_05", "zoom", {{"region", {960, 600, 1280, 800}}}),
        member("toolu_06", "screenshot", json::object()),
    });
}

class ToolsetApi : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!template_built()) {
            GTEST_SKIP() << "template 'minimal' not built";
        }
        auto created = s_.post("/v1/sandboxes", {{"network", false}});
        ASSERT_EQ(created.status, 201u) << created.body << s_.log();
        id_ = created.js()["id"].get<std::string>();
        base_ = "/v1/sandboxes/" + id_;
    }
    void TearDown() override {
        if (!id_.empty()) {
            EXPECT_EQ(s_.del(base_).status, 200u);
        }
    }
    Answer actions(const json& body, const std::string& query = "") {
        return s_.post(base_ + "/actions?dialect=anthropic" + query, body);
    }
    // The 400's field, checked to be invalid_action.
    std::string refused_field(const json& body) {
        const Answer a = actions(body);
        EXPECT_EQ(a.status, 400u) << a.body;
        EXPECT_EQ(a.js()["error"]["code"], "invalid_action") << a.body;
        return a.js()["error"].value("field", "");
    }
    cv::Mat screen() {
        auto shot = s_.get(base_ + "/screenshot");
        return cv::imdecode(std::vector<uchar>(shot.body.begin(), shot.body.end()),
                            cv::IMREAD_COLOR);
    }

    Server s_;
    std::string id_;
    std::string base_;
};

TEST_F(ToolsetApi, ARecordedTurnIsAnsweredWithOneToolResultPerBlockInOrder) {
    const Answer a = actions(recorded_turn());
    ASSERT_EQ(a.status, 200u) << a.body;
    const json answer = a.js();
    ASSERT_EQ(answer["results"].size(), 6u);
    const json results = answer["tool_results"];
    ASSERT_EQ(results.size(), 6u);
    for (std::size_t i = 0; i < results.size(); ++i) {
        EXPECT_EQ(results[i]["type"], "tool_result") << i;
        EXPECT_EQ(results[i]["tool_use_id"], "toolu_0" + std::to_string(i + 1)) << i;
        EXPECT_EQ(results[i]["toolset_name"], "computer") << i;
        ASSERT_EQ(results[i]["content"].size(), 1u) << i;
    }
    EXPECT_EQ(results[0]["content"][0], json({{"type", "text"}, {"text", "mouse_move: done"}}));
    EXPECT_EQ(results[3]["content"][0]["text"], "X=260,Y=130") << "where the drag ended";
    EXPECT_FALSE(answer.contains("screenshot")) << "no screen unless asked";

    // The zoom to the far edge is the bottom-right quarter, pixel for pixel; the screenshot is
    // the screen.
    const cv::Mat now = screen();
    ASSERT_EQ(now.cols, 1280);
    const json& zoom = results[4]["content"][0];
    EXPECT_EQ(zoom["source"]["media_type"], "image/png");
    const cv::Mat quarter = decode_png(zoom["source"]["data"]);
    ASSERT_EQ(quarter.cols, 320);
    ASSERT_EQ(quarter.rows, 200);
    EXPECT_EQ(cv::norm(quarter, now(cv::Rect(960, 600, 320, 200)), cv::NORM_INF), 0);
    const cv::Mat shot = decode_png(results[5]["content"][0]["source"]["data"]);
    EXPECT_EQ(shot.cols, 1280);
    EXPECT_EQ(shot.rows, 800);

    // One block alone, with the screen after it asked for: it ends the block's content.
    const Answer one =
        actions(member("toolu_07", "left_click", {{"coordinate", {5, 5}}}), "&screenshot=true");
    ASSERT_EQ(one.status, 200u) << one.body;
    const json only = one.js()["tool_results"];
    ASSERT_EQ(only.size(), 1u);
    EXPECT_EQ(only[0]["tool_use_id"], "toolu_07");
    ASSERT_EQ(only[0]["content"].size(), 2u);
    EXPECT_EQ(only[0]["content"][1]["type"], "image");
    EXPECT_EQ(one.js()["screenshot"]["width"], 1280);
}

TEST_F(ToolsetApi, TheSameTurnThroughMcpAnswersTheSameToolResults) {
    const auto headers = open_mcp_session(s_, "toolset-test");
    ASSERT_TRUE(headers.count("Mcp-Session-Id"));
    auto call = [&](const json& arguments) {
        const json request = {
            {"jsonrpc", "2.0"},
            {"id", 2},
            {"method", "tools/call"},
            {"params", {{"name", "computer_tool_uses"}, {"arguments", arguments}}}};
        const Answer a = s_.call(http::verb::post, "/mcp", request.dump(), headers);
        EXPECT_EQ(a.status, 200u) << a.body;
        return a.js()["result"];
    };
    const json result = call({{"sandbox_id", id_}, {"tool_uses", recorded_turn()}});
    ASSERT_EQ(result["isError"], false) << result;
    const json tool_results = result["structuredContent"]["tool_results"];
    ASSERT_EQ(tool_results.size(), 6u);
    EXPECT_EQ(tool_results[3]["content"][0]["text"], "X=260,Y=130");
    EXPECT_EQ(tool_results[5]["tool_use_id"], "toolu_06");
    const json content = result["content"];
    ASSERT_EQ(content.size(), 6u) << "each block's content, flattened";
    EXPECT_EQ(content[4]["type"], "image");
    EXPECT_EQ(content[4]["mimeType"], "image/png");

    json bad = recorded_turn();
    bad[2]["input"]["repeat"] = 0;
    const json refused = call({{"sandbox_id", id_}, {"tool_uses", bad}});
    EXPECT_EQ(refused["isError"], true);
    EXPECT_NE(refused["content"][0]["text"].get<std::string>().find("tool_uses[2].input.repeat"),
              std::string::npos)
        << refused;
}

TEST_F(ToolsetApi, TheOlderDragFromThePointerAndEarlierFormsStillRun) {
    ASSERT_EQ(actions({{"action", "mouse_move"}, {"coordinate", {300, 300}}}).status, 200u);
    Answer a = actions({{"type", "tool_use"},
                        {"id", "toolu_old"},
                        {"name", "computer"},
                        {"input", {{"action", "left_click_drag"}, {"coordinate", {350, 320}}}}},
                       "&screenshot=true");
    ASSERT_EQ(a.status, 200u) << a.body;
    EXPECT_EQ(a.js()["tool_result"]["tool_use_id"], "toolu_old");
    EXPECT_FALSE(a.js().contains("tool_results")) << "a tool-version block alone: as before";
    const json cursor = s_.get(base_ + "/cursor").js();
    EXPECT_EQ(cursor["x"], 350);
    EXPECT_EQ(cursor["y"], 320);
    a = actions({{"action", "zoom"}, {"region", {960, 600, 1280, 800}}});
    ASSERT_EQ(a.status, 200u) << a.body;
    EXPECT_EQ(a.js()["results"][0]["width"], 320);
    EXPECT_EQ(a.js()["results"][0]["height"], 200);
}

TEST_F(ToolsetApi, EveryBadBlockIsA400NamingTheBlockAndField) {
    json turn = recorded_turn();
    turn[4]["input"]["region"] = {960, 600, 1281, 800};
    EXPECT_EQ(refused_field(turn), "[4].input.region[2]");
    EXPECT_EQ(refused_field({{"action", "zoom"}, {"region", {0, 0, 100, 801}}}), "region[3]");
    turn = recorded_turn();
    turn[1]["name"] = "fly";
    EXPECT_EQ(refused_field(turn), "[1].name");
    turn = recorded_turn();
    turn[0]["input"].erase("coordinate");
    EXPECT_EQ(refused_field(turn), "[0].input.coordinate");
    turn = recorded_turn();
    turn[3]["input"] = {{"coordinate", "here"}};
    EXPECT_EQ(refused_field(turn), "[3].input.coordinate");
    turn = recorded_turn();
    turn.push_back({{"type", "tool_use"},
                    {"id", "toolu_x"},
                    {"name", "computer"},
                    {"input", {{"action", "screenshot"}}}});
    EXPECT_EQ(refused_field(turn), "[6].input.action") << "a mixed list";
    turn = recorded_turn();
    turn[5] = {{"type", "text"}, {"text", "Let me look."}};
    EXPECT_EQ(refused_field(turn), "[5].type");
    EXPECT_EQ(refused_field(json::array()), "body");
    // Nothing of a refused turn ran.
    const int x = s_.get(base_ + "/cursor").js()["x"];
    EXPECT_TRUE(x != 200 && x != 260) << x;
}

}  // namespace
}  // namespace deskbox
