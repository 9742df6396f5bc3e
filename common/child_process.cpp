#include "common/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>

extern char** environ;

namespace deskbox {
namespace {

ExitStatus decode_status(int raw) {
    ExitStatus s;
    if (WIFEXITED(raw)) {
        s.exit_code = WEXITSTATUS(raw);
    } else if (WIFSIGNALED(raw)) {
        s.signal = WTERMSIG(raw);
        s.exit_code = 128 + s.signal;
    }
    return s;
}

// ---- before fork (the parent; may allocate) ----

// The environment the program gets: `env` or ours, with env_overrides on top.
std::vector<std::string> environment_strings(const SpawnOptions& options) {
    std::vector<std::string> env_strings;
    if (options.env) {
        for (const auto& [k, v] : *options.env)
            if (!options.env_overrides.count(k)) env_strings.push_back(k + "=" + v);
    } else {
        for (char** e = environ; *e; ++e) {
            std::string entry(*e);
            auto eq = entry.find('=');
            if (eq != std::string::npos && options.env_overrides.count(entry.substr(0, eq)))
                continue;
            env_strings.push_back(std::move(entry));
        }
    }
    for (const auto& [k, v] : options.env_overrides) env_strings.push_back(k + "=" + v);
    return env_strings;
}

// execvpe's argv and envp, built before fork because the child may not allocate. Pinned in
// place: the pointer arrays point into the strings.
class ExecArguments {
  public:
    explicit ExecArguments(const SpawnOptions& options)
        : argv_strings_(options.argv), env_strings_(environment_strings(options)) {
        for (auto& s : argv_strings_) argv_.push_back(s.data());
        argv_.push_back(nullptr);
        for (auto& s : env_strings_) envp_.push_back(s.data());
        envp_.push_back(nullptr);
    }
    ExecArguments(const ExecArguments&) = delete;
    ExecArguments& operator=(const ExecArguments&) = delete;

    char* const* argv() const { return argv_.data(); }
    char* const* envp() const { return envp_.data(); }

