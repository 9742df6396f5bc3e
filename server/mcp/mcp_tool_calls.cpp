#include "server/mcp/mcp_tool_calls.hpp"

#include <algorithm>
#include <functional>
#include <map>

#include "common/base64.hpp"
#include "common/utf8.hpp"
#include "server/mcp/mcp_messages.hpp"
#include "server/sandbox/api_error.hpp"

namespace deskbox::server::mcp {

using nlohmann::json;

std::shared_ptr<Sandbox> ToolContext::target(const json& arguments) const {
    std::string id = string_argument(arguments, "sandbox_id", false);
    if (id.empty()) id = session.sandbox;
    if (id.empty())
        throw ApiError(400, "invalid_request",
                       "no sandbox: call create_sandbox first, or give sandbox_id", "sandbox_id");
    if (!session.access.full && id != session.access.sandbox)
        throw ApiError(403, "forbidden",
                       "this session may only use sandbox " + session.access.sandbox, "sandbox_id");
    return manager.find(id);
}

namespace {

json computer(ToolContext& context, const json& arguments) {
    if (!arguments.is_object()) throw RpcFailure{kInvalidParams, "arguments must be an object"};
    auto sandbox = context.target(arguments);
    json input = arguments;
    input.erase("sandbox_id");
    const std::string action = input.value("action", "");
    const bool returns_image = action == "screenshot" || action == "zoom";
    json answer;
    try {
        answer = sandbox->actions(input, input::Dialect::anthropic, !returns_image);
    } catch (const ApiError& e) {
        if (e.code() == "invalid_action")
            return tool_error(std::string(e.what()));  // the parser's words name the field
        throw;
    }
    json content = json::array();
    const json& results = answer["results"];
    if (action == "cursor_position" && !results.empty())
        content.push_back(text_content("X=" + std::to_string(results[0].value("x", 0)) +
                                       ",Y=" + std::to_string(results[0].value("y", 0))));
    if (returns_image && !results.empty())
        content.push_back(image_content(results.back().value("base64_image", "")));
    else if (answer.contains("screenshot"))
        content.push_back(image_content(answer["screenshot"].value("base64_image", "")));
    return {{"content", content}, {"isError", false}};
}

json screenshot(ToolContext& context, const json& arguments) {
    check_arguments(arguments, {"format", "sandbox_id"});
    auto sandbox = context.target(arguments);
    streaming::EncodeOptions options;
    const std::string format = string_argument(arguments, "format", false);
    if (!format.empty()) {
        try {
            options.format = streaming::parse_image_format(format);
        } catch (const std::invalid_argument&) {
            throw ApiError(400, "invalid_request", "expected png, jpeg or webp", "format");
        }
    }
    auto image = sandbox->screenshot(options);
    std::string bytes(image.bytes.begin(), image.bytes.end());
    return {{"content", json::array({image_content(base64_encode(bytes), image.content_type)})},
            {"isError", false}};
}

json screen_tool(ToolContext& context, const json& arguments, const std::string& name) {
    auto sandbox = context.target(arguments);
    json request = arguments;
    request.erase("sandbox_id");
    if (name == "read_screen") {
        json r = sandbox->ocr(request);
        return {{"content", json::array({text_content(r.value("text", ""))})},
                {"structuredContent", r},
                {"isError", false}};
    }
    if (name == "find_on_screen") {
        json r = sandbox->locate(request);
        std::string text;
        for (const auto& m : r["matches"])
            text += m.value("text", "") + " at " + m["center"][0].dump() + "," +
                    m["center"][1].dump() + " (box " + m["x"].dump() + "," + m["y"].dump() + " " +
                    m["width"].dump() + "x" + m["height"].dump() + ")\n";
        if (text.empty()) text = "not on the screen\n";
        return {{"content", json::array({text_content(text)})},
                {"structuredContent", r},
                {"isError", false}};
    }
    json r = sandbox->wait(request);
    std::string text = std::string(r.value("matched", false) ? "matched" : "timed out") +
                       " after " + r["elapsed_ms"].dump() + " ms";
    if (r.contains("match"))
        text += ": at " + r["match"]["center"][0].dump() + "," + r["match"]["center"][1].dump();
    return {{"content", json::array({text_content(text)})},
            {"structuredContent", r},
            {"isError", false}};
}

json run_command(ToolContext& context, const json& arguments) {
    check_arguments(arguments, {"command", "timeout_s", "background", "sandbox_id"});
    auto sandbox = context.target(arguments);
    json params = {{"cmd", string_argument(arguments, "command")}};
    double timeout_s = 60;
    if (arguments.contains("timeout_s")) {
        if (!arguments["timeout_s"].is_number() || arguments["timeout_s"].get<double>() < 0)
            throw ApiError(400, "invalid_request", "expected a number of seconds", "timeout_s");
        timeout_s = std::min(arguments["timeout_s"].get<double>(), 86400.0);
        params["timeout_s"] = timeout_s;
    }
    if (arguments.contains("background")) {
        if (!arguments["background"].is_boolean())
            throw ApiError(400, "invalid_request", "expected true or false", "background");
        params["background"] = arguments["background"];
    }
    params = sandbox->with_default_cwd(std::move(params));
    sandbox->audit("mcp.run_command", params);
    auto reply =
        sandbox->call("exec.run", params, {},
                      std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000) + 15000));
    const json& r = reply.result;
    std::string text;
    if (r.contains("exit_code")) text += "exit code " + r["exit_code"].dump() + "\n";
    if (r.contains("pid") && !r.contains("exit_code"))
        text += "started, pid " + r["pid"].dump() + "\n";
    if (!r.value("stdout", "").empty()) text += "--- stdout ---\n" + r.value("stdout", "") + "\n";
    if (!r.value("stderr", "").empty()) text += "--- stderr ---\n" + r.value("stderr", "") + "\n";
    return {{"content", json::array({text_content(text)})},
            {"structuredContent", r},
            {"isError", false}};
}

