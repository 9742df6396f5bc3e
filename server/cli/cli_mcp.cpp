// `deskbox mcp`: the MCP stdio transport for desktop MCP clients (Claude Desktop, IDEs),
// bridged to deskboxd's Streamable HTTP endpoint /mcp. Each stdin line is one JSON-RPC
// message, POSTed as is; each answer is one stdout line. Logs go to stderr only (stdout is
// the protocol). --create makes a sandbox for the session and kills it when stdin ends.
// A call answered with events (a progressToken) has each message written as it comes, and a
// notifications/cancelled read meanwhile goes out at once on a connection of its own.
#include <condition_variable>
#include <deque>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

#include "server/cli/cli_commands.hpp"

namespace deskbox::cli {

using client::Method;
using nlohmann::json;

namespace {

// A JSON-RPC error line for a message we could not deliver, so the client is not left waiting.
json bridge_error(const json& id, const std::string& message) {
    return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", -32603}, {"message", message}}}};
}

// The session the bridge speaks in: set by the relay, read by the stdin reader's cancels.
class BridgeSession {
  public:
    std::string id() const {
        std::lock_guard lock(mutex_);
        return id_;
    }
    void set(std::string id) {
        std::lock_guard lock(mutex_);
        id_ = std::move(id);
    }

  private:
    mutable std::mutex mutex_;
    std::string id_;
};

// Sends one JSON-RPC line from stdin to /mcp (in the session, once there is one) and writes
// the answer to stdout, errors in JSON-RPC terms; false when deskboxd could not be reached.
bool relay_line(Context& context, client::ApiClient& api, const std::string& target,
                BridgeSession& session, const std::string& line) {
    json message = json::parse(line, nullptr, false);
    const json id = message.is_object() && message.contains("id") ? message["id"] : json();
    client::Headers headers = {{"MCP-Protocol-Version", "2025-11-25"}};
    if (const std::string current = session.id(); !current.empty())
        headers.emplace_back("Mcp-Session-Id", current);
    try {
        // A call with a progressToken is answered with events: each goes out as a line when it
        // comes (its progress while it runs, then its answer); any other answer is read whole.
        std::string body, events;
        bool event_stream = false;
        client::Response answer = api.send_streaming(
            Method::post, target, line, "application/json", "application/json, text/event-stream",
            headers, [&](const client::Response& head, std::string_view piece) {
                event_stream =
                    head.status == 200 &&
                    head.header("Content-Type").value_or("").starts_with("text/event-stream");
                if (!event_stream) {
                    body.append(piece);
                    return true;
                }
                events.append(piece);
                for (std::size_t end; (end = events.find("\n\n")) != std::string::npos;) {
                    const std::string block = events.substr(0, end);
                    events.erase(0, end + 2);
                    const std::size_t data = block.find("data: ");
                    if (data == std::string::npos) continue;  // a comment
                    context.out << block.substr(data + 6, block.find('\n', data) - data - 6)
                                << "\n";
                    context.out.flush();
                }
                return true;
            });
        if (auto given = answer.header("Mcp-Session-Id")) session.set(*given);
        if (event_stream) return true;
        answer.body = std::move(body);
        // 202: a notification was taken; there is nothing to write.
        if (answer.status == 202 || answer.body.empty()) return true;
        json reply = json::parse(answer.body, nullptr, false);
        if (reply.is_discarded()) {
            reply = bridge_error(
                id, "deskboxd answered HTTP " + std::to_string(answer.status) + " without JSON");
        } else if (reply.contains("error") && reply["error"].contains("code") &&
                   reply["error"]["code"].is_string()) {
            // A REST error (auth, unknown sandbox): say it in JSON-RPC terms.
            reply = bridge_error(id, reply["error"].value("message", "error") + " (" +
                                         reply["error"]["code"].get<std::string>() + ")");
        }
        if (id.is_null() && !reply.contains("result")) return true;  // a failed notification
        context.out << reply.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
        context.out.flush();
        return true;
    } catch (const client::ConnectionError& e) {
        context.err << "deskbox mcp: " << e.what() << "\n";
        if (!id.is_null()) {
            context.out << bridge_error(id, std::string("deskboxd unreachable: ") + e.what()).dump()
                        << "\n";
            context.out.flush();
        }
        return false;
    }
}

}  // namespace

int command_mcp(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "mcp", tokens,
              {{"--sandbox", ""}, {"--create", ""}, {"--runtime", ""}, {"--token", ""}});
    c.expect(0, 0);
    const ParsedArgs& args = c.args;
    if (args.has("--sandbox") && args.has("--create"))
        throw UsageError("give --sandbox ID or --create TEMPLATE, not both", usage_of("mcp"));
    client::ApiClient& api = context.client();
    // Tool calls (a long command, a wait) may take a while; the server bounds them.
    api.set_request_timeout(std::chrono::hours(24));

    std::string sandbox = args.get("--sandbox").value_or("");
    bool created = false;
    if (auto name = args.get("--create")) {
        json body = {{"template", *name}};
        if (auto runtime = args.get("--runtime")) body["runtime"] = *runtime;
        json answer = api.post_json("/v1/sandboxes", body);
        sandbox = required_string(answer, "id", "the create answer");
        created = true;
        context.err << "deskbox mcp: created sandbox " << sandbox << "\n";
    }
    client::Query query;
    if (!sandbox.empty()) query.add("sandbox", sandbox);
    if (auto token = args.get("--token")) query.add("token", *token);
    const std::string target = "/mcp" + query.str();

    BridgeSession session;
    // Lines are relayed one at a time, in order, by this thread; a cancel cannot wait behind
    // the call it cancels, so the reader sends it at once on a client of its own.
    client::ApiClient cancels(context.options);
    std::mutex queue_mutex;
    std::condition_variable queued;
    std::deque<std::string> lines;
    bool ended = false;
    std::thread reader([&] {
        std::string line;
        while (std::getline(context.in, line)) {
            if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
            const json message = json::parse(line, nullptr, false);
            if (message.is_object() && message.contains("method") &&
                message["method"] == "notifications/cancelled" && !session.id().empty()) {
                relay_line(context, cancels, target, session, line);  // answers nothing
                continue;
            }
            std::lock_guard lock(queue_mutex);
            lines.push_back(std::move(line));
            queued.notify_one();
        }
        std::lock_guard lock(queue_mutex);
        ended = true;
        queued.notify_one();
    });
    int status = kExitOk;
    while (true) {
        std::unique_lock lock(queue_mutex);
        queued.wait(lock, [&] { return ended || !lines.empty(); });
        if (lines.empty()) break;
        const std::string line = std::move(lines.front());
        lines.pop_front();
        lock.unlock();
        if (!relay_line(context, api, target, session, line)) status = kExitApiError;
    }
    reader.join();
    if (const std::string id = session.id(); !id.empty()) {
        try {
            api.send(Method::del, target, {}, {}, "application/json", {{"Mcp-Session-Id", id}});
        } catch (const client::ConnectionError&) {
        }
    }
    if (created) {
        try {
            api.call(Method::del, sandbox_path(sandbox));
            context.err << "deskbox mcp: killed sandbox " << sandbox << "\n";
        } catch (const std::exception& e) {
            context.err << "deskbox mcp: could not kill " << sandbox << ": " << e.what() << "\n";
            status = kExitApiError;
        }
    }
    return status;
}

}  // namespace deskbox::cli
