// Commands and files in a sandbox: exec and files get/put/ls/rm.
#include "server/cli/cli_commands.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <system_error>

namespace deskbox::cli {

using client::ApiError;
using client::Method;
using client::Query;
using nlohmann::json;

int command_exec(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "exec", tokens,
              {{"--shell", ""},
               {"--env", ""},
               {"--cwd", ""},
               {"--timeout", ""},
               {"--background", "", false},
               {"--stdin", "-i", false}},
              1);
    c.expect(1, 1);
    json body = json::object();
    auto shell = c.args.get("--shell");
    if (shell && !c.args.rest.empty()) {
        throw UsageError("give either --shell LINE or a command, not both", usage_of("exec"));
    }
    if (shell) {
        body["cmd"] = *shell;
    } else if (!c.args.rest.empty()) {
        body["argv"] = c.args.rest;
    } else {
        throw UsageError("no command given", usage_of("exec"));
    }
    std::map<std::string, std::string> env;
    for (const auto& entry : c.args.all("--env")) {
        auto [name, value] = parse_key_value(entry, "--env");
        env.insert_or_assign(name, value);
    }
    if (!env.empty()) body["env"] = env;
    if (auto cwd = c.args.get("--cwd")) body["cwd"] = *cwd;
    // The HTTP exchange must outlive the command: give it the command's timeout plus slack,
    // or an hour when the server's own default applies.
    auto http_timeout = std::chrono::milliseconds(std::chrono::hours(1));
    if (auto timeout = c.args.get("--timeout")) {
        long long seconds = parse_integer(*timeout, "--timeout", 1, 7LL * 24 * 3600);
        body["timeout_s"] = seconds;
        http_timeout = std::chrono::seconds(seconds + 60);
    }
    bool background = c.args.has("--background");
    if (background) body["background"] = true;
    if (c.args.has("--stdin")) body["stdin"] = read_all(context.in);

    client::ApiClient& api = context.client();
    api.set_request_timeout(http_timeout);
    json answer = api.post_json(sandbox_path(c.arg(0)) + "/commands", body);
    if (background) {
        context.out << text_of(answer, "pid") << "\n";
        return kExitOk;
    }
    if (answer.contains("stdout") && answer["stdout"].is_string()) {
        context.out << answer["stdout"].get<std::string>();
    }
    context.out.flush();
    if (answer.contains("stderr") && answer["stderr"].is_string()) {
        context.err << answer["stderr"].get<std::string>();
    }
    bool timed_out = answer.value("timed_out", false);
    if (timed_out) context.err << "deskbox: the command timed out\n";
    const json* code = answer.contains("exit_code") ? &answer["exit_code"] : nullptr;
    if (code && code->is_number_integer()) {
        long long value = code->get<long long>();
        // A shell's convention: a code outside 0..255 (a signal, say) cannot be passed on as is.
        return value >= 0 && value <= 255 ? static_cast<int>(value) : 128 + 1;
    }
    if (timed_out) return 124;  // like timeout(1)
    throw std::runtime_error("unexpected answer from deskboxd: no \"exit_code\"");
}

std::string files_target(const std::string& id, const std::string& path) {
    if (path.empty() || path.front() != '/') {
        throw UsageError("PATH must be absolute, got \"" + path + "\"", usage_of("files"));
    }
    return sandbox_path(id) + "/files" + Query().add("path", path).str();
}

int command_files(Context& context, const std::vector<std::string>& tokens) {
    static const std::vector<std::string> kSubcommands = {"get", "put", "ls", "rm"};
    if (tokens.empty() ||
        std::find(kSubcommands.begin(), kSubcommands.end(), tokens[0]) == kSubcommands.end()) {
        if (!tokens.empty() && (tokens[0] == "--help" || tokens[0] == "-h")) {
            throw ShowHelp{usage_of("files") + "\n"};
        }
        throw UsageError("expected get, put, ls or rm", usage_of("files"));
    }
    const std::string& sub = tokens[0];
    std::vector<std::string> rest(tokens.begin() + 1, tokens.end());
    if (sub == "get") {
        Command c(context, "files", rest, {{"--output", "-o"}});
        c.expect(2, 2);
        client::Response file = context.client().get_bytes(files_target(c.arg(0), c.arg(1)));
        write_output(context, c.args.get("--output").value_or("-"), file.body);
    } else if (sub == "put") {
        Command c(context, "files", rest, {{"--mode", ""}});
        c.expect(3, 3);
        std::string target = files_target(c.arg(0), c.arg(2));
        if (auto mode = c.args.get("--mode")) {
            if (mode->empty() || mode->size() > 5 ||
                mode->find_first_not_of("01234567") != std::string::npos) {
                throw UsageError("--mode: expected octal digits like 0644, got \"" + *mode + "\"");
            }
            target += "&mode=" + client::percent_encode(*mode);
        }
        std::string bytes = c.arg(1) == "-" ? read_all(context.in) : read_local_file(c.arg(1));
        context.client().put_bytes(target, std::move(bytes));
    } else if (sub == "ls") {
        Command c(context, "files", rest, {{"--json", "", false}});
        c.expect(2, 2);
        client::Response listing =
            context.client().call(Method::get, files_target(c.arg(0), c.arg(1)));
        std::string type = listing.header("Content-Type").value_or("");
        if (type.find("json") == std::string::npos) {
            throw std::runtime_error(c.arg(1) + " is a file, not a directory (use 'files get')");
        }
        json answer = listing.json();
        if (c.args.has("--json")) {
            context.out << answer.dump(2) << "\n";
            return kExitOk;
        }
        if (!answer.is_object() || !answer.contains("entries") || !answer["entries"].is_array()) {
            throw std::runtime_error("unexpected answer from deskboxd: no \"entries\" list");
        }
        std::vector<std::vector<std::string>> rows = {{"TYPE", "SIZE", "MODE", "NAME"}};
        for (const auto& entry : answer["entries"]) {
            rows.push_back({text_of(entry, "type"), text_of(entry, "size"),
                            entry.contains("mode") ? mode_text(entry["mode"]) : "-",
                            text_of(entry, "name")});
        }
        print_table(context.out, rows);
    } else {
        Command c(context, "files", rest, {{"--recursive", "-r", false}});
        c.expect(2, 2);
        std::string target = files_target(c.arg(0), c.arg(1));
        if (c.args.has("--recursive")) target += "&recursive=true";
        context.client().call(Method::del, target);
    }
    return kExitOk;
}

}  // namespace deskbox::cli
