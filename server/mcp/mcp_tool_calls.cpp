#include "server/mcp/mcp_tool_calls.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>

#include "common/base64.hpp"
#include "common/utf8.hpp"
#include "server/http/api_error.hpp"
#include "server/mcp/mcp_messages.hpp"
#include "server/sandbox/accessibility.hpp"
#include "server/sandbox/action_request.hpp"
#include "server/sandbox/agent_client.hpp"
#include "server/sandbox/request_reader.hpp"
#include "server/sandbox/sandbox.hpp"
#include "server/sandbox/screen_request.hpp"

namespace deskbox::server::mcp {

using nlohmann::json;

std::shared_ptr<Sandbox> ToolContext::target(const json& arguments) const {
    return target_id(string_argument(arguments, "sandbox_id", false));
}

std::shared_ptr<Sandbox> ToolContext::target_id(std::string id) const {
    if (id.empty()) id = session.sandbox;
    if (id.empty())
        throw bad_request("sandbox_id",
                          "no sandbox: call create_sandbox first, or give sandbox_id");
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
        answer = sandbox->input().actions(
            read_actions_request(input, input::Dialect::anthropic, !returns_image));
    } catch (const SandboxError& e) {
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

// One Claude turn's computer tool_use blocks, relayed whole: each answered by its tool_result
// (structuredContent.tool_results, ready for the next user message), their content flattened
// into the MCP content.
json computer_tool_uses(ToolContext& context, const json& arguments) {
    RequestReader reader = tool_arguments(arguments);
    const auto sandbox_id = reader.string("sandbox_id");
    const auto screenshot = reader.boolean("screenshot").value_or(false);
    const json* blocks = reader.raw("tool_uses");
    reader.finish();
    if (!blocks || !blocks->is_array())
        throw bad_request("tool_uses", "required: the list of one turn's tool_use blocks");
    auto sandbox = context.target_id(sandbox_id.value_or(""));
    json answer;
    try {
        answer = sandbox->input().actions(
            read_actions_request(*blocks, input::Dialect::anthropic, screenshot));
    } catch (const SandboxError& e) {
        if (e.code() != "invalid_action") throw;
        // The list's fields ("[2].input.coordinate[0]") as the argument names them.
        return tool_error(e.field().rfind('[', 0) == 0 ? "tool_uses" + std::string(e.what())
                                                       : std::string(e.what()));
    }
    json content = json::array();
    const json tool_results = answer["tool_results"];
    for (const json& item : tool_results)
        for (const json& block : item["content"])
            content.push_back(block["type"] == "image"
                                  ? image_content(block["source"]["data"].get<std::string>())
                                  : text_content(block["text"].get<std::string>()));
    return tool_result(std::move(content), {{"tool_results", tool_results}});
}

json screenshot(ToolContext& context, const json& arguments) {
    RequestReader reader = tool_arguments(arguments);
    const auto sandbox_id = reader.string("sandbox_id");
    const auto format = reader.string("format");
    reader.finish();
    auto sandbox = context.target_id(sandbox_id.value_or(""));
    // At the API resolution, as the computer tool's coordinates are.
    streaming::EncodeOptions options = sandbox->screen().api_sized();
    if (format) {
        try {
            options.format = streaming::parse_image_format(*format);
        } catch (const std::invalid_argument&) {
            throw bad_request("format", "expected png, jpeg or webp");
        }
    }
    auto image = sandbox->screen().screenshot(options);
    std::string bytes(image.bytes.begin(), image.bytes.end());
    return {{"content", json::array({image_content(base64_encode(bytes), image.content_type)})},
            {"isError", false}};
}

json screen_tool(ToolContext& context, const json& arguments, const std::string& name) {
    auto sandbox = context.target(arguments);
    json request = arguments;
    request.erase("sandbox_id");
    if (name == "read_screen") {
        json r = sandbox->screen().ocr(read_ocr_request(request));
        return {{"content", json::array({text_content(r.value("text", ""))})},
                {"structuredContent", r},
                {"isError", false}};
    }
    if (name == "find_on_screen") {
        json r = sandbox->screen().locate(read_locate_request(request));
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
    json r = sandbox->screen().wait(read_wait_request(request));
    std::string text = std::string(r.value("matched", false) ? "matched" : "timed out") +
                       " after " + r["elapsed_ms"].dump() + " ms";
    if (r.contains("match"))
        text += ": at " + r["match"]["center"][0].dump() + "," + r["match"]["center"][1].dump();
    return {{"content", json::array({text_content(text)})},
            {"structuredContent", r},
            {"isError", false}};
}

// One element as a line: role "name" ref (x,y wxh) [states].
std::string element_line(const json& node, int depth) {
    std::string line(static_cast<std::size_t>(depth) * 2, ' ');
    line += node.value("role", "") + " \"" + node.value("name", "") + "\" " + node.value("ref", "");
    if (node.contains("bounds")) {
        const json& b = node["bounds"];
        line += " (" + b["x"].dump() + "," + b["y"].dump() + " " + b["width"].dump() + "x" +
                b["height"].dump() + ")";
    }
    if (node.contains("text")) line += " text=" + node["text"].dump();
    if (node.contains("value")) line += " value=" + node["value"].dump();
    line += "\n";
    for (const auto& child : node.value("children", json::array()))
        line += element_line(child, depth + 1);
    return line;
}

// accessibility_tree, find_element, act_on_element: the REST routes' answers (bounds in API
// pixels) with an outline for the model.
json accessibility_tool(ToolContext& context, const json& arguments, const std::string& name) {
    if (!arguments.is_object()) throw RpcFailure{kInvalidParams, "arguments must be an object"};
    auto sandbox = context.target(arguments);
    json request = arguments;
    request.erase("sandbox_id");
    AgentClient& agent = sandbox->agent_client();
    json r;
    if (name == "act_on_element") {
        r = act_on_accessible(agent, sandbox->input(), sandbox->screen(), request);
    } else {
        r = name == "accessibility_tree" ? agent.accessibility_tree(request)
                                         : agent.accessibility_find(request);
        accessible_bounds_to_api(r, sandbox->screen().size(), sandbox->screen().scaler());
    }
    std::string text;
    for (const char* list : {"windows", "matches"})
        for (const auto& node : r.value(list, json::array())) text += element_line(node, 0);
    if (r.contains("node"))
        text = "done: " + r.value("action", "") + "\n" + element_line(r["node"], 0);
    if (text.empty()) text = "no element matches\n";
    return {{"content", json::array({text_content(text)})},
            {"structuredContent", r},
            {"isError", false}};
}

// Output kept for the answer, per stream: a foreground command's limit in the agent.
constexpr std::size_t kToolOutputLimit = 256 << 10;
constexpr std::size_t kProgressLineLimit = 1000;

// What a followed command printed: kept for the answer (up to the limit) and, when the client
// asked for progress, reported a line at a time as it comes.
class FollowedOutput {
  public:
    explicit FollowedOutput(McpCallControl* control)
        : control_(control && control->wants_progress() ? control : nullptr) {}
    void add(const CommandEvent& output) {
        const int i = output.stream == "stderr" ? 1 : 0;
        const std::size_t room = kToolOutputLimit - std::min(kToolOutputLimit, kept_[i].size());
        kept_[i].append(output.data, 0, room);
        truncated_[i] = truncated_[i] || output.data.size() > room;
        if (!control_) return;
        std::string& line = lines_[i];
        for (char c : output.data) {
            if (c == '\n') {
                report(line);
                line.clear();
            } else if (line.size() < kProgressLineLimit) {
                line += c;
            }
        }
    }
    void finish_into(json& result) {
        const char* names[2] = {"stdout", "stderr"};
        for (int i = 0; i < 2; ++i) {
            if (!lines_[i].empty()) report(std::exchange(lines_[i], {}));
            if (truncated_[i]) kept_[i].resize(utf8::trim_partial(kept_[i]));
            result[names[i]] = utf8::to_valid(kept_[i]);
            if (truncated_[i]) result[std::string(names[i]) + "_truncated"] = true;
        }
    }

  private:
    void report(const std::string& line) { control_->report(utf8::to_valid(line)); }
    McpCallControl* control_;
    std::string kept_[2], lines_[2];
    bool truncated_[2] = {false, false};
};

// A command the call follows: run as a stream command, so its output can be reported as it
// comes and the command killed in the guest when the call is cancelled; answered like a
// foreground command (exit_code, stdout, stderr, timed_out).
json follow_command(ToolContext& context, Sandbox& sandbox, CommandRequest command) {
    const auto started = std::chrono::steady_clock::now();
    const double timeout_s = command.timeout_s.value_or(CommandRequest::kDefaultTimeoutS);
    command.stream = true;
    auto& agent = sandbox.agent_client();
    const CommandResult start = agent.run_command(std::move(command), Caller::mcp);
    if (!start.pid)
        throw SandboxError(SandboxFault::agent_failed, "agent_failed",
                           "the agent started the command without a pid");
    const long long pid = *start.pid;
    auto watch = sandbox.command_streams().watch(static_cast<pid_t>(pid));
    McpCallControl* control = context.control;
    if (control)
        control->on_cancel([&agent, pid] {
            try {
                agent.signal_command(pid, "KILL", Caller::mcp);
            } catch (const SandboxError&) {  // it ended meanwhile
            }
        });
    struct StopFollowing {
        McpCallControl* control;
        ~StopFollowing() {
            if (control) control->on_cancel({});
        }
    } stop_following{control};
    FollowedOutput output(control);
    // The agent ends it at its timeout; its exit comes well before this.
    const auto deadline = started +
                          std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000)) +
                          std::chrono::seconds(30);
    while (true) {
        auto event = watch->next(deadline);
        if (!event)
            throw SandboxError(SandboxFault::timed_out, "agent_timeout",
                               "command " + std::to_string(pid) + " did not end by its timeout");
        if (event->kind == CommandEvent::Kind::output) {
            output.add(*event);
            continue;
        }
        if (event->kind == CommandEvent::Kind::lost)
            throw SandboxError(SandboxFault::unavailable, "agent_unavailable", event->data);
        if (control && control->cancelled()) throw McpCallCancelled{};
        const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - started);
        json result = {{"exit_code", event->exit_code},
                       {"timed_out", event->signal != 0 && elapsed.count() >= timeout_s * 1000},
                       {"duration_ms", elapsed.count()}};
        if (event->signal) result["signal"] = event->signal;
        output.finish_into(result);
        return result;
    }
}

