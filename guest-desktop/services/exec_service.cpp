#include "guest-desktop/services/exec_service.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include "common/base64.hpp"
#include "common/child_process.hpp"
#include "common/unique_fd.hpp"
#include "common/utf8.hpp"
#include "guest-desktop/services/params.hpp"

namespace deskbox::services {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kReadChunk = 65536;

struct CommandSpec {
    std::vector<std::string> argv;
    json command;  // what the caller asked for, for list()
    std::map<std::string, std::string> env;
    std::string cwd;
    std::optional<std::chrono::milliseconds> timeout;
    bool background = false;
    bool stream = false;
    bool stdin_open = false;
    std::string stdin_param;
};

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

// A write that turns SIGPIPE into EPIPE for this thread only, leaving the process-wide
// disposition alone (the agent may embed us next to code that relies on it).
ssize_t write_without_sigpipe(int fd, const char* data, std::size_t size) {
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    ssize_t n;
    do {
        n = ::write(fd, data, size);
    } while (n < 0 && errno == EINTR);
    int saved = errno;
    if (n < 0 && saved == EPIPE) {
        sigset_t pending;
        sigpending(&pending);
        if (sigismember(&pending, SIGPIPE)) {
            timespec zero{};
            sigtimedwait(&pipe_set, nullptr, &zero);
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    errno = saved;
    return n;
}

void set_nonblocking(int fd) {
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// Reads what is available now. Returns false at EOF or error (the fd is then done).
bool read_available(int fd, const std::function<void(const char*, std::size_t)>& sink,
                    int max_reads = 1) {
    char buf[kReadChunk];
    for (int i = 0; i < max_reads; ++i) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n > 0) {
            sink(buf, static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR) {
            --i;
            continue;
        }
        if (n < 0 && errno == EAGAIN) return true;
        return false;
    }
    return true;
}

UniqueFd open_pidfd(pid_t pid) {
    // Pollable exit notification; without it (old kernels) we fall back to periodic checks.
    // (The syscall directly: glibc 2.36's <sys/pidfd.h> lacks extern "C" for C++.)
    return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
}

ChildProcess spawn_command(const CommandSpec& spec, const std::map<std::string, std::string>& base,
                           bool pipe_stdin, bool pipe_output) {
    SpawnOptions o;
    o.argv = spec.argv;
    o.env_overrides = base;
    for (const auto& [k, v] : spec.env) o.env_overrides[k] = v;
    o.cwd = spec.cwd;
    o.pipe_stdin = pipe_stdin;
    o.pipe_stdout = pipe_output;
    o.pipe_stderr = pipe_output;
    o.stdout_to_null = !pipe_output;
    o.stderr_to_null = !pipe_output;
    o.new_process_group = true;
    try {
        return ChildProcess::spawn(o);
    } catch (const std::system_error& e) {
        int err = e.code().value();
        std::string field = spec.command.is_string() ? "cmd" : "argv[0]";
        const char* code = err == ENOENT                    ? error_code::not_found
                           : err == EACCES                  ? error_code::permission_denied
                           : err == E2BIG                   ? error_code::bad_request
                           : err == EAGAIN || err == ENOMEM ? error_code::resource_exhausted
                                                            : error_code::io_error;
        throw ServiceError(code, "cannot start '" + spec.argv[0] + "': " + std::strerror(err),
                           field);
    }
}

void put_output(json& result, const std::string& name, std::string& bytes, bool truncated) {
    if (truncated) bytes.resize(utf8::trim_partial(bytes));
    if (utf8::is_valid(bytes)) {
        result[name] = bytes;
    } else {
        result[name] = utf8::to_valid(bytes);
        result[name + "_b64"] = base64_encode(bytes);
    }
    if (truncated) result[name + "_truncated"] = true;
}

std::int64_t elapsed_ms(Clock::time_point since) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

}  // namespace

struct ExecService::Impl {
    struct Foreground {
        json command;
        Clock::time_point started;
        bool reaped = false;  // from then on its pid may be reused: never signal it
    };
    struct Async {
        ChildProcess child;
        UniqueFd pidfd;
        UniqueFd out, err, in;
        std::string pending_stdin;
        bool close_stdin_when_drained = false;
        bool stream = false;
        bool background = false;
        std::optional<Clock::time_point> deadline;
        json command;
        Clock::time_point started;
    };

    ExecCallbacks callbacks;
    ExecLimits limits;

    mutable std::mutex mutex;
    std::condition_variable foreground_done;
    std::map<std::string, std::string> base_env;
    std::map<pid_t, Foreground> foreground;  // registered until reaped: their pids stay valid
    int active_calls = 0;
    std::map<pid_t, std::unique_ptr<Async>> async;
    bool stopping = false;
    UniqueFd wake;  // eventfd: wakes the IO thread after changes
    std::thread io_thread;

    // Ends a run() call on every way out, as the very last use of the Impl: the destructor
    // waits for active_calls to drop to 0 and may free everything right after.
    struct CallGuard {
        Impl& impl;
        pid_t foreground_pid = 0;
        ~CallGuard() {
            std::lock_guard lock(impl.mutex);
            if (foreground_pid) impl.foreground.erase(foreground_pid);
            --impl.active_calls;
            impl.foreground_done.notify_all();
        }
    };

    void wake_io() {
        std::uint64_t one = 1;
        (void)!::write(wake.get(), &one, sizeof one);
    }

    json run_foreground(const CommandSpec& spec, std::string_view stdin_bytes);
    json start_async(const CommandSpec& spec, std::string_view stdin_bytes);
    void io_loop();
    void finish_async(pid_t pid);
    void emit_output(pid_t pid, const char* stream, const char* data, std::size_t size) {
        if (callbacks.on_output) callbacks.on_output(pid, stream, std::string_view(data, size));
    }
};

ExecService::ExecService(ExecCallbacks callbacks, ExecLimits limits,
                         std::map<std::string, std::string> base_env)
    : impl_(std::make_unique<Impl>()) {
    impl_->callbacks = std::move(callbacks);
    impl_->limits = limits;
    impl_->base_env = std::move(base_env);
    impl_->wake = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!impl_->wake) throw std::system_error(errno, std::generic_category(), "eventfd");
    impl_->io_thread = std::thread([impl = impl_.get()] { impl->io_loop(); });
}

ExecService::~ExecService() {
    Impl& s = *impl_;
    std::unique_lock lock(s.mutex);
    s.stopping = true;
    for (auto& [pid, fg] : s.foreground)
        if (!fg.reaped) ::kill(-pid, SIGKILL);
    for (auto& [pid, a] : s.async) a->child.signal(SIGKILL);
    s.wake_io();
    // Foreground calls notice their child's death and return; wait for them to unregister.
    s.foreground_done.wait(lock, [&] { return s.active_calls == 0; });
    lock.unlock();
    s.io_thread.join();
    s.async.clear();  // ChildProcess reaps and kills what is left of each group
}

void ExecService::set_base_env(std::map<std::string, std::string> base_env) {
    std::lock_guard lock(impl_->mutex);
    impl_->base_env = std::move(base_env);
}

json ExecService::run(const json& params, std::string_view stdin_bytes) {
    CommandSpec spec = parse_run(params, impl_->limits);
    if (!spec.stdin_param.empty()) {
        if (!stdin_bytes.empty())
            throw bad_request("stdin", "give stdin as the body or as a parameter, not both");
        stdin_bytes = spec.stdin_param;
    }
    if (spec.background || spec.stream) return impl_->start_async(spec, stdin_bytes);
    return impl_->run_foreground(spec, stdin_bytes);
}

json ExecService::Impl::run_foreground(const CommandSpec& spec, std::string_view stdin_bytes) {
    auto started = Clock::now();
    std::map<std::string, std::string> env;
    {
        std::lock_guard lock(mutex);
        if (stopping) throw ServiceError(error_code::unavailable, "exec service is shutting down");
        env = base_env;
        ++active_calls;
    }
    CallGuard guard{*this};
    ChildProcess child = spawn_command(spec, env, !stdin_bytes.empty(), true);
    const pid_t pid = child.pid();
    {
        std::lock_guard lock(mutex);
        foreground[pid] = Foreground{spec.command, started};
        guard.foreground_pid = pid;
        if (stopping) ::kill(-pid, SIGKILL);  // the destructor began meanwhile
    }
    const std::size_t cap = limits.max_output_bytes;

    UniqueFd pidfd = open_pidfd(pid);
    UniqueFd in = std::move(child.stdin_fd());
    UniqueFd out = std::move(child.stdout_fd());
    UniqueFd err = std::move(child.stderr_fd());
    set_nonblocking(in.get());
    set_nonblocking(out.get());
    set_nonblocking(err.get());

    std::string outputs[2];
    bool truncated[2] = {false, false};
    auto sink = [&](int i) {
        return [&, i](const char* data, std::size_t size) {
            std::size_t room = cap - std::min(cap, outputs[i].size());
            if (size > room) truncated[i] = true;
            outputs[i].append(data, std::min(size, room));
        };
    };
    std::size_t stdin_written = 0;
    bool has_deadline = spec.timeout.has_value();
    Clock::time_point deadline = started + spec.timeout.value_or(std::chrono::milliseconds(0));
    bool timed_out = false;
    bool exited = false;

    while (!exited) {
        pollfd fds[4];
        int n = 0;
        int idx_out = -1, idx_err = -1, idx_in = -1, idx_pid = -1;
        if (out) idx_out = n, fds[n++] = {out.get(), POLLIN, 0};
        if (err) idx_err = n, fds[n++] = {err.get(), POLLIN, 0};
        if (in) idx_in = n, fds[n++] = {in.get(), POLLOUT, 0};
        if (pidfd) idx_pid = n, fds[n++] = {pidfd.get(), POLLIN, 0};
        int wait_ms = pidfd ? -1 : 20;
        if (has_deadline) {
            auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())
                    .count();
            wait_ms = wait_ms < 0
                          ? static_cast<int>(std::max<std::int64_t>(0, left + 1))
                          : static_cast<int>(std::clamp<std::int64_t>(left + 1, 0, wait_ms));
        }
        int r = ::poll(fds, static_cast<nfds_t>(n), wait_ms);
        if (r < 0) continue;  // EINTR; nothing else is expected with valid fds
        if (idx_out >= 0 && fds[idx_out].revents && !read_available(out.get(), sink(0)))
            out.reset();
        if (idx_err >= 0 && fds[idx_err].revents && !read_available(err.get(), sink(1)))
            err.reset();
        if (idx_in >= 0 && fds[idx_in].revents) {
            ssize_t w = write_without_sigpipe(in.get(), stdin_bytes.data() + stdin_written,
                                              stdin_bytes.size() - stdin_written);
            if (w > 0) stdin_written += static_cast<std::size_t>(w);
            if ((w < 0 && errno != EAGAIN) || stdin_written == stdin_bytes.size()) in.reset();
        }
        bool gone = pidfd ? fds[idx_pid].revents != 0 : !child.running();
        if (gone) {
            exited = true;
        } else if (has_deadline && Clock::now() >= deadline) {
            timed_out = true;
            ::kill(-pid, SIGKILL);  // registered, hence not yet reaped: pid is still ours
            has_deadline = false;
        }
    }
    // The leader is a zombie until reaped, which keeps its process group id ours.
    if (timed_out) ::kill(-pid, SIGKILL);  // stragglers that joined the group meanwhile
    {
        std::lock_guard lock(mutex);
        foreground[pid].reaped = true;
    }
    ExitStatus status = *child.wait();
    // Output written before the exit is in the pipes; take it, but don't wait for EOF: a
    // background grandchild may hold the pipe open for as long as it lives.
    if (out) read_available(out.get(), sink(0), 256);
    if (err) read_available(err.get(), sink(1), 256);

