#include "server/api/routes/commands.hpp"

#include <limits>

#include "server/api/http_util.hpp"
#include "server/sandbox/agent_client.hpp"

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
    command.stdin_bytes = reader.string("stdin", kAny).value_or("");
    reader.finish();
    return command;
}

void check_kill_processes_body(const json& body) {
    if (!body.is_null() && !(body.is_object() && body.empty()))
        throw bad_request("", "takes no fields: it ends every process but the desktop");
}

HttpResponse run_command(RouteContext& context) {
    CommandRequest command = parse_command_body(parse_body(context.request()));
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

}  // namespace deskbox::server::routes
