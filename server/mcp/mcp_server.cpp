#include "server/mcp/mcp_server.hpp"

#include <algorithm>
#include <condition_variable>
#include <set>
#include <thread>
#include <variant>

#include "common/base64.hpp"
#include "common/random.hpp"
#include "common/version.hpp"
#include "server/http/api_error.hpp"
#include "server/http/json_body.hpp"
#include "server/http/streamed_answer.hpp"
#include "server/mcp/mcp_messages.hpp"
#include "server/mcp/mcp_tool_calls.hpp"

namespace deskbox::server {

using nlohmann::json;
using namespace mcp;

namespace {

const std::set<std::string> kKnownVersions = {"2025-11-25", "2025-06-18", "2025-03-26"};
constexpr auto kSessionIdle = std::chrono::hours(1);
constexpr std::size_t kFinishedIdsKept = 64;
// A call that reports nothing for this long reports that it still runs (wait_for, a quiet
// command): a client's timeout that progress resets does not end it.
constexpr auto kProgressHeartbeat = std::chrono::seconds(1);
constexpr int kRequestCancelled = -32800;  // LSP's code, as MCP SDKs use it

std::string header(const HttpRequest& request, const std::string& name) {
    auto it = request.find(name);
    return it == request.end() ? std::string() : std::string(it->value());
}

// An error (the front door's ApiError, sandbox/'s SandboxError) as the model reads it: the field
// first (REST's bad_request messages already start with it; the agent's may not).
template <typename Error>
std::string error_text(const Error& e) {
    const std::string message = e.what();
    if (e.field().empty() || message.rfind(e.field() + ":", 0) == 0) return message;
    return e.field() + ": " + message;
}

// A client that accepts server-sent events (Streamable HTTP clients send both types).
bool accepts_event_stream(const HttpRequest& request) {
    return header(request, "Accept").find("text/event-stream") != std::string::npos;
}

std::string sse_message(const json& message) {
    return "event: message\ndata: " + message.dump(-1, ' ', false, json::error_handler_t::replace) +
           "\n\n";
}

}  // namespace

void McpCallControl::set_progress_sink(ProgressSink sink) {
    std::lock_guard lock(mutex_);
    sink_ = std::move(sink);
}

bool McpCallControl::wants_progress() const {
    std::lock_guard lock(mutex_);
    return static_cast<bool>(sink_);
}

void McpCallControl::report(const std::string& message) {
    ProgressSink sink;
    {
        std::lock_guard lock(mutex_);
        sink = sink_;
    }
    if (sink) sink(message);
}

void McpCallControl::on_cancel(std::function<void()> stop) {
    std::unique_lock lock(mutex_);
    stop_ = std::move(stop);
    if (cancelled_ && stop_) {
        auto run = stop_;
        lock.unlock();
        run();
    }
}

void McpCallControl::cancel() {
    std::function<void()> run;
    {
        std::lock_guard lock(mutex_);
        if (cancelled_) return;
        cancelled_ = true;
        run = stop_;
    }
    if (run) run();
}

bool McpCallControl::cancelled() const {
    std::lock_guard lock(mutex_);
    return cancelled_;
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

HttpResponse McpServer::handle(const HttpRequest& request, const McpAccess& access,
                               HttpExchange* exchange) {
    if (request.method() == http::verb::get) {
        // Streamable HTTP lets a server offer no stream of its own: it never sends first.
        HttpResponse res = rpc_answer(405, rpc_error(nullptr, kInvalidRequest,
                                                     "this server sends no messages of its own "
                                                     "(no SSE stream); POST requests"));
        res.set(http::field::allow, "POST, DELETE");
        return res;
    }
    const std::string session_id = header(request, "Mcp-Session-Id");
    if (request.method() == http::verb::delete_) return close_session(session_id, access);
    auto read = read_message(request);
    if (auto* refusal = std::get_if<HttpResponse>(&read)) return std::move(*refusal);
    const auto& message = std::get<McpMessage>(read);
    if (message.method == "initialize") return initialize(message, access);
    // Only a client that reads server-sent events gets them.
    return answer_in_session(session_id, message, access,
                             accepts_event_stream(request) ? exchange : nullptr);
}

HttpResponse McpServer::close_session(const std::string& session_id, const McpAccess& access) {
    std::lock_guard lock(mutex_);
    auto it = sessions_.find(session_id);
    if (session_id.empty() || it == sessions_.end())
        return rpc_answer(404, rpc_error(nullptr, kInvalidRequest, "no such session"));
    if (!it->second.opened_by(access))
        return rpc_answer(403, rpc_error(nullptr, kInvalidRequest,
                                         "this session was opened with other credentials"));
    sessions_.erase(it);
    return HttpResponse{http::status::no_content, 11};
}

std::variant<McpMessage, HttpResponse> McpServer::read_message(const HttpRequest& request) {
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
    McpMessage out;
    out.id = message.contains("id") ? message["id"] : json();
    out.is_request = message.contains("method") && message.contains("id");
    if (message.contains("id") && !out.id.is_string() && !out.id.is_number_integer())
        return rpc_answer(400,
                          rpc_error(nullptr, kInvalidRequest, "id must be a string or an integer"));
    if (message.contains("method") && !message["method"].is_string())
        return rpc_answer(400, rpc_error(out.id, kInvalidRequest, "method must be a string"));
    out.method = message.value("method", "");
    out.params = message.contains("params") ? message["params"] : json::object();
    return out;
}

HttpResponse McpServer::initialize(const McpMessage& message, const McpAccess& access) {
    if (!message.is_request)
        return rpc_answer(400, rpc_error(nullptr, kInvalidRequest, "initialize needs an id"));
    const json& params = message.params;
    if (!params.is_object())
        return rpc_answer(200, rpc_error(message.id, kInvalidParams, "params must be an object"));
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
         {{"name", "deskbox"}, {"title", "deskbox desktops"}, {"version", kDeskboxVersion}}},
        {"instructions",
         "Linux desktops for computer use. create_sandbox starts one (or the session already "
         "has one); computer drives its mouse and keyboard and answers with a screenshot."}};
    HttpResponse res =
        rpc_answer(200, {{"jsonrpc", "2.0"}, {"id", message.id}, {"result", result}});
    res.set("Mcp-Session-Id", new_id);
    return res;
}

