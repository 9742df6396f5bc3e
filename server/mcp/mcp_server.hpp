// deskbox as an MCP server (Model Context Protocol, revision 2025-11-25, Streamable HTTP):
// JSON-RPC 2.0 over POST /mcp, one JSON answer per request, or an SSE stream of its progress
// notifications and then its answer when a tools/call carries _meta.progressToken and the
// client accepts text/event-stream (no server-initiated stream, so GET /mcp is 405);
// notifications/cancelled stops a call (a command is killed in the guest); sessions by the
// Mcp-Session-Id header (in memory: after a restart an old id is 404, initialize again). Tools and
// resources are another front door on the same Sandbox operations the REST API uses, not a second
// implementation.
//
// Access: the API key opens every tool; a sandbox's control token (with ?sandbox=ID) opens the
// tools for that sandbox only. A session's current sandbox is ?sandbox=ID of its initialize,
// or the last one create_sandbox made; tools take `sandbox_id` to name another.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "server/http/api_error.hpp"
#include "server/http/http_message.hpp"
#include "server/sandbox/sandbox_manager.hpp"

namespace deskbox::server {

struct McpAccess {
    bool full = false;    // the API key (or none is configured): every sandbox
    std::string sandbox;  // else: only this one (its control token was given)
    std::string initial;  // ?sandbox=ID of the request: the session's current sandbox
};

struct McpSession {
    McpAccess access;
    std::string protocol;
    std::string sandbox;  // current sandbox ("" none yet)
    std::chrono::steady_clock::time_point last_used;
    // A session belongs to whoever opened it: every method (POST, DELETE) asks the same.
    bool opened_by(const McpAccess& other) const {
        return access.full == other.full && access.sandbox == other.sandbox;
    }
};

// One tools/call in flight: the progress it reports (sent only when the client asked, with a
// progressToken on an SSE answer) and its cancellation (notifications/cancelled).
class McpCallControl {
  public:
    using ProgressSink = std::function<void(const std::string& message)>;
    void set_progress_sink(ProgressSink sink);
    void report(const std::string& message);  // nothing without a sink
    bool wants_progress() const;
    // `stop` runs when the client cancels, at once if it already has; {} clears it. A tool sets
    // it around what can be stopped (a command in the guest).
    void on_cancel(std::function<void()> stop);
    void cancel();
    bool cancelled() const;

  private:
    mutable std::mutex mutex_;
    ProgressSink sink_;
    std::function<void()> stop_;
    bool cancelled_ = false;
};

// Thrown by a tool that ended because its call was cancelled: no result is sent.
struct McpCallCancelled {};

// A POST's JSON-RPC message, its envelope checked.
struct McpMessage {
    nlohmann::json id;        // null for a notification
    bool is_request = false;  // has a method and an id: needs an answer
    std::string method;
    nlohmann::json params;  // {} when absent
};

class McpServer {
  public:
    static constexpr const char* kProtocolVersion = "2025-11-25";
    static constexpr std::size_t kMaxSessions = 256;

    explicit McpServer(SandboxManager& manager);
    // `exchange`: the connection, for SSE answers (none: JSON answers only).
    HttpResponse handle(const HttpRequest& request, const McpAccess& access,
                        HttpExchange* exchange = nullptr);
    // A request refused before it is a JSON-RPC message (bad bytes, no access): a JSON-RPC
    // error with the HTTP status of `e`; `error.data` carries its code and field.
    static HttpResponse error_answer(const ApiError& e, int rpc_code = -32600);
    std::size_t session_count() const;

  private:
    using Session = McpSession;
    HttpResponse close_session(const std::string& session_id, const McpAccess& access);
    // The message of a POST, or the answer refusing it (protocol version, body, envelope).
    static std::variant<McpMessage, HttpResponse> read_message(const HttpRequest& request);
    HttpResponse initialize(const McpMessage& message, const McpAccess& access);
    // Any other message: in the session `session_id` names, opened with the same access.
    HttpResponse answer_in_session(const std::string& session_id, const McpMessage& message,
                                   const McpAccess& access, HttpExchange* exchange);
    // The answer to a request (result or error); throws McpCallCancelled.
    nlohmann::json answer_request(Session& session, const McpMessage& message,
                                  McpCallControl& control);
    // A tools/call answered as SSE: progress notifications, then the answer.
    HttpResponse stream_answer(Session& session, const McpMessage& message, McpCallControl& control,
                               HttpExchange& exchange);
    HttpResponse cancel_request(const std::string& session_id, const McpMessage& message);
    nlohmann::json dispatch(Session& session, const std::string& method,
                            const nlohmann::json& params, McpCallControl& control);
    nlohmann::json read_resource(Session& session, const std::string& uri);
    void evict_locked();

    SandboxManager& manager_;
    mutable std::mutex mutex_;
    std::map<std::string, Session> sessions_;
    // Requests in flight by session and id (its JSON text), and the ids of each session's
    // last finished ones: a cancel for one of those is late, not wrong.
    std::map<std::pair<std::string, std::string>, std::shared_ptr<McpCallControl>> in_flight_;
    std::map<std::string, std::deque<std::string>> finished_;
};

// The tools/list answer (names, descriptions, input schemas): Anthropic's computer tool schema
// verbatim for `computer`, plus sandbox_id.
const nlohmann::json& mcp_tools();

}  // namespace deskbox::server