json run_command(ToolContext& context, const json& arguments) {
    RequestReader reader = tool_arguments(arguments);
    const auto sandbox_id = reader.string("sandbox_id");
    CommandRequest command;
    command.cmd = reader.required_string("command", kAnySize);
    command.timeout_s = CommandRequest::read_timeout(reader);
    command.background = reader.boolean("background").value_or(false);
    reader.finish();
    auto sandbox = context.target_id(sandbox_id.value_or(""));
    CommandResult r;
    if (command.background) {
        r = sandbox->agent_client().run_command(std::move(command), Caller::mcp);
    } else {
        r.json = follow_command(context, *sandbox, std::move(command));
        r.exit_code = r.json["exit_code"].get<int>();
        r.stdout_text = r.json["stdout"];
        r.stderr_text = r.json["stderr"];
    }
    std::string text;
    if (r.exit_code) text += "exit code " + std::to_string(*r.exit_code) + "\n";
    if (r.json.value("timed_out", false)) text += "timed out: killed\n";
    if (r.pid && !r.exit_code) text += "started, pid " + std::to_string(*r.pid) + "\n";
    if (!r.stdout_text.empty()) text += "--- stdout ---\n" + r.stdout_text + "\n";
    if (!r.stderr_text.empty()) text += "--- stderr ---\n" + r.stderr_text + "\n";
    return tool_result(json::array({text_content(text)}), r.json);
}