HttpResponse McpServer::answer_in_session(const std::string& session_id, const McpMessage& message,
                                          const McpAccess& access, HttpExchange* exchange) {
    const json& id = message.id;
    std::unique_lock lock(mutex_);
    if (session_id.empty())
        return rpc_answer(400, rpc_error(id, kInvalidRequest,
                                         "missing Mcp-Session-Id header (initialize first)"));
    auto it = sessions_.find(session_id);
    if (it == sessions_.end())
        return rpc_answer(404, rpc_error(id, kInvalidRequest,
                                         "unknown or expired session (sessions end after 1 h idle "
                                         "and when deskboxd restarts); initialize again"));
    // A session belongs to whoever opened it: the same credentials must come with it.
    if (!it->second.opened_by(access))
        return rpc_answer(
            403, rpc_error(id, kInvalidRequest, "this session was opened with other credentials"));
    it->second.last_used = std::chrono::steady_clock::now();
    Session session = it->second;
    lock.unlock();

    if (message.method == "notifications/cancelled") return cancel_request(session_id, message);
    // Other notifications and answers to us (we ask nothing) need no reply.
    if (!message.is_request) return HttpResponse{http::status::accepted, 11};

    const auto key = std::make_pair(session_id, id.dump());
    auto control = std::make_shared<McpCallControl>();
    {
        std::lock_guard registry(mutex_);
        if (!in_flight_.emplace(key, control).second)
            return rpc_answer(200, rpc_error(id, kInvalidRequest,
                                             "request id " + id.dump().substr(0, 64) +
                                                 " is already in flight in this session"));
    }
    HttpResponse response;
    const json& meta = message.params.is_object() && message.params.contains("_meta")
                           ? message.params["_meta"]
                           : json();
    const bool streamed = exchange && message.method == "tools/call" && meta.is_object() &&
                          meta.contains("progressToken");
    if (streamed) {
        response = stream_answer(session, message, *control, *exchange);
    } else {
        json answer;
        try {
            answer = answer_request(session, message, *control);
        } catch (const McpCallCancelled&) {
            answer = rpc_error(id, kRequestCancelled, "request cancelled");
        }
        response = rpc_answer(200, answer);
    }
    lock.lock();
    in_flight_.erase(key);
    auto& finished = finished_[session_id];
    finished.push_back(key.second);
    if (finished.size() > kFinishedIdsKept) finished.pop_front();
    if (auto again = sessions_.find(session_id); again != sessions_.end())
        again->second.sandbox = session.sandbox;
    else
        finished_.erase(session_id);
    return response;
}

json McpServer::answer_request(Session& session, const McpMessage& message,
                               McpCallControl& control) {
    const json& id = message.id;
    try {
        return {{"jsonrpc", "2.0"},
                {"id", id},
                {"result", dispatch(session, message.method, message.params, control)}};
    } catch (const RpcFailure& f) {
        return rpc_error(id, f.code, f.message);
    } catch (const ApiError& e) {
        return rpc_error(id, kInvalidParams, error_text(e));
    } catch (const SandboxError& e) {
        return rpc_error(id, kInvalidParams, error_text(e));
    }
}

