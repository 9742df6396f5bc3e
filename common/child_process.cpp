#include "common/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
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

[[noreturn]] void child_fail(int report_fd, int err) {
    (void)!::write(report_fd, &err, sizeof err);
    ::_exit(127);
}

}  // namespace

ChildProcess ChildProcess::spawn(const SpawnOptions& options) {
    if (options.argv.empty())
        throw std::system_error(EINVAL, std::generic_category(), "empty argv");

    // Everything the child needs is prepared before fork: after fork only async-signal-safe calls.
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
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_copy = options.argv;
    std::vector<char*> argv;
    for (auto& s : argv_copy) argv.push_back(s.data());
    argv.push_back(nullptr);

    Pipe in, out, err;
    if (options.pipe_stdin) in = Pipe::create();
    if (options.pipe_stdout) out = Pipe::create();
    if (options.pipe_stderr) err = Pipe::create();
    auto open_log = [](const std::string& path) {
        if (path.empty()) return UniqueFd();
        int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + path);
        return UniqueFd(fd);
    };
    UniqueFd out_file = open_log(options.stdout_file);
    UniqueFd err_file = open_log(options.stderr_file);
    Pipe report = Pipe::create();
    const char* cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();
    std::vector<int> keep = options.keep_fds;

    const pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
    if (pid == 0) {
        int rfd = report.write.get();
        if (options.new_process_group) ::setpgid(0, 0);
        if (options.parent_death_signal != 0) {
            ::prctl(PR_SET_PDEATHSIG, options.parent_death_signal);
            if (::getppid() != parent) ::raise(options.parent_death_signal);  // already gone
        }
        // Default signal dispositions and an empty mask, whatever the parent had.
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
        int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
        auto place = [&](int from, int to) {
            if (from < 0) return;
            if (from == to) {
                int flags = ::fcntl(from, F_GETFD);
                ::fcntl(from, F_SETFD, flags & ~FD_CLOEXEC);
            } else if (::dup2(from, to) < 0) {
                child_fail(rfd, errno);
            }
        };
        place(options.pipe_stdin ? in.read.get() : devnull, 0);
        if (options.pipe_stdout)
            place(out.write.get(), 1);
        else if (out_file)
            place(out_file.get(), 1);
        else if (options.stdout_to_null)
            place(devnull, 1);
        if (options.pipe_stderr)
            place(err.write.get(), 2);
        else if (err_file)
            place(err_file.get(), 2);
        else if (options.stderr_to_null)
            place(devnull, 2);
        // Nothing else of ours reaches the program: a socket or file the server opened without
        // O_CLOEXEC (Asio's listening socket is one) would otherwise live on in runc or QEMU,
        // and a restarted server could not listen on its port while a sandbox runs.
        if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
            for (int fd = 3; fd < 65536; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
        for (int fd : keep) {
            int flags = ::fcntl(fd, F_GETFD);
            if (flags >= 0) ::fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC);
        }
        if (options.netns_fd >= 0 && ::setns(options.netns_fd, CLONE_NEWNET) != 0)
            child_fail(rfd, errno);
        if (cwd && ::chdir(cwd) != 0) child_fail(rfd, errno);
        ::execvpe(argv[0], argv.data(), envp.data());
        child_fail(rfd, errno);
    }

    ChildProcess child;
    child.pid_ = pid;
    child.own_group_ = options.new_process_group;
    if (options.new_process_group) ::setpgid(pid, pid);  // avoid racing the child's own setpgid
    report.write.reset();
    int child_errno = 0;
    ssize_t n;
    do {
        n = ::read(report.read.get(), &child_errno, sizeof child_errno);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof child_errno)) {
        child.wait();
        throw std::system_error(child_errno, std::generic_category(),
                                "cannot start '" + options.argv[0] + "'");
    }
    child.stdin_ = std::move(in.write);
    child.stdout_ = std::move(out.read);
    child.stderr_ = std::move(err.read);
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