    json result = {{"exit_code", status.exit_code},
                   {"timed_out", timed_out},
                   {"duration_ms", elapsed_ms(started)}};
    if (status.signal) result["signal"] = status.signal;
    put_output(result, "stdout", outputs[0], truncated[0]);
    put_output(result, "stderr", outputs[1], truncated[1]);
    return result;
}

json ExecService::Impl::start_async(const CommandSpec& spec, std::string_view stdin_bytes) {
    std::map<std::string, std::string> env;
    {
        std::lock_guard lock(mutex);
        if (stopping) throw ServiceError(error_code::unavailable, "exec service is shutting down");
        if (async.size() >= limits.max_async_processes)
            throw ServiceError(error_code::unavailable,
                               "too many background commands running (limit " +
                                   std::to_string(limits.max_async_processes) + ")");
        env = base_env;
        ++active_calls;
    }
    CallGuard guard{*this};
    if (stdin_bytes.size() > limits.max_pending_stdin_bytes)
        throw ServiceError(error_code::too_large, "stdin is larger than the limit", "stdin");
    bool pipe_stdin = spec.stdin_open || !stdin_bytes.empty();
    auto proc = std::make_unique<Async>();
    proc->child = spawn_command(spec, env, pipe_stdin, spec.stream);
    proc->pidfd = open_pidfd(proc->child.pid());
    proc->in = std::move(proc->child.stdin_fd());
    proc->out = std::move(proc->child.stdout_fd());
    proc->err = std::move(proc->child.stderr_fd());
    set_nonblocking(proc->in.get());
    set_nonblocking(proc->out.get());
    set_nonblocking(proc->err.get());
    proc->pending_stdin.assign(stdin_bytes);
    proc->close_stdin_when_drained = !spec.stdin_open;
    if (proc->in && proc->pending_stdin.empty() && proc->close_stdin_when_drained) proc->in.reset();
    proc->stream = spec.stream;
    proc->background = spec.background;
    proc->command = spec.command;
    proc->started = Clock::now();
    if (spec.timeout) proc->deadline = proc->started + *spec.timeout;
    pid_t pid = proc->child.pid();
    {
        std::lock_guard lock(mutex);
        if (stopping) return {{"pid", pid}};  // proc's destructor kills it
        async[pid] = std::move(proc);
        wake_io();
    }
    return {{"pid", pid}};
}

