// The JSON-RPC 2.0 and MCP message shapes the MCP server and its tools answer with: error
// codes, content items, tool errors, and checks of a tool's arguments.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/http/http_message.hpp"
#include "server/sandbox/request_reader.hpp"

namespace deskbox::server::mcp {

// JSON-RPC 2.0 error codes.
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kResourceNotFound = -32002;

// A JSON-RPC error to answer with (not a tool error: those are results with isError).
struct RpcFailure {
    int code;
    std::string message;
};

nlohmann::json text_content(const std::string& text);
nlohmann::json image_content(const std::string& base64_data, const std::string& mime = "image/png");
// A tool result that tells the model what went wrong (isError), so it can try again.
nlohmann::json tool_error(const std::string& message);
// A tool result with text and, when given, the structured answer.
nlohmann::json tool_result(nlohmann::json content,
                           const nlohmann::json& structured = nlohmann::json());

HttpResponse rpc_answer(unsigned status, const nlohmann::json& body);
nlohmann::json rpc_error(const nlohmann::json& id, int code, const std::string& message);

// A tool's arguments read as a REST body is (server/sandbox/request_reader.hpp): the same
// types, ranges and unknown-field rule, 400 bad_request naming the field. Not an object:
// RpcFailure kInvalidParams.
RequestReader tool_arguments(const nlohmann::json& arguments);
// The arguments as an object (invalid params when they are not one), and their "sandbox_id"
// taken out of them: what is left reads as the REST body does, with the REST body's parser.
nlohmann::json tool_arguments_object(const nlohmann::json& arguments);
std::optional<std::string> take_sandbox_id(nlohmann::json& arguments);
inline constexpr std::size_t kAnySize = static_cast<std::size_t>(-1);  // the body limit holds

std::string string_argument(const nlohmann::json& arguments, const char* name,
                            bool required = true);
std::string unbase64(const std::string& text);  // 400 naming "content" if it is not base64

}  // namespace deskbox::server::mcp
