#include "server/api/routes/commands.hpp"

#include <charconv>
#include <chrono>
#include <limits>

#include "server/api/http_util.hpp"
#include "server/http/streamed_answer.hpp"
#include "server/sandbox/agent_client.hpp"
#include "server/sandbox/sandbox.hpp"

namespace deskbox::server::routes {

using nlohmann::json;

CommandRequest parse_command_body(const json& body) {
    constexpr auto kAny = std::numeric_limits<std::size_t>::max();  // the body limit holds
    RequestReader reader(body);
    CommandRequest command;
    command.cmd = reader.string("cmd", kAny);
    command.argv = reader.string_list("argv", 65536, kAny);
    command.env = reader.string_map("env", 65536);
    command.cwd = reader.string("cwd");
    command.timeout_s = CommandRequest::read_timeout(reader);
    command.background = reader.boolean("background").value_or(false);
    command.stream = reader.boolean("stream").value_or(false);
    command.stdin_open = reader.boolean("stdin_open").value_or(false);
    command.stdin_bytes = reader.string("stdin", kAny).value_or("");
    reader.finish();
    return command;
}

void check_kill_processes_body(const json& body) {
    if (!body.is_null() && !(body.is_object() && body.empty()))
        throw bad_request("", "takes no fields: it ends every process but the desktop");
}

std::string command_sse(const std::string& event, const json& data) {
    return "event: " + event +
           "\ndata: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

namespace {

constexpr auto kStreamKeepAlive = std::chrono::seconds(15);

// Output as the agent sends it, until the command exits. A client that leaves (its side of the
// connection closes, or a write fails) takes its command with it: nobody reads it any more.
HttpResponse stream_command(RouteContext& context, CommandRequest command) {
    const auto started_at = std::chrono::steady_clock::now();
    auto& agent = context.agent();
    const CommandResult started = agent.run_command(std::move(command));
    if (!started.pid)
        throw ApiError(502, "agent_failed", "the agent started the stream command without a pid");
    const long long pid = *started.pid;
    auto watch = context.sandbox->command_streams().watch(static_cast<pid_t>(pid));
    StreamedAnswer answer(context.exchange, "text/event-stream");
    CommandStreams::Watch& watching = *watch;
    answer.on_client_gone([&watching] { watching.interrupt(); });
    bool reading = answer.write(command_sse("start", {{"pid", pid}}));
    CommandOutputText text;
    while (reading) {
        auto event = watch->next(std::chrono::steady_clock::now() + kStreamKeepAlive);
        if (!event) {
            reading = answer.write(": keep-alive\n\n");
            continue;
        }
        if (event->kind == CommandEvent::Kind::interrupted) break;  // the client left
        if (event->kind == CommandEvent::Kind::output) {
            json data = text.take(*event);
            if (data.is_null()) continue;
            data["pid"] = pid;
            reading = answer.write(command_sse(data["stream"].get<std::string>(), data));
            continue;
        }
        for (json rest = text.flush(); !rest.is_null(); rest = text.flush()) {
            rest["pid"] = pid;
            answer.write(command_sse(rest["stream"].get<std::string>(), rest));
        }
        if (event->kind == CommandEvent::Kind::lost) {
            answer.write(
                command_sse("error", {{"code", "agent_unavailable"}, {"message", event->data}}));
            return answer.finish();
        }
        json exit = {{"pid", pid},
                     {"exit_code", event->exit_code},
                     {"duration_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - started_at)
                                         .count()}};
        if (event->signal) exit["signal"] = event->signal;
        answer.write(command_sse("exit", exit));
        return answer.finish();
    }
    try {
        agent.signal_command(pid, "KILL");
    } catch (const SandboxError&) {  // it ended meanwhile
    }
    return answer.finish();
}

}  // namespace

HttpResponse run_command(RouteContext& context) {
    CommandRequest command = parse_command_body(parse_body(context.request()));
    if (command.stream) {
        if (command.background)
            throw bad_request("stream", "a command is either stream or background, not both");
        return stream_command(context, std::move(command));
    }
    ScopedTimer timer(context.api.metrics.command_seconds);
    const json result = context.agent().run_command(std::move(command)).json;
    if (result.value("timed_out", false))
        context.api.metrics.count_operation_error("command", "timed_out");
    else if (result.contains("exit_code") && result["exit_code"].is_number() &&
             result["exit_code"] != 0)
        context.api.metrics.count_operation_error("command", "exit_nonzero");
    return json_response(200, result);
}

HttpResponse kill_processes(RouteContext& context) {
    allow_only(context.query, {});
    check_kill_processes_body(parse_body(context.request(), true));
    return json_response(200, context.agent().kill_processes());
}

HttpResponse list_commands(RouteContext& context) {
    allow_only(context.query, {});
    return json_response(200, context.agent().running_commands());
}

long long parse_command_pid(const std::string& text) {
    long long pid = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), pid);
    if (error != std::errc() || end != text.data() + text.size() || pid <= 0 ||
        pid > std::numeric_limits<pid_t>::max())
        throw bad_request("pid", "expected a command's pid (a positive integer), got '" +
                                     text.substr(0, 32) + "'");
    return pid;
}

json parse_kill_command_body(const json& body) {
    if (body.is_null()) return "KILL";
    RequestReader reader(body);
    const json* signal = reader.raw("signal");
    json chosen = signal ? *signal : json("KILL");
    reader.finish();
    if (!chosen.is_string() && !chosen.is_number_integer())
        throw bad_request("signal", "expected a signal name (\"TERM\", \"KILL\") or number");
    return chosen;
}

HttpResponse write_command_stdin(RouteContext& context) {
    allow_only(context.query, {"eof"});
    const long long pid = parse_command_pid(context.params.at("pid"));
    const bool eof = bool_query(context.query, "eof");
    context.agent().write_command_stdin(pid, std::move(context.request().body()), eof);
    return json_response(200, {{"pid", pid}, {"eof", eof}});
}

HttpResponse kill_command(RouteContext& context) {
    allow_only(context.query, {});
    const long long pid = parse_command_pid(context.params.at("pid"));
    const json signal = parse_kill_command_body(parse_body(context.request(), true));
    context.agent().signal_command(pid, signal);
    return json_response(200, {{"pid", pid}, {"signal", signal}});
}

}  // namespace deskbox::server::routes
