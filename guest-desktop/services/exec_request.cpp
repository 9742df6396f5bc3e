#include "guest-desktop/services/exec_request.hpp"

#include <signal.h>
#include <string.h>
#include <sys/stat.h>

#include <cerrno>
#include <limits>

#include "guest-desktop/services/params.hpp"

namespace deskbox::services {

using nlohmann::json;

CommandSpec parse_run(const json& params, const ExecLimits& limits) {
    const json& p = params::object(params, {"argv", "cmd", "env", "cwd", "timeout_s", "background",
                                            "stream", "stdin_open", "stdin"});
    CommandSpec spec;
    const json* argv = params::find(p, "argv");
    auto cmd = params::opt_string(p, "cmd");
    if (argv && cmd) throw bad_request("cmd", "give either argv or cmd, not both");
    if (!argv && !cmd)
        throw bad_request("argv", "argv (array of strings) or cmd (string) is required");
    if (argv) {
        if (!argv->is_array())
            throw bad_request("argv",
                              std::string("must be an array of strings, not ") + argv->type_name());
        if (argv->empty()) throw bad_request("argv", "must not be empty");
        for (std::size_t i = 0; i < argv->size(); ++i) {
            const json& a = (*argv)[i];
            std::string field = "argv[" + std::to_string(i) + "]";
            if (!a.is_string())
                throw bad_request(field, std::string("must be a string, not ") + a.type_name());
            spec.argv.push_back(a.get<std::string>());
            params::require_no_nul(spec.argv.back(), field);
        }
        if (spec.argv[0].empty()) throw bad_request("argv[0]", "must not be empty");
        spec.command = *argv;
    } else {
        params::require_no_nul(*cmd, "cmd");
        if (cmd->empty()) throw bad_request("cmd", "must not be empty");
        spec.argv = {"/bin/sh", "-c", *cmd};
        spec.command = *cmd;
    }
    if (const json* env = params::find(p, "env")) {
        if (!env->is_object())
            throw bad_request("env",
                              std::string("must be an object of strings, not ") + env->type_name());
        for (const auto& [key, value] : env->items()) {
            std::string field = "env." + key;
            if (key.empty() || key.find('=') != std::string::npos ||
                key.find('\0') != std::string::npos)
                throw bad_request(field, "variable names must be non-empty, without '=' or NUL");
            if (!value.is_string())
                throw bad_request(field, std::string("must be a string, not ") + value.type_name());
            spec.env[key] = value.get<std::string>();
            params::require_no_nul(spec.env[key], field);
        }
    }
    if (auto cwd = params::opt_string(p, "cwd")) {
        params::require_no_nul(*cwd, "cwd");
        struct stat st {};
        if (cwd->empty() || (*cwd)[0] != '/') throw bad_request("cwd", "must be an absolute path");
        if (::stat(cwd->c_str(), &st) != 0)
            throw ServiceError(errno == ENOENT ? error_code::not_found : error_code::io_error,
                               "cwd: " + *cwd + ": " + std::strerror(errno), "cwd");
        if (!S_ISDIR(st.st_mode))
            throw ServiceError(error_code::not_a_directory, "cwd: " + *cwd + " is not a directory",
                               "cwd");
        spec.cwd = *cwd;
    }
    spec.background = params::opt_bool(p, "background").value_or(false);
    spec.stream = params::opt_bool(p, "stream").value_or(false);
    spec.stdin_open = params::opt_bool(p, "stdin_open").value_or(false);
    if (spec.stdin_open && !spec.background && !spec.stream)
        throw bad_request("stdin_open", "only for background or stream commands");
    spec.stdin_param = params::opt_string(p, "stdin").value_or("");
    auto timeout_s = params::opt_number(p, "timeout_s", 0, limits.max_timeout_s);
    if (timeout_s && *timeout_s <= 0) throw bad_request("timeout_s", "must be greater than 0");
    if (!timeout_s && !spec.background) timeout_s = limits.default_timeout_s;
    if (timeout_s)
        spec.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(*timeout_s * 1000));
    return spec;
}

int parse_signal(const json& p) {
    const json* v = params::find(p, "signal");
    if (!v) return SIGTERM;
    if (v->is_string()) {
        std::string name = v->get<std::string>();
        if (name.rfind("SIG", 0) == 0) name = name.substr(3);
        for (int s = 1; s < NSIG; ++s) {
            const char* abbrev = sigabbrev_np(s);
            if (abbrev && name == abbrev) return s;
        }
        throw bad_request("signal", "unknown signal name \"" + v->get<std::string>() + "\"");
    }
    return static_cast<int>(*params::opt_int(p, "signal", 1, NSIG - 1));
}

pid_t parse_pid(const json& p) {
    auto pid = params::opt_int(p, "pid", 1, std::numeric_limits<pid_t>::max());
    if (!pid) throw bad_request("pid", "is required");
    return static_cast<pid_t>(*pid);
}

}  // namespace deskbox::services