  private:
    std::vector<std::string> argv_strings_;
    std::vector<std::string> env_strings_;
    std::vector<char*> argv_;
    std::vector<char*> envp_;
};

// Where the child's stdin, stdout and stderr come from, opened before fork.
struct ChildStdio {
    Pipe in, out, err;
    UniqueFd out_file, err_file;
};

UniqueFd open_log(const std::string& path) {
    if (path.empty()) return UniqueFd();
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + path);
    return above_stdio(UniqueFd(fd));
}

ChildStdio open_stdio(const SpawnOptions& options) {
    ChildStdio stdio;
    if (options.pipe_stdin) stdio.in = Pipe::create();
    if (options.pipe_stdout) stdio.out = Pipe::create();
    if (options.pipe_stderr) stdio.err = Pipe::create();
    stdio.out_file = open_log(options.stdout_file);
    stdio.err_file = open_log(options.stderr_file);
    return stdio;
}

// ---- between fork and exec (the child): async-signal-safe calls only, no allocation ----

[[noreturn]] void child_fail(int report_fd, int err) {
    (void)!::write(report_fd, &err, sizeof err);
    ::_exit(127);
}

// Default signal dispositions and an empty mask, whatever the parent had.
void reset_signals() {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
}

// `from` becomes descriptor `to` (kept open across exec); nothing for from < 0.
void place_fd(int from, int to, int report_fd) {
    if (from < 0) return;
    if (from == to) {
        int flags = ::fcntl(from, F_GETFD);
        ::fcntl(from, F_SETFD, flags & ~FD_CLOEXEC);
    } else if (::dup2(from, to) < 0) {
        child_fail(report_fd, errno);
    }
}

// Output descriptor `to` (1 or 2): the pipe if piped, else the log file, else /dev/null if asked
// for; otherwise the parent's stays.
void place_output(int to, bool piped, const Pipe& pipe, const UniqueFd& file, bool to_null,
                  int devnull, int report_fd) {
    if (piped)
        place_fd(pipe.write.get(), to, report_fd);
    else if (file)
        place_fd(file.get(), to, report_fd);
    else if (to_null)
        place_fd(devnull, to, report_fd);
}

void redirect_stdio(const SpawnOptions& options, const ChildStdio& stdio, int report_fd) {
    int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    // Not on 0-2 (the parent may have had them closed), or placing one would overwrite it.
    if (devnull >= 0 && devnull <= 2) devnull = ::fcntl(devnull, F_DUPFD_CLOEXEC, 3);
    place_fd(options.pipe_stdin ? stdio.in.read.get() : devnull, 0, report_fd);
    place_output(1, options.pipe_stdout, stdio.out, stdio.out_file, options.stdout_to_null, devnull,
                 report_fd);
    place_output(2, options.pipe_stderr, stdio.err, stdio.err_file, options.stderr_to_null, devnull,
                 report_fd);
}

// Sets up the process as `options` asks and execs the program; on failure reports errno on
// report_fd (close-on-exec, so a successful exec closes it instead) and exits 127.
[[noreturn]] void exec_child(const SpawnOptions& options, const ChildStdio& stdio,
                             const ExecArguments& exec, int report_fd, pid_t parent) {
    if (options.new_process_group) ::setpgid(0, 0);
    if (options.parent_death_signal != 0) {
        ::prctl(PR_SET_PDEATHSIG, options.parent_death_signal);
        if (::getppid() != parent) ::raise(options.parent_death_signal);  // already gone
    }
    reset_signals();
    redirect_stdio(options, stdio, report_fd);
    close_inherited_fds(options.keep_fds);
    if (options.max_open_files != 0) {
        const rlimit files{options.max_open_files, options.max_open_files};
        if (::setrlimit(RLIMIT_NOFILE, &files) != 0) child_fail(report_fd, errno);
    }
    if (options.netns_fd >= 0 && ::setns(options.netns_fd, CLONE_NEWNET) != 0)
        child_fail(report_fd, errno);
    if (!options.cwd.empty() && ::chdir(options.cwd.c_str()) != 0) child_fail(report_fd, errno);
    ::execvpe(exec.argv()[0], exec.argv(), exec.envp());
    child_fail(report_fd, errno);
}

// ---- after fork (the parent) ----

// 0 once the child has exec'd (the report pipe closed), else the errno it reported.
int read_exec_error(Pipe& report) {
    report.write.reset();
    int child_errno = 0;
    ssize_t n;
    do {
        n = ::read(report.read.get(), &child_errno, sizeof child_errno);
    } while (n < 0 && errno == EINTR);
    return n == static_cast<ssize_t>(sizeof child_errno) ? child_errno : 0;
}

}  // namespace

void close_inherited_fds(const std::vector<int>& keep) {
    // Nothing else of ours reaches the program: a socket or file the server opened without
    // O_CLOEXEC (Asio's listening socket is one) would otherwise live on in runc or QEMU,
    // and a restarted server could not listen on its port while a sandbox runs.
    if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
        for (int fd = 3; fd < 65536; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    for (int fd : keep) {
        int flags = ::fcntl(fd, F_GETFD);
        if (flags >= 0) ::fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC);
    }
}

ChildProcess ChildProcess::spawn(const SpawnOptions& options) {
    if (options.argv.empty())
        throw std::system_error(EINVAL, std::generic_category(), "empty argv");

    // Everything the child needs is prepared before fork: after fork only async-signal-safe calls.
    const ExecArguments exec(options);
    ChildStdio stdio = open_stdio(options);
    Pipe report = Pipe::create();

    const pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
    if (pid == 0) exec_child(options, stdio, exec, report.write.get(), parent);

    ChildProcess child;
    child.pid_ = pid;
    child.own_group_ = options.new_process_group;
    if (options.new_process_group) ::setpgid(pid, pid);  // avoid racing the child's own setpgid
    if (int child_errno = read_exec_error(report)) {
        child.wait();
        throw std::system_error(child_errno, std::generic_category(),
                                "cannot start '" + options.argv[0] + "'");
    }
    child.stdin_ = std::move(stdio.in.write);
    child.stdout_ = std::move(stdio.out.read);
    child.stderr_ = std::move(stdio.err.read);
    return child;
}