void ExecService::Impl::io_loop() {
    struct Watch {
        pid_t pid;
        Async* proc;
        enum What { out, err, in, exit } what;
    };
    std::vector<pollfd> fds;
    std::vector<Watch> watches;
    while (true) {
        fds.clear();
        watches.clear();
        fds.push_back({wake.get(), POLLIN, 0});
        watches.push_back({0, nullptr, Watch::exit});
        int wait_ms = -1;
        std::vector<pid_t> expired, polled_exit;
        {
            std::lock_guard lock(mutex);
            if (stopping) return;
            auto now = Clock::now();
            for (auto& [pid, p] : async) {
                // Entries are only erased by this thread, so the pointers stay valid unlocked.
                Async* a = p.get();
                if (a->out)
                    fds.push_back({a->out.get(), POLLIN, 0}),
                        watches.push_back({pid, a, Watch::out});
                if (a->err)
                    fds.push_back({a->err.get(), POLLIN, 0}),
                        watches.push_back({pid, a, Watch::err});
                if (a->in && !a->pending_stdin.empty())
                    fds.push_back({a->in.get(), POLLOUT, 0}),
                        watches.push_back({pid, a, Watch::in});
                if (a->pidfd) {
                    fds.push_back({a->pidfd.get(), POLLIN, 0});
                    watches.push_back({pid, a, Watch::exit});
                } else {
                    wait_ms = wait_ms < 0 ? 20 : std::min(wait_ms, 20);
                    polled_exit.push_back(pid);
                }
                if (a->deadline) {
                    auto left =
                        std::chrono::duration_cast<std::chrono::milliseconds>(*a->deadline - now)
                            .count() +
                        1;
                    int ms = static_cast<int>(std::clamp<std::int64_t>(left, 0, 1 << 30));
                    wait_ms = wait_ms < 0 ? ms : std::min(wait_ms, ms);
                }
            }
        }
        int r = ::poll(fds.data(), static_cast<nfds_t>(fds.size()), wait_ms);
        if (r < 0 && errno != EINTR) continue;
        if (fds[0].revents) {
            std::uint64_t count;
            (void)!::read(wake.get(), &count, sizeof count);
        }
        std::vector<pid_t> exited;
        for (std::size_t i = 1; i < fds.size(); ++i) {
            if (!fds[i].revents) continue;
            const Watch& w = watches[i];
            Async* a = w.proc;
            switch (w.what) {
                case Watch::out:
                    if (!read_available(a->out.get(), [&](const char* d, std::size_t n) {
                            emit_output(w.pid, "stdout", d, n);
                        }))
                        a->out.reset();
                    break;
                case Watch::err:
                    if (!read_available(a->err.get(), [&](const char* d, std::size_t n) {
                            emit_output(w.pid, "stderr", d, n);
                        }))
                        a->err.reset();
                    break;
                case Watch::in: {
                    std::lock_guard lock(mutex);
                    ssize_t n = write_without_sigpipe(a->in.get(), a->pending_stdin.data(),
                                                      a->pending_stdin.size());
                    if (n > 0) a->pending_stdin.erase(0, static_cast<std::size_t>(n));
                    if (n < 0 && errno != EAGAIN) {
                        a->in.reset();  // the command closed its stdin
                        a->pending_stdin.clear();
                    } else if (a->pending_stdin.empty() && a->close_stdin_when_drained) {
                        a->in.reset();
                    }
                    break;
                }
                case Watch::exit:
                    exited.push_back(w.pid);
                    break;
            }
        }
        {
            std::lock_guard lock(mutex);
            auto now = Clock::now();
            for (auto& [pid, a] : async) {
                if (a->deadline && now >= *a->deadline) {
                    a->child.signal(SIGKILL);  // not reaped yet (we reap), so the group is ours
                    a->deadline.reset();
                }
            }
            for (pid_t pid : polled_exit) {
                auto it = async.find(pid);
                if (it != async.end() && !it->second->child.running()) exited.push_back(pid);
            }
        }
        for (pid_t pid : exited) finish_async(pid);
    }
}

