#include "server/api/routes/commands.hpp"

#include <algorithm>
#include <set>

#include "server/api/http_util.hpp"

namespace deskbox::server::routes {

using nlohmann::json;

std::chrono::milliseconds CommandRequest::reply_timeout() const {
    return std::chrono::milliseconds(
        static_cast<long long>(std::min(timeout_s, 86400.0) * 1000 + 15000));
}

CommandRequest parse_command_body(json body) {
    if (!body.is_object()) throw bad_request("", "expected a JSON object");
    static const std::set<std::string> fields = {"cmd",       "argv",       "env",   "cwd",
                                                 "timeout_s", "background", "stdin", "stream"};
    for (auto& [k, v] : body.items())
        if (!fields.count(k)) throw bad_request(k, "unknown field");
    CommandRequest request;
    if (body.contains("stdin")) {
        if (!body["stdin"].is_string()) throw bad_request("stdin", "expected a string");
        request.stdin_bytes = body["stdin"];
        body.erase("stdin");
    }
    if (body.contains("timeout_s") && !body["timeout_s"].is_null()) {
        if (!body["timeout_s"].is_number() || body["timeout_s"].get<double>() < 0)
            throw bad_request("timeout_s", "expected a number of seconds");
        request.timeout_s = body["timeout_s"];
    }
    request.params = std::move(body);
    return request;
}

void check_kill_processes_body(const json& body) {
    if (!body.is_null() && !(body.is_object() && body.empty()))
        throw bad_request("", "takes no fields: it ends every process but the desktop");
}

HttpResponse run_command(RouteContext& context) {
    CommandRequest command = parse_command_body(parse_body(context.request()));
    command.params = context.sandbox->with_default_cwd(std::move(command.params));
    context.sandbox->audit("command", command.params);
    ScopedTimer timer(context.api.metrics.command_seconds);
    auto reply = context.sandbox->call("exec.run", command.params, std::move(command.stdin_bytes),
                                       command.reply_timeout());
    return json_response(200, reply.result);
}

HttpResponse kill_processes(RouteContext& context) {
    allow_only(context.query, {});
    check_kill_processes_body(parse_body(context.request(), true));
    return json_response(200, context.sandbox->kill_processes());
}

}  // namespace deskbox::server::routes
