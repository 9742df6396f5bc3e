// `deskbox mcp`: the MCP stdio transport for desktop MCP clients (Claude Desktop, IDEs),
// bridged to deskboxd's Streamable HTTP endpoint /mcp. Each stdin line is one JSON-RPC
// message, POSTed as is; each answer is one stdout line. Logs go to stderr only (stdout is
// the protocol). --create makes a sandbox for the session and kills it when stdin ends.
#include <iostream>
#include <string>

#include "server/cli/cli_commands.hpp"

namespace deskbox::cli {

using client::Method;
using nlohmann::json;

namespace {

// A JSON-RPC error line for a message we could not deliver, so the client is not left waiting.
json bridge_error(const json& id, const std::string& message) {
    return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", -32603}, {"message", message}}}};
}

// Sends one JSON-RPC line from stdin to /mcp (in the session, once there is one) and writes
// the answer to stdout, errors in JSON-RPC terms; false when deskboxd could not be reached.
bool relay_line(Context& context, const std::string& target, std::string& session,
                const std::string& line) {
    json message = json::parse(line, nullptr, false);
    const json id = message.is_object() && message.contains("id") ? message["id"] : json();
    client::Headers headers = {{"MCP-Protocol-Version", "2025-11-25"}};
    if (!session.empty()) headers.emplace_back("Mcp-Session-Id", session);
    try {
        // A call with a progressToken is answered with events: each goes out as a line when it
        // comes (its progress while it runs, then its answer); any other answer is read whole.
        std::string body, events;
        bool event_stream = false;
        client::Response answer = context.client().send_streaming(
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
        if (auto given = answer.header("Mcp-Session-Id")) session = *given;
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

    std::string session;
    std::string line;
    int status = kExitOk;
    while (std::getline(context.in, line)) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        if (!relay_line(context, target, session, line)) status = kExitApiError;
    }
    if (!session.empty()) {
        try {
            api.send(Method::del, target, {}, {}, "application/json",
                     {{"Mcp-Session-Id", session}});
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
