#include "guest-desktop/services/exec_service.hpp"

#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include "common/base64.hpp"
#include "common/child_process.hpp"
#include "common/unique_fd.hpp"
#include "common/utf8.hpp"
#include "guest-desktop/services/command_io.hpp"
#include "guest-desktop/services/exec_request.hpp"
#include "guest-desktop/services/params.hpp"

namespace deskbox::services {

using nlohmann::json;
using Clock = CommandClock;
using Stream = CommandIo::Stream;

namespace {

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

const char* stream_name(Stream s) {
    return s == Stream::out ? "stdout" : "stderr";
}

}  // namespace

struct ExecService::Impl {
    struct Foreground {
        json command;
        Clock::time_point started;
        bool reaped = false;  // from then on its pid may be reused: never signal it
    };
    struct Async {
        std::unique_ptr<CommandIo> io;
        bool stream = false;
        bool background = false;
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
    // Registered until reaped (erased first, then reaped): while here, the pid is ours.
    std::map<pid_t, std::unique_ptr<Async>> async;
    std::vector<UniqueFd> handed_over;  // left-behind output pipes for the IO thread to drain
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
    void hand_over(std::vector<UniqueFd> pipes);
    void drain(std::deque<UniqueFd>& draining, const PollSet& set, std::size_t first_index);
    void emit_output(pid_t pid, Stream stream, std::string_view bytes) {
        if (callbacks.on_output) callbacks.on_output(pid, stream_name(stream), bytes);
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
    for (auto& [pid, a] : s.async) a->io->signal_group(SIGKILL);
    s.wake_io();
    // Foreground calls notice their child's death and return; wait for them to unregister.
    s.foreground_done.wait(lock, [&] { return s.active_calls == 0; });
    lock.unlock();
    s.io_thread.join();
    s.async.clear();  // each CommandIo reaps its command
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
    CommandIo::Options options;
    if (spec.timeout) options.deadline = started + *spec.timeout;
    options.max_output_bytes = limits.max_output_bytes;
    std::string outputs[2];
    CommandIo io(std::move(child), stdin_bytes, options, [&](Stream s, std::string_view bytes) {
        outputs[s == Stream::out ? 0 : 1].append(bytes);
    });
    while (!io.exited()) {
        PollSet set;
        std::optional<Clock::time_point> wake_by;
        io.watch(set, wake_by);
        set.wait(wake_by);
        io.service(set);
    }
    {
        std::lock_guard lock(mutex);
        foreground[pid].reaped = true;
    }
    ExitStatus status = io.finish();
    hand_over(io.take_left_behind());

    json result = {{"exit_code", status.exit_code},
                   {"timed_out", io.timed_out()},
                   {"duration_ms", elapsed_ms(started)}};
    if (status.signal) result["signal"] = status.signal;
    put_output(result, "stdout", outputs[0], io.truncated(Stream::out));
    put_output(result, "stderr", outputs[1], io.truncated(Stream::err));
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
    ChildProcess child = spawn_command(spec, env, pipe_stdin, spec.stream);
    const pid_t pid = child.pid();
    auto proc = std::make_unique<Async>();
    proc->stream = spec.stream;
    proc->background = spec.background;
    proc->command = spec.command;
    proc->started = Clock::now();
    CommandIo::Options options;
    if (spec.timeout) options.deadline = proc->started + *spec.timeout;
    options.stdin_open = spec.stdin_open;
    proc->io = std::make_unique<CommandIo>(
        std::move(child), stdin_bytes, options,
        [this, pid](Stream s, std::string_view bytes) { emit_output(pid, s, bytes); });
    {
        std::lock_guard lock(mutex);
        if (stopping) return {{"pid", pid}};  // proc's destructor kills it
        async[pid] = std::move(proc);
        wake_io();
    }
    return {{"pid", pid}};
}

void ExecService::Impl::io_loop() {
    std::vector<std::pair<pid_t, Async*>> watched;
    std::deque<UniqueFd> draining;  // this thread's: left-behind pipes, oldest first
    while (true) {
        PollSet set;
        set.add(wake.get(), POLLIN);
        std::optional<Clock::time_point> wake_by;
        watched.clear();
        {
            std::lock_guard lock(mutex);
            if (stopping) return;
            for (auto& [pid, a] : async) {
                // Entries are only erased by this thread, so the pointers stay valid unlocked.
                a->io->watch(set, wake_by);
                watched.emplace_back(pid, a.get());
            }
            for (auto& fd : handed_over) draining.push_back(std::move(fd));
            handed_over.clear();
        }
        // Past the limit the oldest goes: whoever still writes to it gets EPIPE from now on.
        while (draining.size() > limits.max_draining_pipes) draining.pop_front();
        const std::size_t first_drain = set.size();
        for (auto& fd : draining) set.add(fd.get(), POLLIN);
        set.wait(wake_by);
        if (set.ready(0)) {
            std::uint64_t count;
            (void)!::read(wake.get(), &count, sizeof count);
        }
        std::vector<pid_t> exited;
        for (auto& [pid, a] : watched) {
            a->io->service(set);
            if (a->io->exited()) exited.push_back(pid);
        }
        drain(draining, set, first_drain);
        for (pid_t pid : exited) finish_async(pid);
    }
}

void ExecService::Impl::drain(std::deque<UniqueFd>& draining, const PollSet& set,
                              std::size_t first_index) {
    const auto discard = [](std::string_view) {};
    std::size_t i = first_index;
    for (auto it = draining.begin(); it != draining.end(); ++i) {
        // EOF: whatever held it has closed it or ended.
        if (set.ready(i) && !read_available(it->get(), discard, 16))
            it = draining.erase(it);
        else
            ++it;
    }
}

void ExecService::Impl::hand_over(std::vector<UniqueFd> pipes) {
    if (pipes.empty()) return;
    std::lock_guard lock(mutex);
    if (stopping) return;  // closed here: the service is going away
    for (auto& p : pipes) handed_over.push_back(std::move(p));
    wake_io();
}

void ExecService::Impl::finish_async(pid_t pid) {
    std::unique_ptr<Async> proc;
    {
        std::lock_guard lock(mutex);
        auto it = async.find(pid);
        if (it == async.end()) return;
        proc = std::move(it->second);
        async.erase(it);  // from now on kill() cannot reach the pid it is about to give back
    }
    ExitStatus status = proc->io->finish();
    hand_over(proc->io->take_left_behind());
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
        it->second->io->signal_group(signal);
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
    switch (it->second->io->queue_stdin(bytes, eof, impl_->limits.max_pending_stdin_bytes)) {
        case CommandIo::StdinResult::closed:
            throw bad_request("pid", "stdin of command " + std::to_string(pid) +
                                         " is closed (start it with stdin_open to write to it)");
        case CommandIo::StdinResult::over_limit:
            throw ServiceError(
                error_code::too_large,
                "command " + std::to_string(pid) + " is not reading its stdin fast enough", "pid");
        case CommandIo::StdinResult::queued:
            impl_->wake_io();
            return;
    }
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
