#include "server/mcp/mcp_server.hpp"

#include <algorithm>
#include <set>

#include "common/base64.hpp"
#include "common/random.hpp"
#include "common/utf8.hpp"
#include "server/api/http_util.hpp"
#include "server/sandbox/api_error.hpp"

namespace deskbox::server {

using nlohmann::json;

namespace {

// JSON-RPC 2.0 error codes.
constexpr int kParseError = -32700;
constexpr int kInvalidRequest = -32600;
constexpr int kMethodNotFound = -32601;
constexpr int kInvalidParams = -32602;

const std::set<std::string> kKnownVersions = {"2025-11-25", "2025-06-18", "2025-03-26"};
constexpr auto kSessionIdle = std::chrono::hours(1);

// A JSON-RPC error to answer with (not a tool error: those are results with isError).
struct RpcFailure {
    int code;
    std::string message;
};

std::string unbase64(const std::string& text) {
    auto bytes = base64_decode(text);
    if (!bytes) throw ApiError(400, "invalid_request", "not base64", "content");
    return std::move(*bytes);
}

json text_content(const std::string& text) {
    return {{"type", "text"}, {"text", text}};
}

json image_content(const std::string& base64_png, const std::string& mime = "image/png") {
    return {{"type", "image"}, {"mimeType", mime}, {"data", base64_png}};
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

std::string header(const HttpRequest& request, const std::string& name) {
    auto it = request.find(name);
    return it == request.end() ? std::string() : std::string(it->value());
}

// Arguments of a tool: an object whose keys are all in `allowed`.
const json& check_arguments(const json& arguments,
                            std::initializer_list<std::string_view> allowed) {
    if (!arguments.is_object()) throw RpcFailure{kInvalidParams, "arguments must be an object"};
    for (const auto& [key, _] : arguments.items())
        if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
            throw ApiError(400, "invalid_request", "unknown argument", key);
    return arguments;
}

std::string string_argument(const json& arguments, const char* name, bool required = true) {
    auto it = arguments.find(name);
    if (it == arguments.end() || it->is_null()) {
        if (required) throw ApiError(400, "invalid_request", "required", name);
        return {};
    }
    if (!it->is_string()) throw ApiError(400, "invalid_request", "expected a string", name);
    return *it;
}

json sandbox_id_schema() {
    return {{"type", "string"},
            {"description",
             "The sandbox to act on; default: the session's (from create_sandbox or ?sandbox=)"}};
}

}  // namespace

const json& mcp_tools() {
    static const json tools = [] {
        auto described = [](json schema, const char* description) {
            schema["description"] = description;
            return schema;
        };
        json coordinate = {{"type", "array"},
                           {"items", {{"type", "integer"}, {"minimum", 0}}},
                           {"minItems", 2},
                           {"maxItems", 2}};
        // Anthropic's computer tool (computer_20251124), verbatim.
        json computer_properties = {
            {"action",
             {{"type", "string"},
              {"enum",
               {"key", "hold_key", "type", "cursor_position", "mouse_move", "left_mouse_down",
                "left_mouse_up", "left_click", "left_click_drag", "right_click", "middle_click",
                "double_click", "triple_click", "scroll", "wait", "screenshot", "zoom"}},
              {"description", "The action to perform."}}},
            {"coordinate", described(coordinate, "(x, y): where to move, click or scroll.")},
            {"start_coordinate", described(coordinate, "(x, y): where left_click_drag starts.")},
            {"text",
             {{"type", "string"},
              {"description",
               "type: the text; key/hold_key: xdotool-style keys (\"ctrl+s\"); clicks and "
               "scroll: modifier keys held (\"shift\")."}}},
            {"duration",
             {{"type", "number"},
              {"minimum", 0},
              {"description", "Seconds, for hold_key and wait."}}},
            {"scroll_direction", {{"type", "string"}, {"enum", {"up", "down", "left", "right"}}}},
            {"scroll_amount", {{"type", "integer"}, {"minimum", 1}, {"description", "Notches."}}},
            {"region",
             {{"type", "array"},
              {"items", {{"type", "integer"}, {"minimum", 0}}},
              {"minItems", 4},
              {"maxItems", 4},
              {"description", "zoom: [x0, y0, x1, y1], the corners of the region to see."}}},
            {"sandbox_id", sandbox_id_schema()}};
        json list = json::array();
        list.push_back(
            {{"name", "computer"},
             {"title", "Computer"},
             {"description",
              "Use the mouse and keyboard of a Linux desktop and see its screen. The result is "
              "a screenshot taken after the action (for zoom: the region's image)."},
             {"inputSchema",
              {{"type", "object"},
               {"properties", computer_properties},
               {"required", {"action"}}}}});
        list.push_back({{"name", "screenshot"},
                        {"title", "Screenshot"},
                        {"description", "The sandbox's screen now."},
                        {"inputSchema",
                         {{"type", "object"},
                          {"properties",
                           {{"format", {{"type", "string"}, {"enum", {"png", "jpeg", "webp"}}}},
                            {"sandbox_id", sandbox_id_schema()}}}}}});
        list.push_back(
            {{"name", "run_command"},
             {"title", "Run a shell command"},
             {"description",
              "Runs a bash command line in the sandbox as its user; answers the exit code, "
              "stdout and stderr."},
             {"inputSchema",
              {{"type", "object"},
               {"properties",
                {{"command", {{"type", "string"}}},
                 {"timeout_s", {{"type", "number"}, {"minimum", 0}}},
                 {"background", {{"type", "boolean"}, {"description", "Start it and return."}}},
                 {"sandbox_id", sandbox_id_schema()}}},
               {"required", {"command"}}}}});
        list.push_back(
            {{"name", "read_file"},
             {"title", "Read a file"},
             {"description", "A file of the sandbox: text as text, other bytes as a blob."},
             {"inputSchema",
              {{"type", "object"},
               {"properties",
                {{"path", {{"type", "string"}}}, {"sandbox_id", sandbox_id_schema()}}},
               {"required", {"path"}}}}});
        list.push_back({{"name", "write_file"},
                        {"title", "Write a file"},
                        {"description", "Creates or replaces a file (and its parent directories)."},
                        {"inputSchema",
                         {{"type", "object"},
                          {"properties",
                           {{"path", {{"type", "string"}}},
                            {"content", {{"type", "string"}}},
                            {"encoding", {{"type", "string"}, {"enum", {"utf-8", "base64"}}}},
                            {"sandbox_id", sandbox_id_schema()}}},
                          {"required", {"path", "content"}}}}});
        list.push_back(
            {{"name", "create_sandbox"},
             {"title", "Create a sandbox"},
             {"description",
              "Starts a new desktop; it becomes this session's sandbox. Same fields as POST "
              "/v1/sandboxes."},
             {"inputSchema",
              {{"type", "object"},
               {"properties",
                {{"template", {{"type", "string"}}},
                 {"runtime", {{"type", "string"}, {"enum", {"container", "microvm"}}}},
                 {"resolution",
                  {{"type", "array"},
                   {"items", {{"type", "integer"}}},
                   {"minItems", 2},
                   {"maxItems", 2}}},
                 {"timeout_s", {{"type", "integer"}, {"minimum", 1}}},
                 {"network", {{"description", "true, false or {allow, deny}"}}}}}}}});
        list.push_back(
            {{"name", "kill_sandbox"},
             {"title", "Kill a sandbox"},
             {"description", "Ends the sandbox and removes everything it had."},
             {"inputSchema",
              {{"type", "object"}, {"properties", {{"sandbox_id", sandbox_id_schema()}}}}}});
        json region = {{"type", "array"},
                       {"items", {{"type", "integer"}, {"minimum", 0}}},
                       {"minItems", 4},
                       {"maxItems", 4},
                       {"description", "[x, y, width, height]; default the whole screen."}};
        list.push_back(
            {{"name", "wait_for"},
             {"title", "Wait for the screen"},
             {"description",
              "Waits until a text shows on the screen (until=text), goes away (gone), the screen "
              "changes (change) or stops changing (stable); answers as soon as it does, or "
              "matched=false at timeout_ms. Cheaper than screenshots in a loop."},
             {"inputSchema",
              {{"type", "object"},
               {"properties",
                {{"until", {{"type", "string"}, {"enum", {"text", "gone", "change", "stable"}}}},
                 {"text", {{"type", "string"}}},
                 {"region", region},
                 {"timeout_ms", {{"type", "integer"}, {"minimum", 0}, {"maximum", 120000}}},
                 {"stable_ms", {{"type", "integer"}, {"minimum", 1}, {"maximum", 60000}}},
                 {"sandbox_id", sandbox_id_schema()}}},
               {"required", {"until"}}}}});
        list.push_back(
            {{"name", "find_on_screen"},
             {"title", "Find text on the screen"},
             {"description",
              "Where a text is on the screen (OCR): boxes and centres to click, in reading "
              "order."},
             {"inputSchema",
              {{"type", "object"},
               {"properties",
                {{"text", {{"type", "string"}}},
                 {"exact", {{"type", "boolean"}, {"description", "Whole words, case-sensitive."}}},
                 {"region", region},
                 {"sandbox_id", sandbox_id_schema()}}},
               {"required", {"text"}}}}});
        list.push_back(
            {{"name", "read_screen"},
             {"title", "Read the screen's text"},
             {"description", "The text on the screen (OCR), line by line."},
             {"inputSchema",
              {{"type", "object"},
               {"properties", {{"region", region}, {"sandbox_id", sandbox_id_schema()}}}}}});
        list.push_back({{"name", "list_sandboxes"},
                        {"title", "List sandboxes"},
                        {"description", "The sandboxes this session may use, with their state."},
                        {"inputSchema", {{"type", "object"}, {"properties", json::object()}}}});
        for (auto& tool : list) {
            const std::string name = tool["name"];
            const bool reads = name == "screenshot" || name == "read_file" ||
                               name == "list_sandboxes" || name == "wait_for" ||
                               name == "find_on_screen" || name == "read_screen";
            tool["annotations"] = {{"readOnlyHint", reads},
                                   {"destructiveHint", name == "kill_sandbox"},
                                   {"openWorldHint", false}};
        }
        return list;
    }();
    return tools;
}

McpServer::McpServer(SandboxManager& manager) : manager_(manager) {}

std::size_t McpServer::session_count() const {
    std::lock_guard lock(mutex_);
    return sessions_.size();
}

void McpServer::evict_locked() {
    const auto now = std::chrono::steady_clock::now();
    for (auto it = sessions_.begin(); it != sessions_.end();)
        it = now - it->second.last_used > kSessionIdle ? sessions_.erase(it) : std::next(it);
    while (sessions_.size() >= kMaxSessions) {
        auto oldest = std::min_element(sessions_.begin(), sessions_.end(), [](auto& a, auto& b) {
            return a.second.last_used < b.second.last_used;
        });
        sessions_.erase(oldest);
    }
}

HttpResponse McpServer::error_answer(const ApiError& e, int rpc_code) {
    json error = rpc_error(nullptr, rpc_code, e.what());
    error["error"]["data"] = {{"code", e.code()}};
    if (!e.field().empty()) error["error"]["data"]["field"] = e.field();
    return rpc_answer(e.status(), error);
}

HttpResponse McpServer::handle(const HttpRequest& request, const McpAccess& access) {
    const std::string session_id = header(request, "Mcp-Session-Id");
    if (request.method() == http::verb::get) {
        // Streamable HTTP lets a server offer no stream of its own: it never sends first.
        HttpResponse res = rpc_answer(405, rpc_error(nullptr, kInvalidRequest,
                                                     "this server sends no messages of its own "
                                                     "(no SSE stream); POST requests"));
        res.set(http::field::allow, "POST, DELETE");
        return res;
    }
    if (request.method() == http::verb::delete_) {
        std::lock_guard lock(mutex_);
        if (session_id.empty() || !sessions_.erase(session_id))
            return rpc_answer(404, rpc_error(nullptr, kInvalidRequest, "no such session"));
        HttpResponse res{http::status::no_content, 11};
        return res;
    }
    const std::string version = header(request, "MCP-Protocol-Version");
    if (!version.empty() && !kKnownVersions.count(version))
        return rpc_answer(400,
                          rpc_error(nullptr, kInvalidRequest,
                                    "unsupported MCP-Protocol-Version " + version.substr(0, 40) +
                                        " (this server speaks " + kProtocolVersion + ")"));
    json message;
    try {
        message = parse_body(request);
    } catch (const ApiError& e) {  // not JSON, too deep, or not UTF-8 (the member named)
        return error_answer(e, kParseError);
    }
    if (message.is_array())
        return rpc_answer(400, rpc_error(nullptr, kInvalidRequest,
                                         "JSON-RPC batches are not part of MCP since 2025-06-18; "
                                         "send one message per request"));
    if (!message.is_object() || message.value("jsonrpc", "") != "2.0")
        return rpc_answer(
            400, rpc_error(nullptr, kInvalidRequest, "expected a JSON-RPC 2.0 message object"));
    const json id = message.contains("id") ? message["id"] : json();
    const bool is_request = message.contains("method") && message.contains("id");
    if (message.contains("id") && !id.is_string() && !id.is_number_integer())
        return rpc_answer(400,
                          rpc_error(nullptr, kInvalidRequest, "id must be a string or an integer"));
    if (message.contains("method") && !message["method"].is_string())
        return rpc_answer(400, rpc_error(id, kInvalidRequest, "method must be a string"));
    const std::string method = message.value("method", "");
    const json params = message.contains("params") ? message["params"] : json::object();

    if (method == "initialize") {
        if (!is_request)
            return rpc_answer(400, rpc_error(nullptr, kInvalidRequest, "initialize needs an id"));
        if (!params.is_object())
            return rpc_answer(200, rpc_error(id, kInvalidParams, "params must be an object"));
        const std::string asked = params.value("protocolVersion", "");
        Session session;
        session.access = access;
        session.protocol = kKnownVersions.count(asked) ? asked : kProtocolVersion;
        session.sandbox = access.initial;
        session.last_used = std::chrono::steady_clock::now();
        if (!session.sandbox.empty()) manager_.find(session.sandbox);  // 404 for unknown ids
        const std::string new_id = random::hex(16);
        {
            std::lock_guard lock(mutex_);
            evict_locked();
            sessions_[new_id] = session;
        }
        json result = {
            {"protocolVersion", session.protocol},
            {"capabilities",
             {{"tools", {{"listChanged", false}}},
              {"resources", {{"subscribe", false}, {"listChanged", false}}}}},
            {"serverInfo",
             {{"name", "deskbox"}, {"title", "deskbox desktops"}, {"version", "0.1.0"}}},
            {"instructions",
             "Linux desktops for computer use. create_sandbox starts one (or the session already "
             "has one); computer drives its mouse and keyboard and answers with a screenshot."}};
        HttpResponse res = rpc_answer(200, {{"jsonrpc", "2.0"}, {"id", id}, {"result", result}});
        res.set("Mcp-Session-Id", new_id);
        return res;
    }

    std::unique_lock lock(mutex_);
    if (session_id.empty())
        return rpc_answer(400, rpc_error(id, kInvalidRequest,
                                         "missing Mcp-Session-Id header (initialize first)"));
    auto it = sessions_.find(session_id);
    if (it == sessions_.end())
        return rpc_answer(
            404, rpc_error(id, kInvalidRequest, "unknown or expired session; initialize again"));
    // A session belongs to whoever opened it: the same credentials must come with it.
    if (it->second.access.full != access.full || it->second.access.sandbox != access.sandbox)
        return rpc_answer(
            403, rpc_error(id, kInvalidRequest, "this session was opened with other credentials"));
    it->second.last_used = std::chrono::steady_clock::now();
    Session session = it->second;
    lock.unlock();

    // Notifications and answers to us (we ask nothing) need no reply.
    if (!is_request) {
        HttpResponse res{http::status::accepted, 11};
        return res;
    }
    json answer;
    try {
        answer = {{"jsonrpc", "2.0"}, {"id", id}, {"result", dispatch(session, method, params)}};
    } catch (const RpcFailure& f) {
        answer = rpc_error(id, f.code, f.message);
    } catch (const ApiError& e) {
        answer = rpc_error(id, kInvalidParams,
                           (e.field().empty() ? "" : e.field() + ": ") + std::string(e.what()));
    }
    lock.lock();
    if (auto again = sessions_.find(session_id); again != sessions_.end())
        again->second.sandbox = session.sandbox;
    return rpc_answer(200, answer);
}

json McpServer::dispatch(Session& session, const std::string& method, const json& params) {
    if (!params.is_object()) throw RpcFailure{kInvalidParams, "params must be an object"};
    if (method == "ping") return json::object();
    if (method == "tools/list") return {{"tools", mcp_tools()}};
    if (method == "tools/call") {
        const std::string name = params.value("name", "");
        const json arguments = params.contains("arguments") ? params["arguments"] : json::object();
        const auto& tools = mcp_tools();
        if (std::none_of(tools.begin(), tools.end(),
                         [&](const json& t) { return t["name"] == name; }))
            throw RpcFailure{kInvalidParams, "unknown tool '" + name.substr(0, 64) + "'"};
        try {
            return call_tool(session, name, arguments);
        } catch (const ApiError& e) {
            // The model should see what it got wrong and try again: a tool error, not a
            // protocol one.
            return tool_error((e.field().empty() ? "" : e.field() + ": ") + std::string(e.what()) +
                              " (" + e.code() + ")");
        }
    }
    if (method == "resources/list") {
        json list = json::array();
        for (const auto& s : manager_.list()) {
            if (!session.access.full && s->id() != session.access.sandbox) continue;
            list.push_back({{"uri", "deskbox://sandboxes/" + s->id() + "/screen"},
                            {"name", s->id() + " screen"},
                            {"title", "Screen of sandbox " + s->id()},
                            {"mimeType", "image/png"}});
        }
        return {{"resources", list}};
    }
    if (method == "resources/templates/list") {
        return {
            {"resourceTemplates", json::array({{{"uriTemplate", "deskbox://sandboxes/{id}/screen"},
                                                {"name", "screen"},
                                                {"title", "A sandbox's screen"},
                                                {"mimeType", "image/png"}}})}};
    }
    if (method == "resources/read") {
        if (!params.contains("uri") || !params["uri"].is_string())
            throw RpcFailure{kInvalidParams, "uri: expected a string"};
        return read_resource(session, params["uri"]);
    }
    throw RpcFailure{kMethodNotFound, "method '" + method.substr(0, 64) + "' is not supported"};
}

json McpServer::read_resource(Session& session, const std::string& uri) {
    const std::string prefix = "deskbox://sandboxes/", suffix = "/screen";
    if (uri.rfind(prefix, 0) != 0 || uri.size() <= prefix.size() + suffix.size() ||
        uri.compare(uri.size() - suffix.size(), suffix.size(), suffix) != 0)
        throw RpcFailure{-32002, "resource not found: " + uri.substr(0, 128)};
    const std::string id = uri.substr(prefix.size(), uri.size() - prefix.size() - suffix.size());
    auto sandbox = target(session, {{"sandbox_id", id}});
    auto image = sandbox->screenshot({});
    std::string bytes(image.bytes.begin(), image.bytes.end());
    return {{"contents", json::array({{{"uri", uri},
                                       {"mimeType", image.content_type},
                                       {"blob", base64_encode(bytes)}}})}};
}

std::shared_ptr<Sandbox> McpServer::target(Session& session, const json& arguments) const {
    std::string id = string_argument(arguments, "sandbox_id", false);
    if (id.empty()) id = session.sandbox;
    if (id.empty())
        throw ApiError(400, "invalid_request",
                       "no sandbox: call create_sandbox first, or give sandbox_id", "sandbox_id");
    if (!session.access.full && id != session.access.sandbox)
        throw ApiError(403, "forbidden",
                       "this session may only use sandbox " + session.access.sandbox, "sandbox_id");
    return manager_.find(id);
}

json McpServer::call_tool(Session& session, const std::string& name, const json& arguments) {
    if (name == "computer") {
        if (!arguments.is_object()) throw RpcFailure{kInvalidParams, "arguments must be an object"};
        auto sandbox = target(session, arguments);
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
    if (name == "screenshot") {
        check_arguments(arguments, {"format", "sandbox_id"});
        auto sandbox = target(session, arguments);
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
    if (name == "wait_for" || name == "find_on_screen" || name == "read_screen") {
        auto sandbox = target(session, arguments);
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
                        m["center"][1].dump() + " (box " + m["x"].dump() + "," + m["y"].dump() +
                        " " + m["width"].dump() + "x" + m["height"].dump() + ")\n";
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
    if (name == "run_command") {
        check_arguments(arguments, {"command", "timeout_s", "background", "sandbox_id"});
        auto sandbox = target(session, arguments);
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
        sandbox->audit("mcp.run_command", params);
        auto reply = sandbox->call(
            "exec.run", params, {},
            std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000) + 15000));
        const json& r = reply.result;
        std::string text;
        if (r.contains("exit_code")) text += "exit code " + r["exit_code"].dump() + "\n";
        if (r.contains("pid") && !r.contains("exit_code"))
            text += "started, pid " + r["pid"].dump() + "\n";
        if (!r.value("stdout", "").empty())
            text += "--- stdout ---\n" + r.value("stdout", "") + "\n";
        if (!r.value("stderr", "").empty())
            text += "--- stderr ---\n" + r.value("stderr", "") + "\n";
        return {{"content", json::array({text_content(text)})},
                {"structuredContent", r},
                {"isError", false}};
    }
    if (name == "read_file") {
        check_arguments(arguments, {"path", "sandbox_id"});
        auto sandbox = target(session, arguments);
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
    if (name == "write_file") {
        check_arguments(arguments, {"path", "content", "encoding", "sandbox_id"});
        auto sandbox = target(session, arguments);
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
        return {
            {"content",
             json::array({text_content("wrote " + std::to_string(size) + " bytes to " + path)})},
            {"isError", false}};
    }
    if (name == "create_sandbox") {
        if (!session.access.full)
            throw ApiError(403, "forbidden",
                           "a sandbox token cannot create sandboxes (use the API key)");
        check_arguments(arguments, {"template", "runtime", "resolution", "timeout_s", "network"});
        auto sandbox = manager_.create(arguments);
        session.sandbox = sandbox->id();
        json described = sandbox->describe(false);
        return {{"content", json::array({text_content("created sandbox " + sandbox->id() +
                                                      "; it is this session's sandbox now")})},
                {"structuredContent", described},
                {"isError", false}};
    }
    if (name == "kill_sandbox") {
        check_arguments(arguments, {"sandbox_id"});
        auto sandbox = target(session, arguments);
        const std::string id = sandbox->id();
        sandbox.reset();
        manager_.kill(id);
        if (session.sandbox == id) session.sandbox.clear();
        return {{"content", json::array({text_content("killed sandbox " + id)})},
                {"isError", false}};
    }
    if (name == "list_sandboxes") {
        check_arguments(arguments, {});
        json list = json::array();
        for (const auto& s : manager_.list())
            if (session.access.full || s->id() == session.access.sandbox)
                list.push_back(s->describe(false));
        std::string text;
        for (const auto& s : list)
            text += s.value("id", "") + "\t" + s.value("state", "") + "\t" +
                    s.value("template", "") +
                    (s.value("id", "") == session.sandbox ? "\t(current)" : "") + "\n";
        return {{"content", json::array({text_content(text.empty() ? "no sandboxes\n" : text)})},
                {"structuredContent", {{"sandboxes", list}}},
                {"isError", false}};
    }
    throw RpcFailure{kInvalidParams, "unknown tool '" + name + "'"};
}

}  // namespace deskbox::server