// A directory's listing as the model reads it: one entry a line, directories with a slash.
std::string listing_text(const json& listing) {
    std::string text;
    for (const auto& entry : listing.value("entries", json::array()))
        text += entry.value("name", "") + (entry.value("type", "") == "dir" ? "/" : "") + "\n";
    if (listing.value("truncated", false)) text += "(more entries not listed)\n";
    return text.empty() ? "(empty directory)\n" : text;
}

json read_file(ToolContext& context, const json& arguments) {
    RequestReader reader = tool_arguments(arguments);
    const auto sandbox_id = reader.string("sandbox_id");
    const std::string path = reader.required_string("path");
    reader.finish();
    auto sandbox = context.target_id(sandbox_id.value_or(""));
    PathContents contents = sandbox->agent_client().read_path(path);
    if (contents.directory)
        return tool_result(json::array({text_content(listing_text(contents.listing))}),
                           contents.listing);
    if (utf8::is_valid(contents.bytes))
        return tool_result(json::array({text_content(contents.bytes)}));
    return tool_result(json::array({{{"type", "resource"},
                                     {"resource",
                                      {{"uri", "file://" + path},
                                       {"mimeType", "application/octet-stream"},
                                       {"blob", base64_encode(contents.bytes)}}}}}));
}

json write_file(ToolContext& context, const json& arguments) {
    RequestReader reader = tool_arguments(arguments);
    const auto sandbox_id = reader.string("sandbox_id");
    const std::string path = reader.required_string("path");
    std::string content = reader.required_string("content", kAnySize);
    const std::string encoding = reader.string("encoding").value_or("utf-8");
    reader.finish();
    if (encoding == "base64")
        content = unbase64(content);
    else if (encoding != "utf-8")
        throw bad_request("encoding", "expected utf-8 or base64");
    auto sandbox = context.target_id(sandbox_id.value_or(""));
    const std::size_t size = content.size();
    sandbox->agent_client().write_file(path, std::move(content), std::nullopt, Caller::mcp);
    return tool_result(
        json::array({text_content("wrote " + std::to_string(size) + " bytes to " + path)}));
}

