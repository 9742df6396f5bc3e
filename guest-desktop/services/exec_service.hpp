// exec.*: runs commands in the guest. Each command gets its own process group, so a timeout or
// exec.kill reaches everything it started while it runs (shell pipelines, `sh -c 'x & wait'`).
//
// exec.run params: argv (non-empty array of strings) or cmd (a shell line for /bin/sh -c), not
// both; env (object of strings, over the agent's environment and `base_env`); cwd (existing
// directory); timeout_s (0 < t <= max_timeout_s); background, stream (bools); stdin_open
// (bool, background/stream only: keep stdin open for exec.stdin after the request body);
// stdin (string, alternative to the body). The request body is the command's stdin.
//
// Modes:
//  - foreground (default): runs on the caller's thread and returns
//    {"exit_code","stdout","stderr","timed_out","duration_ms"} plus, when signaled, "signal";
//    output is capped per stream (limit: "stdout_truncated"/"stderr_truncated": true; the rest is
//    read and dropped so the command never blocks on a full pipe). When a stream is not valid
//    UTF-8, "stdout" holds it with each invalid sequence replaced by U+FFFD and "stdout_b64"
//    holds the exact bytes in base64 (same for stderr). Default timeout: default_timeout_s.
//  - stream: returns {"pid"} at once; output goes to on_output as it arrives, then on_exit.
//    Default timeout: default_timeout_s.
//  - background: returns {"pid"} at once; no timeout unless timeout_s is given; output is
//    discarded unless stream is also set; on_exit is still called.
// One engine (command_io.hpp) pumps every command's pipes, foreground or not.
//
// What ends what (decided like E2B's sandboxes, where a started server outlives the command
// that started it):
//  - A command's timeout, and exec.kill while the command runs, signal its whole process
//    group: the command and everything it started so far.
//  - When the command itself exits, processes it left running (`python3 -m http.server &`,
//    `app &`) keep running: starting daemons is a use case. The result (or on_exit) comes
//    when the command exits; what they write afterwards to the inherited stdout/stderr is read
//    and dropped, so they neither block on a full pipe nor die of SIGPIPE (up to
//    max_draining_pipes pipes; past that the oldest is closed).
//  - Those processes end with the sandbox, or with `processes.kill` (the agent's sweep of
//    everything but the desktop session). exec.kill does not reach them once their command has
//    exited: its pid is no longer ours and answers not_found.
//  - Destroying the service (the agent stopping) kills every command still running, with its
//    process group.
// Callbacks run on the service's IO thread, never after destruction has begun.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "guest-desktop/services/service_error.hpp"

namespace deskbox::services {

struct ExecLimits {
    std::size_t max_output_bytes = std::size_t{16} << 20;  // per stream, foreground
    double default_timeout_s = 60;
    double max_timeout_s = 86400;
    std::size_t max_async_processes = 256;
    std::size_t max_pending_stdin_bytes = std::size_t{64} << 20;
    // Output pipes of exited commands that processes they left behind still hold open.
    std::size_t max_draining_pipes = 256;
};

struct ExecCallbacks {
    // stream is "stdout" or "stderr".
    std::function<void(pid_t pid, std::string_view stream, std::string_view bytes)> on_output;
    // exit_code is 128+signal when signaled (as shells report it); signal is 0 otherwise.
    std::function<void(pid_t pid, int exit_code, int signal)> on_exit;
};

class ExecService {
  public:
    // base_env: variables every command gets (e.g. DISPLAY), below the request's env.
    explicit ExecService(ExecCallbacks callbacks = {}, ExecLimits limits = {},
                         std::map<std::string, std::string> base_env = {});
    // Kills every command still running (process groups) and reaps them; no events follow.
    ~ExecService();
    ExecService(const ExecService&) = delete;
    ExecService& operator=(const ExecService&) = delete;

    // exec.run (see above); stdin_bytes is the request body.
    nlohmann::json run(const nlohmann::json& params, std::string_view stdin_bytes = {});
    // exec.kill {"pid","signal"?}: signal is a number or a name ("TERM", "SIGKILL"); default
    // TERM. Signals the command's process group. → {}
    nlohmann::json kill(const nlohmann::json& params);
    // exec.stdin {"pid","eof"?} + body: queues bytes for a background/stream command's stdin;
    // eof closes it after the queued bytes. → {}
    nlohmann::json write_stdin(const nlohmann::json& params, std::string_view bytes);
    // {"processes":[{"pid","command","background","stream","elapsed_ms"}]} of running commands.
    nlohmann::json list() const;

    void kill(pid_t pid, int signal);
    void write_stdin(pid_t pid, std::string_view bytes, bool eof);

    void set_base_env(std::map<std::string, std::string> base_env);

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace deskbox::services
