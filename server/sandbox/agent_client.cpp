#include "server/sandbox/agent_client.hpp"

#include <algorithm>

namespace deskbox::server {

using nlohmann::json;
using protocol::AgentMethod;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

constexpr milliseconds kDefaultReply = seconds(30);
constexpr milliseconds kFileReply = std::chrono::minutes(5);  // up to 64 MiB each way

SandboxError from_agent_error(const protocol::RpcError& e) {
    return agent_error(e.code(), e.what(), e.field());
}

}  // namespace

// The agent's error codes become faults: its input errors are the request's.
SandboxError agent_error(const std::string& c, const std::string& message,
                         const std::string& field) {
    SandboxFault fault = SandboxFault::agent_failed;
    if (c == "invalid_action" || c == "bad_request")
        fault = SandboxFault::invalid;
    else if (c == "not_found")
        fault = SandboxFault::not_found;
    else if (c == "permission_denied")
        fault = SandboxFault::denied;
    else if (c == "is_a_directory" || c == "not_a_directory" || c == "already_exists" ||
             c == "not_empty")
        fault = SandboxFault::conflict;
    else if (c == "too_large")
        fault = SandboxFault::too_large;
    else if (c == "timeout")
        fault = SandboxFault::timed_out;
    else if (c == "accessibility_unavailable")  // the desktop has no tree to read
        fault = SandboxFault::unprocessable;
    return SandboxError(fault, c, message, field);
}

std::optional<double> CommandRequest::read_timeout(RequestReader& reader) {
    auto timeout = reader.number("timeout_s", 0, kMaxTimeoutS);
    if (timeout && *timeout <= 0)
        throw invalid_field(reader.path("timeout_s"), "must be greater than 0");
    return timeout;
}

milliseconds CommandRequest::reply_timeout() const {
    const double s = std::min(timeout_s.value_or(kDefaultTimeoutS), kMaxTimeoutS);
    return milliseconds(static_cast<long long>(s * 1000)) + seconds(15);
}

json CommandRequest::params() const {
    json p = json::object();
    if (cmd) p["cmd"] = *cmd;
    if (argv) p["argv"] = *argv;
    if (env) p["env"] = *env;
    if (cwd) p["cwd"] = *cwd;
    if (timeout_s) p["timeout_s"] = *timeout_s;
    if (background) p["background"] = true;
    if (stream) p["stream"] = true;
    if (stdin_open) p["stdin_open"] = true;
    return p;
}

AgentClient AgentClient::over(std::shared_ptr<protocol::RpcClient> client) {
    AgentLink link;
    link.connection = [client = std::move(client)] { return client; };
    return AgentClient(std::move(link));
}

protocol::Reply AgentClient::call(AgentMethod method, json params, std::string body,
                                  milliseconds timeout) {
    auto client = link_.connection();
    const std::string name(protocol::method_name(method));
    auto explained = [this](const std::string& what) -> std::optional<SandboxError> {
        return link_.exhaustion ? link_.exhaustion(what) : std::nullopt;
    };
    try {
        return client->call(name, std::move(params), std::move(body), timeout);
    } catch (const protocol::RpcError& e) {
        // A command that cannot start, or an agent that cannot make a thread, is most
        // often a sandbox at its limits: say which, and the way back.
        if (e.code() == "resource_exhausted" || e.code() == "io_error" || e.code() == "internal")
            if (auto exhausted = explained(e.what())) throw *exhausted;
        if (e.code() == "resource_exhausted")  // a microVM: only its guest sees its limits
            throw SandboxError(SandboxFault::conflict, "sandbox_exhausted",
                               std::string(e.what()) + link_.way_back, "limits");
        throw from_agent_error(e);
    } catch (const protocol::TimeoutError& e) {
        if (auto exhausted = explained(name + ": " + e.what())) throw *exhausted;
        throw SandboxError(SandboxFault::timed_out, "agent_timeout", name + ": " + e.what());
    } catch (const protocol::ProtocolError& e) {
        const std::string why = link_.lost ? link_.lost() : std::string();
        throw SandboxError(SandboxFault::unavailable, "agent_unavailable",
                           "the sandbox's agent is gone (" + std::string(e.what()) + ")" +
                               (why.empty() ? "" : ": " + why));
    }
}

void AgentClient::audit(const std::string& kind, json detail, Caller caller) const {
    if (!link_.audit || caller == Caller::server) return;
    if (caller == Caller::mcp) detail["via"] = "mcp";
    link_.audit(kind, detail);
}

ScreenSynced AgentClient::sync_screen(int settle_ms, int max_ms) {
    // The serial lane may still run input sent before: wait for it too.
    const json r = call(AgentMethod::screen_sync, {{"settle_ms", settle_ms}, {"max_ms", max_ms}},
                        {}, milliseconds(max_ms) + kDefaultReply)
                       .result;
    ScreenSynced synced;
    if (auto seq = r.find("seq"); seq != r.end() && seq->is_number_unsigned()) synced.seq = *seq;
    if (auto settled = r.find("settled"); settled != r.end() && settled->is_boolean())
        synced.settled = *settled;
    return synced;
}