json read_file(ToolContext& context, const json& arguments) {
    check_arguments(arguments, {"path", "sandbox_id"});
    auto sandbox = context.target(arguments);
    const std::string path = string_argument(arguments, "path");
    auto reply = sandbox->call("files.read", {{"path", path}}, {}, std::chrono::minutes(5));
    if (utf8::is_valid(reply.body))
        return {{"content", json::array({text_content(reply.body)})}, {"isError", false}};
    return {{"content", json::array({{{"type", "resource"},
                                      {"resource",
                                       {{"uri", "file://" + path},
                                        {"mimeType", "application/octet-stream"},
                                        {"blob", base64_encode(reply.body)}}}}})},
            {"isError", false}};
}

json write_file(ToolContext& context, const json& arguments) {
    check_arguments(arguments, {"path", "content", "encoding", "sandbox_id"});
    auto sandbox = context.target(arguments);
    const std::string path = string_argument(arguments, "path");
    std::string content = string_argument(arguments, "content");
    const std::string encoding = string_argument(arguments, "encoding", false);
    if (encoding == "base64")
        content = unbase64(content);
    else if (!encoding.empty() && encoding != "utf-8")
        throw ApiError(400, "invalid_request", "expected utf-8 or base64", "encoding");
    const std::size_t size = content.size();
    sandbox->audit("files.write", {{"path", path}, {"bytes", size}, {"via", "mcp"}});
    sandbox->call("files.write", {{"path", path}, {"parents", true}}, std::move(content),
                  std::chrono::minutes(5));
    return {{"content",
             json::array({text_content("wrote " + std::to_string(size) + " bytes to " + path)})},
            {"isError", false}};
}

json create_sandbox(ToolContext& context, const json& arguments) {
    if (!context.session.access.full)
        throw ApiError(403, "forbidden",
                       "a sandbox token cannot create sandboxes (use the API key)");
    check_arguments(arguments, {"template", "runtime", "resolution", "timeout_s", "network"});
    auto sandbox = context.manager.create(arguments);
    context.session.sandbox = sandbox->id();
    json described = sandbox->describe(false);
    return {{"content", json::array({text_content("created sandbox " + sandbox->id() +
                                                  "; it is this session's sandbox now")})},
            {"structuredContent", described},
            {"isError", false}};
}

json kill_sandbox(ToolContext& context, const json& arguments) {
    check_arguments(arguments, {"sandbox_id"});
    auto sandbox = context.target(arguments);
    const std::string id = sandbox->id();
    sandbox.reset();
    context.manager.kill(id);
    if (context.session.sandbox == id) context.session.sandbox.clear();
    return {{"content", json::array({text_content("killed sandbox " + id)})}, {"isError", false}};
}

json list_sandboxes(ToolContext& context, const json& arguments) {
    check_arguments(arguments, {});
    json list = json::array();
    for (const auto& s : context.manager.list())
        if (context.session.access.full || s->id() == context.session.access.sandbox)
            list.push_back(s->describe(false));
    std::string text;
    for (const auto& s : list)
        text += s.value("id", "") + "\t" + s.value("state", "") + "\t" + s.value("template", "") +
                (s.value("id", "") == context.session.sandbox ? "\t(current)" : "") + "\n";
    return {{"content", json::array({text_content(text.empty() ? "no sandboxes\n" : text)})},
            {"structuredContent", {{"sandboxes", list}}},
            {"isError", false}};
}

}  // namespace

json call_tool(ToolContext& context, const std::string& name, const json& arguments) {
    using Tool = std::function<json(ToolContext&, const json&)>;
    auto screen = [&name](ToolContext& c, const json& a) { return screen_tool(c, a, name); };
    static const std::map<std::string, Tool> kFixed = {
        {"computer", computer},         {"screenshot", screenshot},
        {"run_command", run_command},   {"read_file", read_file},
        {"write_file", write_file},     {"create_sandbox", create_sandbox},
        {"kill_sandbox", kill_sandbox}, {"list_sandboxes", list_sandboxes}};
    if (name == "wait_for" || name == "find_on_screen" || name == "read_screen")
        return screen(context, arguments);
    auto tool = kFixed.find(name);
    if (tool == kFixed.end()) throw RpcFailure{kInvalidParams, "unknown tool '" + name + "'"};
    return tool->second(context, arguments);
}

}  // namespace deskbox::server::mcp
