// The actions endpoint's answers per dialect (replies.hpp).
#include "input/dialects/replies.hpp"

namespace deskbox::input {

using nlohmann::json;

namespace {

json anthropic_tool_result(const std::string& call_id, const PngImage& screenshot) {
    json content = json::array();
    content.push_back(
        {{"type", "image"},
         {"source",
          {{"type", "base64"}, {"media_type", "image/png"}, {"data", screenshot.base64}}}});
    json item = {{"type", "tool_result"}, {"content", std::move(content)}};
    if (!call_id.empty()) item["tool_use_id"] = call_id;
    return item;
}

json openai_computer_call_output(const std::string& call_id, const PngImage& screenshot) {
    json item = {{"type", "computer_call_output"},
                 {"output",
                  {{"type", "computer_screenshot"},
                   {"image_url", "data:image/png;base64," + screenshot.base64}}}};
    if (!call_id.empty()) item["call_id"] = call_id;
    return item;
}

}  // namespace

const char* dialect_name(Dialect dialect) {
    switch (dialect) {
        case Dialect::native:
            return "native";
        case Dialect::anthropic:
            return "anthropic";
        case Dialect::openai:
            return "openai";
    }
    return "native";
}

json png_json(const PngImage& image) {
    return json{{"format", "png"},
                {"width", image.width},
                {"height", image.height},
                {"base64_image", image.base64}};
}

json action_reply(Dialect dialect, const std::string& call_id, json results,
                  const std::optional<PngImage>& screenshot) {
    json answer = {{"results", std::move(results)}};
    if (!screenshot) return answer;
    answer["screenshot"] = png_json(*screenshot);
    if (dialect == Dialect::anthropic)
        answer["tool_result"] = anthropic_tool_result(call_id, *screenshot);
    else if (dialect == Dialect::openai)
        answer["computer_call_output"] = openai_computer_call_output(call_id, *screenshot);
    return answer;
}

}  // namespace deskbox::input
