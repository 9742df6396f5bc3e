// What the actions endpoint answers, in the dialect the request came in: the results, and with
// a screenshot the screen after the actions, ready to paste into the model's conversation as
// its dialect's tool result (Anthropic's tool_result block, OpenAI's computer_call_output item).
// The parsers' counterpart (parse.hpp): a dialect's requests and replies are read and written
// here, in input/, and nothing in the server formats them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "input/actions.hpp"

namespace deskbox::input {

// A PNG the server took (a screenshot, a zoom), base64-encoded for JSON.
struct PngImage {
    std::string base64;
    int width = 0;
    int height = 0;
};

// "native", "anthropic" or "openai": parse_dialect's inverse.
const char* dialect_name(Dialect dialect);

// How answers carry an image: {"format":"png","width","height","base64_image"}.
nlohmann::json png_json(const PngImage& image);

// The answer to an action request: {"results": results}; with `screenshot` also
// "screenshot" (png_json) and, for anthropic, "tool_result" {"type":"tool_result",
// "tool_use_id": call_id, "content":[{"type":"image","source":{base64 PNG}}]} or, for openai,
// "computer_call_output" {"type":"computer_call_output","call_id": call_id,
// "output":{"type":"computer_screenshot","image_url":"data:image/png;base64,..."}}. An empty
// call_id (a bare action or batch) leaves tool_use_id / call_id out.
//
// A request answered block by block (`tool_uses`, one per result: a computer toolset block or a
// list of tool_use blocks) has instead "tool_results": one tool_result per block, in order,
// {"type":"tool_result","tool_use_id","toolset_name":"computer" (toolset members),"content"}:
// the image for screenshot and zoom, "X=..,Y=.." for cursor_position, "<name>: done" for the
// rest; with `screenshot`, the screen after them all ends the last block's content.
nlohmann::json action_reply(Dialect dialect, const std::string& call_id, nlohmann::json results,
                            const std::optional<PngImage>& screenshot,
                            const std::vector<ToolUse>& tool_uses = {});

}  // namespace deskbox::input