void ExecService::Impl::finish_async(pid_t pid) {
    std::unique_ptr<Async> proc;
    ExitStatus status;
    {
        std::lock_guard lock(mutex);
        auto it = async.find(pid);
        if (it == async.end()) return;
        proc = std::move(it->second);
        async.erase(it);
        status = *proc->child.wait();
    }
    if (proc->out)
        read_available(
            proc->out.get(),
            [&](const char* d, std::size_t n) { emit_output(pid, "stdout", d, n); }, 256);
    if (proc->err)
        read_available(
            proc->err.get(),
            [&](const char* d, std::size_t n) { emit_output(pid, "stderr", d, n); }, 256);
    if (callbacks.on_exit) callbacks.on_exit(pid, status.exit_code, status.signal);
}

json ExecService::kill(const json& params) {
    const json& p = params::object(params, {"pid", "signal"});
    pid_t pid = parse_pid(p);
    kill(pid, parse_signal(p));
    return json::object();
}

void ExecService::kill(pid_t pid, int signal) {
    std::lock_guard lock(impl_->mutex);
    // Only our own, not yet reaped commands: their pids cannot have been reused.
    if (auto it = impl_->async.find(pid); it != impl_->async.end()) {
        it->second->child.signal(signal);
        return;
    }
    if (auto it = impl_->foreground.find(pid);
        it != impl_->foreground.end() && !it->second.reaped) {
        ::kill(-pid, signal);
        return;
    }
    throw ServiceError(error_code::not_found, "no running command with pid " + std::to_string(pid),
                       "pid");
}

