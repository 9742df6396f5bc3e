// The actions endpoint's answers per dialect (replies.hpp).
#include "input/dialects/replies.hpp"

namespace deskbox::input {

using nlohmann::json;

namespace {

json image_block(const std::string& base64) {
    return {{"type", "image"},
            {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", base64}}}};
}

json anthropic_tool_result(const std::string& call_id, const PngImage& screenshot) {
    json content = json::array();
    content.push_back(image_block(screenshot.base64));
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

// Block i's answer from result i: its image, the pointer, or a line saying it ran.
json block_tool_result(const ToolUse& use, const json& result) {
    json content = json::array();
    const auto image = result.is_object() ? result.find("base64_image") : result.end();
    if (result.is_object() && image != result.end() && image->is_string())
        content.push_back(image_block(image->get<std::string>()));
    else if (use.name == "cursor_position" && result.contains("x") && result.contains("y"))
        content.push_back(
            {{"type", "text"}, {"text", "X=" + result["x"].dump() + ",Y=" + result["y"].dump()}});
    else
        content.push_back({{"type", "text"}, {"text", use.name + ": done"}});
    json item = {{"type", "tool_result"}, {"tool_use_id", use.id}};
    if (use.toolset) item["toolset_name"] = "computer";
    item["content"] = std::move(content);
    return item;
}

json tool_results(const std::vector<ToolUse>& tool_uses, const json& results,
                  const std::optional<PngImage>& screenshot) {
    json items = json::array();
    for (std::size_t i = 0; i < tool_uses.size(); ++i)
        items.push_back(block_tool_result(tool_uses[i], i < results.size() ? results[i] : json()));
    if (screenshot && !items.empty())
        items.back()["content"].push_back(image_block(screenshot->base64));
    return items;
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
                  const std::optional<PngImage>& screenshot,
                  const std::vector<ToolUse>& tool_uses) {
    json answer = {{"results", std::move(results)}};
    if (dialect == Dialect::anthropic && !tool_uses.empty())
        answer["tool_results"] = tool_results(tool_uses, answer["results"], screenshot);
    if (!screenshot) return answer;
    answer["screenshot"] = png_json(*screenshot);
    if (!tool_uses.empty()) return answer;
    if (dialect == Dialect::anthropic)
        answer["tool_result"] = anthropic_tool_result(call_id, *screenshot);
    else if (dialect == Dialect::openai)
        answer["computer_call_output"] = openai_computer_call_output(call_id, *screenshot);
    return answer;
}

}  // namespace deskbox::input
