// The actions endpoint's answers per dialect, as whole JSON documents: what a model's agent
// loop pastes into its conversation must not change shape. No screen needed: the screenshot is
// any PNG's base64.
#include "input/dialects/replies.hpp"

#include <gtest/gtest.h>

#include "input/parse.hpp"

namespace deskbox::input {
namespace {

using nlohmann::json;

const PngImage kShot{"iVBORw0KGgo=", 640, 400};
const json kResults = json::array({json::object(), {{"x", 3}, {"y", 4}}});

TEST(DialectReplies, WithoutAScreenshotEveryDialectAnswersOnlyTheResults) {
    for (Dialect dialect : {Dialect::native, Dialect::anthropic, Dialect::openai})
        EXPECT_EQ(action_reply(dialect, "call_1", kResults, std::nullopt),
                  json({{"results", kResults}}))
            << dialect_name(dialect);
}

TEST(DialectReplies, NativeAddsOnlyTheScreenshot) {
    EXPECT_EQ(action_reply(Dialect::native, "", kResults, kShot),
              json::parse(R"({"results":[{},{"x":3,"y":4}],
                  "screenshot":{"format":"png","width":640,"height":400,
                                "base64_image":"iVBORw0KGgo="}})"));
}

TEST(DialectReplies, AnthropicAnswersAToolResultQuotingTheToolUseId) {
    EXPECT_EQ(action_reply(Dialect::anthropic, "toolu_01XYZ", kResults, kShot),
              json::parse(R"({"results":[{},{"x":3,"y":4}],
                  "screenshot":{"format":"png","width":640,"height":400,
                                "base64_image":"iVBORw0KGgo="},
                  "tool_result":{"type":"tool_result","tool_use_id":"toolu_01XYZ",
                      "content":[{"type":"image","source":{"type":"base64",
                          "media_type":"image/png","data":"iVBORw0KGgo="}}]}})"));
}

TEST(DialectReplies, OpenAiAnswersAComputerCallOutputQuotingTheCallId) {
    EXPECT_EQ(action_reply(Dialect::openai, "call_7", kResults, kShot),
              json::parse(R"({"results":[{},{"x":3,"y":4}],
                  "screenshot":{"format":"png","width":640,"height":400,
                                "base64_image":"iVBORw0KGgo="},
                  "computer_call_output":{"type":"computer_call_output","call_id":"call_7",
                      "output":{"type":"computer_screenshot",
                                "image_url":"data:image/png;base64,iVBORw0KGgo="}}})"));
}

TEST(DialectReplies, ABareActionHasNoIdToQuote) {
    const json anthropic = action_reply(Dialect::anthropic, "", kResults, kShot);
    EXPECT_FALSE(anthropic["tool_result"].contains("tool_use_id")) << anthropic.dump();
    EXPECT_EQ(anthropic["tool_result"]["type"], "tool_result");
    const json openai = action_reply(Dialect::openai, "", kResults, kShot);
    EXPECT_FALSE(openai["computer_call_output"].contains("call_id")) << openai.dump();
    EXPECT_EQ(openai["computer_call_output"]["type"], "computer_call_output");
}

TEST(DialectReplies, DialectNamesAreWhatParseDialectReads) {
    for (Dialect dialect : {Dialect::native, Dialect::anthropic, Dialect::openai})
        EXPECT_EQ(parse_dialect(dialect_name(dialect)), dialect);
    EXPECT_STREQ(dialect_name(Dialect::openai), "openai");
}

TEST(DialectReplies, ImagesAreCarriedAsPngWithTheirSize) {
    EXPECT_EQ(png_json(kShot), json::parse(R"({"format":"png","width":640,"height":400,
                                                "base64_image":"iVBORw0KGgo="})"));
}

}  // namespace
}  // namespace deskbox::input