json create_sandbox(ToolContext& context, const json& arguments) {
    if (!context.session.access.full)
        throw ApiError(403, "forbidden",
                       "a sandbox token cannot create sandboxes (use the API key)");
    // The create request's own parser reads these; the tool offers only some of its fields.
    RequestReader reader = tool_arguments(arguments);
    for (const char* name :
         {"template", "runtime", "resolution", "timeout_s", "network", "snapshot", "auto_resume"})
        reader.raw(name);
    reader.finish();
    auto sandbox = context.manager.create(arguments);
    context.session.sandbox = sandbox->id();
    json described = sandbox->describe(false);
    return {{"content", json::array({text_content("created sandbox " + sandbox->id() +
                                                  "; it is this session's sandbox now")})},
            {"structuredContent", described},
            {"isError", false}};
}

json kill_sandbox(ToolContext& context, const json& arguments) {
    RequestReader reader = tool_arguments(arguments);
    const auto sandbox_id = reader.string("sandbox_id");
    reader.finish();
    auto sandbox = context.target_id(sandbox_id.value_or(""));
    const std::string id = sandbox->id();
    sandbox.reset();
    json killed = context.manager.kill(id);
    if (context.session.sandbox == id) context.session.sandbox.clear();
    // The sandbox object, as create_sandbox and the REST lifecycle routes answer it.
    return {{"content", json::array({text_content("killed sandbox " + id)})},
            {"structuredContent", killed},
            {"isError", false}};
}

json snapshot_sandbox(ToolContext& context, const json& arguments) {
    // A snapshot outlives the sandbox and starts others: the API key's to make.
    if (!context.session.access.full)
        throw ApiError(403, "forbidden", "a sandbox token cannot save snapshots (use the API key)");
    json body = tool_arguments_object(arguments);
    const auto sandbox_id = take_sandbox_id(body);
    const auto request = parse_snapshot_request(body);  // as POST .../snapshots reads it
    const std::string id = context.target_id(sandbox_id.value_or(""))->id();
    json saved = context.manager.snapshot_sandbox(id, request).to_json();
    return {{"content", json::array({text_content("saved sandbox " + id + " as snapshot " +
                                                  saved.value("name", "") + " (" +
                                                  saved.value("kind", "") + ")")})},
            {"structuredContent", saved},
            {"isError", false}};
}

json fork_sandbox(ToolContext& context, const json& arguments) {
    if (!context.session.access.full)
        throw ApiError(403, "forbidden",
                       "a sandbox token cannot create sandboxes (use the API key)");
    json body = tool_arguments_object(arguments);
    const auto sandbox_id = take_sandbox_id(body);
    const auto request = parse_fork_request(body, context.manager.options().max_timeout);
    const std::string id = context.target_id(sandbox_id.value_or(""))->id();
    // As create_sandbox: the copies without their tokens.
    const auto forked = context.manager.fork(id, request);
    json answer = forked.to_json(/*with_tokens=*/false);
    std::string ids;
    for (const auto& copy : forked.sandboxes) ids += (ids.empty() ? "" : ", ") + copy->id();
    return {{"content", json::array({text_content("forked sandbox " + id + " into " + ids)})},
            {"structuredContent", answer},
            {"isError", false}};
}

json list_sandboxes(ToolContext& context, const json& arguments) {
    tool_arguments(arguments).finish();
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
        {"kill_sandbox", kill_sandbox}, {"list_sandboxes", list_sandboxes},
        {"snapshot", snapshot_sandbox}, {"fork", fork_sandbox}};
    if (name == "computer_tool_uses") return computer_tool_uses(context, arguments);
    if (name == "wait_for" || name == "find_on_screen" || name == "read_screen")
        return screen(context, arguments);
    if (name == "accessibility_tree" || name == "find_element" || name == "act_on_element")
        return accessibility_tool(context, arguments, name);
    auto tool = kFixed.find(name);
    if (tool == kFixed.end()) throw RpcFailure{kInvalidParams, "unknown tool '" + name + "'"};
    return tool->second(context, arguments);
}

}  // namespace deskbox::server::mcp
