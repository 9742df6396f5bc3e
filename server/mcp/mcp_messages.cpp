#include "server/mcp/mcp_messages.hpp"

#include "common/base64.hpp"
#include "server/http/api_error.hpp"

namespace deskbox::server::mcp {

using nlohmann::json;

std::string unbase64(const std::string& text) {
    auto bytes = base64_decode(text);
    if (!bytes) throw bad_request("content", "not base64");
    return std::move(*bytes);
}

json text_content(const std::string& text) {
    return {{"type", "text"}, {"text", text}};
}

json image_content(const std::string& base64_data, const std::string& mime) {
    return {{"type", "image"}, {"mimeType", mime}, {"data", base64_data}};
}

json tool_error(const std::string& message) {
    return {{"content", json::array({text_content(message)})}, {"isError", true}};
}

HttpResponse rpc_answer(unsigned status, const json& body) {
    HttpResponse res{static_cast<http::status>(status), 11};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::cache_control, "no-store");
    res.body() = body.dump(-1, ' ', false, json::error_handler_t::replace);
    return res;
}

json rpc_error(const json& id, int code, const std::string& message) {
    return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

// Arguments of a tool: an object whose keys are all in `allowed`.
RequestReader tool_arguments(const json& arguments) {
    if (!arguments.is_object()) throw RpcFailure{kInvalidParams, "arguments must be an object"};
    return RequestReader(arguments);
}

json tool_arguments_object(const json& arguments) {
    if (!arguments.is_object()) throw RpcFailure{kInvalidParams, "arguments must be an object"};
    return arguments;
}

std::optional<std::string> take_sandbox_id(json& arguments) {
    auto it = arguments.find("sandbox_id");
    if (it == arguments.end() || it->is_null()) {
        if (it != arguments.end()) arguments.erase(it);
        return std::nullopt;
    }
    if (!it->is_string()) throw bad_request("sandbox_id", "expected a string");
    std::string id = *it;
    arguments.erase(it);
    return id;
}

std::string string_argument(const json& arguments, const char* name, bool required) {
    auto it = arguments.find(name);
    if (it == arguments.end() || it->is_null()) {
        if (required) throw bad_request(name, "required");
        return {};
    }
    if (!it->is_string()) throw bad_request(name, "expected a string");
    return *it;
}

json tool_result(json content, const json& structured) {
    json result = {{"content", std::move(content)}, {"isError", false}};
    if (!structured.is_null()) result["structuredContent"] = structured;
    return result;
}

}  // namespace deskbox::server::mcp
