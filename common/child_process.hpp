// A child process owned by the parent: killed (SIGKILL to its process group) and reaped on
// destruction, so a test or a crashed request never leaves one behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"

namespace deskbox {

struct SpawnOptions {
    std::vector<std::string> argv;
    std::optional<std::map<std::string, std::string>> env;  // nullopt: inherit
    std::map<std::string, std::string> env_overrides;       // applied on top
    std::string cwd;                                        // empty: inherit
    bool pipe_stdin = false;
    bool pipe_stdout = false;
    bool pipe_stderr = false;
    bool stdout_to_null = false;  // when not piped
    bool stderr_to_null = false;
    std::string stdout_file;  // when not piped: append to this file (created 0600)
    std::string stderr_file;
    bool new_process_group = true;  // so kill() reaches grandchildren too
    std::vector<int> keep_fds;      // fds (other than 0-2) the child keeps open
    int netns_fd = -1;              // >= 0: the child enters this network namespace first
    // Nonzero: the child gets this signal when the thread that spawned it ends (prctl
    // PR_SET_PDEATHSIG), e.g. a test killed by its timeout does not leave its server running.
    int parent_death_signal = 0;
    // Nonzero: the child's RLIMIT_NOFILE (soft and hard), set in the child only, so a parent
    // without CAP_SYS_RESOURCE keeps its own (it could not raise it back).
    unsigned long max_open_files = 0;
};

struct ExitStatus {
    int exit_code = -1;  // valid when !signaled
    int signal = 0;      // the signal that ended it, or 0
    bool exited() const { return signal == 0; }
};

// After fork, before exec (async-signal-safe): every descriptor above 2 but `keep` is marked
// close-on-exec, so nothing the server opened reaches the program.
void close_inherited_fds(const std::vector<int>& keep);

class ChildProcess {
  public:
    ChildProcess() = default;
    // Throws std::system_error if the program cannot be started (exec failure is reported
    // synchronously through a close-on-exec pipe).
    static ChildProcess spawn(const SpawnOptions& options);

    ~ChildProcess();
    ChildProcess(ChildProcess&& other) noexcept;
    ChildProcess& operator=(ChildProcess&& other) noexcept;
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;

    pid_t pid() const { return pid_; }
    bool running();  // reaps if it has exited
    // Blocks until exit (or timeout: nullopt).
    std::optional<ExitStatus> wait(std::optional<std::chrono::milliseconds> timeout = {});
    // Signals the process group (or the process, if it has none of its own).
    void signal(int sig);
    // SIGTERM, wait up to `grace`, then SIGKILL; always reaps.
    ExitStatus terminate(std::chrono::milliseconds grace = std::chrono::milliseconds(500));
    std::optional<ExitStatus> status() const { return status_; }
    // Lets the process run on untracked (it outlives us: a sandbox kept across a server
    // restart); this object is empty afterwards. Returns its pid.
    pid_t release();

    UniqueFd& stdin_fd() { return stdin_; }
    UniqueFd& stdout_fd() { return stdout_; }
    UniqueFd& stderr_fd() { return stderr_; }

  private:
    void reset();
    pid_t pid_ = -1;
    bool own_group_ = false;
    std::optional<ExitStatus> status_;
    UniqueFd stdin_, stdout_, stderr_;
};

// Runs a program to completion, collecting stdout and stderr. For tools and tests.
struct RunResult {
    ExitStatus status;
    std::string out;
    std::string err;
    bool timed_out = false;
};
RunResult run_process(const std::vector<std::string>& argv,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30),
                      const std::string& stdin_data = "");
// The same with spawn options (argv from `options`; its pipes are set here).
RunResult run_process(SpawnOptions options, std::chrono::milliseconds timeout,
                      const std::string& stdin_data = "");

}  // namespace deskbox