HttpResponse McpServer::stream_answer(Session& session, const McpMessage& message,
                                      McpCallControl& control, HttpExchange& exchange) {
    const json token = message.params["_meta"]["progressToken"];
    StreamedAnswer answer(exchange, "text/event-stream");
    std::mutex progress_mutex;
    std::condition_variable progress_changed;
    double progress = 0;
    auto last_report = std::chrono::steady_clock::now();
    bool done = false;
    control.set_progress_sink([&](const std::string& text) {
        std::lock_guard lock(progress_mutex);
        if (done) return;
        progress += 1;
        last_report = std::chrono::steady_clock::now();
        json note = {{"jsonrpc", "2.0"},
                     {"method", "notifications/progress"},
                     {"params", {{"progressToken", token}, {"progress", progress}}}};
        if (!text.empty()) note["params"]["message"] = text;
        // A client that left cannot read the answer either: its call stops.
        if (!answer.write(sse_message(note))) control.cancel();
    });
    const auto started = std::chrono::steady_clock::now();
    std::thread heartbeat([&] {
        std::unique_lock lock(progress_mutex);
        while (!done) {
            progress_changed.wait_until(lock, last_report + kProgressHeartbeat);
            if (done || std::chrono::steady_clock::now() < last_report + kProgressHeartbeat)
                continue;
            const auto running = std::chrono::duration_cast<std::chrono::seconds>(
                std::chrono::steady_clock::now() - started);
            lock.unlock();
            control.report("still running (" + std::to_string(running.count()) + " s)");
            lock.lock();
        }
    });
    json reply;
    bool cancelled = false;
    try {
        reply = answer_request(session, message, control);
    } catch (const McpCallCancelled&) {
        cancelled = true;
    }
    {
        std::lock_guard lock(progress_mutex);
        done = true;
    }
    progress_changed.notify_all();
    heartbeat.join();
    control.set_progress_sink({});
    // A cancelled request gets no answer (the spec's SHOULD NOT): its stream just ends.
    if (!cancelled) answer.write(sse_message(reply));
    return answer.finish();
}

HttpResponse McpServer::cancel_request(const std::string& session_id, const McpMessage& message) {
    const json& params = message.params;
    if (!params.is_object() || !params.contains("requestId") ||
        !(params["requestId"].is_string() || params["requestId"].is_number_integer()))
        return rpc_answer(400, rpc_error(nullptr, kInvalidParams,
                                         "notifications/cancelled: params.requestId (the id of "
                                         "a request in flight) is required"));
    const std::string request_id = params["requestId"].dump();
    std::shared_ptr<McpCallControl> control;
    {
        std::lock_guard lock(mutex_);
        if (auto it = in_flight_.find({session_id, request_id}); it != in_flight_.end())
            control = it->second;
        else if (auto done = finished_.find(session_id);
                 done != finished_.end() && std::find(done->second.begin(), done->second.end(),
                                                      request_id) != done->second.end())
            return HttpResponse{http::status::accepted, 11};  // it finished first: too late
    }
    if (!control)
        return rpc_answer(
            404, rpc_error(nullptr, kInvalidParams,
                           "notifications/cancelled: no request " + request_id.substr(0, 64) +
                               " was sent in this session"));
    control->cancel();
    return HttpResponse{http::status::accepted, 11};
}

json McpServer::dispatch(Session& session, const std::string& method, const json& params,
                         McpCallControl& control) {
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
            mcp::ToolContext context{session, manager_, &control};
            return mcp::call_tool(context, name, arguments);
        } catch (const ApiError& e) {
            // The model should see what it got wrong and try again: a tool error, not a
            // protocol one.
            return tool_error(error_text(e) + " (" + e.code() + ")");
        } catch (const SandboxError& e) {
            return tool_error(error_text(e) + " (" + e.code() + ")");
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
        throw RpcFailure{kResourceNotFound, "resource not found: " + uri.substr(0, 128)};
    const std::string id = uri.substr(prefix.size(), uri.size() - prefix.size() - suffix.size());
    mcp::ToolContext context{session, manager_};
    auto sandbox = context.target({{"sandbox_id", id}});
    auto image = sandbox->screen().screenshot({});
    std::string bytes(image.bytes.begin(), image.bytes.end());
    return {{"contents", json::array({{{"uri", uri},
                                       {"mimeType", image.content_type},
                                       {"blob", base64_encode(bytes)}}})}};
}

}  // namespace deskbox::server