ChildProcess::~ChildProcess() {
    reset();
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      own_group_(other.own_group_),
      status_(other.status_),
      stdin_(std::move(other.stdin_)),
      stdout_(std::move(other.stdout_)),
      stderr_(std::move(other.stderr_)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
    if (this != &other) {
        reset();
        pid_ = std::exchange(other.pid_, -1);
        own_group_ = other.own_group_;
        status_ = other.status_;
        stdin_ = std::move(other.stdin_);
        stdout_ = std::move(other.stdout_);
        stderr_ = std::move(other.stderr_);
    }
    return *this;
}

pid_t ChildProcess::release() {
    const pid_t pid = std::exchange(pid_, -1);
    status_.reset();
    stdin_.reset();
    stdout_.reset();
    stderr_.reset();
    return pid;
}

void ChildProcess::reset() {
    if (pid_ > 0) {
        if (!status_) {
            signal(SIGKILL);
            wait();
        } else if (own_group_) {
            ::kill(-pid_, SIGKILL);  // grandchildren left in the group
        }
    }
    pid_ = -1;
    status_.reset();
    stdin_.reset();
    stdout_.reset();
    stderr_.reset();
}

bool ChildProcess::running() {
    if (pid_ <= 0 || status_) return false;
    int raw = 0;
    pid_t r = ::waitpid(pid_, &raw, WNOHANG);
    if (r == pid_) {
        status_ = decode_status(raw);
        return false;
    }
    return r == 0;
}

std::optional<ExitStatus> ChildProcess::wait(std::optional<std::chrono::milliseconds> timeout) {
    if (pid_ <= 0) return status_;
    if (status_) return status_;
    if (!timeout) {
        int raw = 0;
        pid_t r;
        do {
            r = ::waitpid(pid_, &raw, 0);
        } while (r < 0 && errno == EINTR);
        if (r == pid_)
            status_ = decode_status(raw);
        else
            status_ = ExitStatus{-1, 0};  // already reaped elsewhere
        return status_;
    }
    auto deadline = std::chrono::steady_clock::now() + *timeout;
    auto sleep = std::chrono::microseconds(200);
    while (true) {
        if (!running()) return status_;
        if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
        std::this_thread::sleep_for(sleep);
        sleep = std::min(sleep * 2, std::chrono::microseconds(10'000));
    }
}

void ChildProcess::signal(int sig) {
    if (pid_ <= 0 || status_) return;
    if (own_group_)
        ::kill(-pid_, sig);
    else
        ::kill(pid_, sig);
}

ExitStatus ChildProcess::terminate(std::chrono::milliseconds grace) {
    if (pid_ <= 0) return status_.value_or(ExitStatus{});
    if (!status_) {
        signal(SIGTERM);
        if (!wait(grace)) {
            signal(SIGKILL);
            wait();
        }
    }
    if (own_group_) ::kill(-pid_, SIGKILL);
    return *status_;
}

RunResult run_process(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                      const std::string& stdin_data) {
    SpawnOptions opts;
    opts.argv = argv;
    return run_process(std::move(opts), timeout, stdin_data);
}

RunResult run_process(SpawnOptions opts, std::chrono::milliseconds timeout,
                      const std::string& stdin_data) {
    opts.pipe_stdin = true;
    opts.pipe_stdout = true;
    opts.pipe_stderr = true;
    ChildProcess child = ChildProcess::spawn(opts);
    RunResult result;
    // Feed stdin from a thread so a child that writes a lot before reading can't deadlock us.
    std::thread feeder([fd = child.stdin_fd().release(), data = stdin_data]() {
        UniqueFd owned(fd);
        ::signal(SIGPIPE, SIG_IGN);
        write_all(owned.get(), data.data(), data.size());
    });
    auto deadline = std::chrono::steady_clock::now() + timeout;
    pollfd fds[2] = {{child.stdout_fd().get(), POLLIN, 0}, {child.stderr_fd().get(), POLLIN, 0}};
    std::string* sinks[2] = {&result.out, &result.err};
    int open_count = 2;
    char buf[65536];
    while (open_count > 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            result.timed_out = true;
            break;
        }
        int r = ::poll(fds, 2, static_cast<int>(left.count()));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
            if (n > 0) {
                sinks[i]->append(buf, static_cast<std::size_t>(n));
            } else if (n == 0 || errno != EINTR) {
                fds[i].fd = -1;
                --open_count;
            }
        }
    }
    if (result.timed_out)
        result.status = child.terminate(std::chrono::milliseconds(200));
    else
        result.status = *child.wait();
    feeder.join();
    return result;
}

}  // namespace deskbox