json AgentClient::run_actions(const json& native_actions) {
    // Long holds and waits are allowed; the call must outlast them.
    const auto count = static_cast<long>(native_actions.size());
    const auto reply = std::min<milliseconds>(kDefaultReply + milliseconds(count * 61'000),
                                              std::chrono::minutes(30));
    return call(AgentMethod::input_actions, {{"actions", native_actions}}, {}, reply)
        .result["results"];
}

CommandResult AgentClient::run_command(CommandRequest request, Caller caller) {
    if (!request.cwd && link_.default_cwd && caller != Caller::server)
        if (std::string cwd = link_.default_cwd(); !cwd.empty()) request.cwd = std::move(cwd);
    json params = request.params();
    audit("command", params, caller);
    auto reply = call(AgentMethod::exec_run, std::move(params), std::move(request.stdin_bytes),
                      request.reply_timeout());
    CommandResult result;
    const json& r = reply.result;
    if (auto code = r.find("exit_code"); code != r.end() && code->is_number_integer())
        result.exit_code = code->get<int>();
    if (auto pid = r.find("pid"); pid != r.end() && pid->is_number_integer())
        result.pid = pid->get<long long>();
    if (auto out = r.find("stdout"); out != r.end() && out->is_string()) result.stdout_text = *out;
    if (auto err = r.find("stderr"); err != r.end() && err->is_string()) result.stderr_text = *err;
    result.json = std::move(reply.result);
    return result;
}

json AgentClient::kill_processes() {
    auto reply = call(AgentMethod::processes_kill, json::object(), {}, seconds(30));
    audit("processes.kill", reply.result, Caller::api);
    return reply.result;
}

void AgentClient::signal_command(long long pid, const json& signal, Caller caller) {
    json params = {{"pid", pid}};
    if (!signal.is_null()) params["signal"] = signal;
    audit("command.kill", params, caller);
    call(AgentMethod::exec_kill, std::move(params), {}, kDefaultReply);
}

void AgentClient::write_command_stdin(long long pid, std::string bytes, bool eof) {
    json params = {{"pid", pid}};
    if (eof) params["eof"] = true;
    call(AgentMethod::exec_stdin, std::move(params), std::move(bytes), kFileReply);
}

json AgentClient::running_commands() {
    return call(AgentMethod::exec_list, json::object(), {}, kDefaultReply).result;
}

json AgentClient::make_directory(const std::string& path, bool parents) {
    json params = {{"path", path}, {"parents", parents}};
    audit("files.mkdir", params, Caller::api);
    return call(AgentMethod::files_mkdir, std::move(params), {}, kDefaultReply).result;
}

json AgentClient::list_directory(const std::string& path) {
    return call(AgentMethod::files_list, {{"path", path}}, {}, kDefaultReply).result;
}

PathContents AgentClient::read_path(const std::string& path) {
    PathContents contents;
    try {
        contents.bytes = call(AgentMethod::files_read, {{"path", path}}, {}, kFileReply).body;
    } catch (const SandboxError& e) {
        if (e.code() != "is_a_directory") throw;
        contents.directory = true;
        contents.listing = list_directory(path);
    }
    return contents;
}

json AgentClient::write_file(const std::string& path, std::string bytes,
                             const std::optional<std::string>& mode, Caller caller) {
    json params = {{"path", path}, {"parents", true}};
    if (mode) params["mode"] = *mode;
    audit("files.write", {{"path", path}, {"bytes", bytes.size()}}, caller);
    return call(AgentMethod::files_write, std::move(params), std::move(bytes), kFileReply).result;
}

json AgentClient::remove_file(const std::string& path, bool recursive) {
    json params = {{"path", path}, {"recursive", recursive}};
    audit("files.remove", params, Caller::api);
    return call(AgentMethod::files_remove, std::move(params), {}, kDefaultReply).result;
}

json AgentClient::windows() {
    return call(AgentMethod::windows_list, json::object(), {}, seconds(10)).result;
}

json AgentClient::cursor() {
    return call(AgentMethod::cursor_get, json::object(), {}, kDefaultReply).result;
}

json AgentClient::clipboard() {
    return call(AgentMethod::clipboard_get, json::object(), {}, kDefaultReply).result;
}

json AgentClient::set_clipboard(const std::string& text) {
    return call(AgentMethod::clipboard_set, {{"text", text}}, {}, kDefaultReply).result;
}

// A large page's tree is thousands of D-Bus calls into the application.
constexpr milliseconds kAccessibilityReply = seconds(60);

json AgentClient::accessibility_tree(const json& params) {
    return call(AgentMethod::accessibility_tree, params, {}, kAccessibilityReply).result;
}

json AgentClient::accessibility_find(const json& params) {
    return call(AgentMethod::accessibility_find, params, {}, kAccessibilityReply).result;
}

json AgentClient::accessibility_act(const json& params) {
    audit("accessibility.act", params, Caller::api);
    return call(AgentMethod::accessibility_act, params, {}, kAccessibilityReply).result;
}

json AgentClient::listening_ports(milliseconds timeout) {
    return call(AgentMethod::net_listening, json::object(), {}, timeout).result;
}

json AgentClient::set_identity(const GuestIdentity& identity) {
    json params = {{"unix_time_ns", identity.unix_time_ns}, {"seed", identity.seed_base64}};
    if (identity.hostname) params["hostname"] = *identity.hostname;
    return call(AgentMethod::system_identity, std::move(params), {}, seconds(20)).result;
}

}  // namespace deskbox::server