json ExecService::write_stdin(const json& params, std::string_view bytes) {
    const json& p = params::object(params, {"pid", "eof"});
    pid_t pid = parse_pid(p);
    write_stdin(pid, bytes, params::opt_bool(p, "eof").value_or(false));
    return json::object();
}

void ExecService::write_stdin(pid_t pid, std::string_view bytes, bool eof) {
    std::lock_guard lock(impl_->mutex);
    auto it = impl_->async.find(pid);
    if (it == impl_->async.end())
        throw ServiceError(
            error_code::not_found,
            "no running background or stream command with pid " + std::to_string(pid), "pid");
    Impl::Async& a = *it->second;
    if (!a.in || a.close_stdin_when_drained)
        throw bad_request("pid", "stdin of command " + std::to_string(pid) +
                                     " is closed (start it with stdin_open to write to it)");
    if (a.pending_stdin.size() + bytes.size() > impl_->limits.max_pending_stdin_bytes)
        throw ServiceError(
            error_code::too_large,
            "command " + std::to_string(pid) + " is not reading its stdin fast enough", "pid");
    a.pending_stdin.append(bytes);
    if (eof) {
        a.close_stdin_when_drained = true;
        if (a.pending_stdin.empty()) a.in.reset();
    }
    impl_->wake_io();
}

json ExecService::list() const {
    std::lock_guard lock(impl_->mutex);
    json processes = json::array();
    for (const auto& [pid, fg] : impl_->foreground)
        if (!fg.reaped)
            processes.push_back({{"pid", pid},
                                 {"command", fg.command},
                                 {"background", false},
                                 {"stream", false},
                                 {"elapsed_ms", elapsed_ms(fg.started)}});
    for (const auto& [pid, a] : impl_->async)
        processes.push_back({{"pid", pid},
                             {"command", a->command},
                             {"background", a->background},
                             {"stream", a->stream},
                             {"elapsed_ms", elapsed_ms(a->started)}});
    return {{"processes", std::move(processes)}};
}

}  // namespace deskbox::services
