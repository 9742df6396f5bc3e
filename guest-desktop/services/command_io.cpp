#include "guest-desktop/services/command_io.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

namespace deskbox::services {
namespace {

constexpr std::size_t kReadChunk = 65536;
// Output written just before the exit is still read (up to this many chunks per stream); what
// comes after belongs to processes left behind.
constexpr int kReadsAfterExit = 256;
// Without a pidfd the exit is polled this often.
constexpr auto kExitPollInterval = std::chrono::milliseconds(20);

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

UniqueFd open_pidfd(pid_t pid) {
    // Pollable exit notification; without it (old kernels) exits are polled.
    // (The syscall directly: glibc 2.36's <sys/pidfd.h> lacks extern "C" for C++.)
    return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
}

}  // namespace

std::size_t PollSet::add(int fd, short events) {
    fds_.push_back({fd, events, 0});
    return fds_.size() - 1;
}

void PollSet::wait(std::optional<CommandClock::time_point> until) {
    int timeout_ms = -1;
    if (until) {
        auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(*until - CommandClock::now())
                .count();
        timeout_ms = static_cast<int>(std::clamp<std::int64_t>(left + 1, 0, 1 << 30));
    }
    if (::poll(fds_.data(), static_cast<nfds_t>(fds_.size()), timeout_ms) >= 0) return;
    int error = errno;
    for (auto& p : fds_) p.revents = 0;
    // EINTR is a signal meant for someone else; anything else (ENOMEM) is transient: don't
    // spin on it.
    if (error != EINTR) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

bool read_available(int fd, const std::function<void(std::string_view)>& sink, int max_reads) {
    char buf[kReadChunk];
    for (int i = 0; i < max_reads;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n > 0) {
            sink(std::string_view(buf, static_cast<std::size_t>(n)));
            ++i;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        return n < 0 && errno == EAGAIN;
    }
    return true;
}

CommandIo::CommandIo(ChildProcess child, std::string_view stdin_bytes, Options options, Sink sink)
    : child_(std::move(child)),
      pid_(child_.pid()),
      options_(options),
      sink_(std::move(sink)),
      pidfd_(open_pidfd(pid_)),
      stdin_(std::move(child_.stdin_fd())),
      pending_stdin_(stdin_bytes),
      close_stdin_when_drained_(!options.stdin_open) {
    streams_[0].fd = std::move(child_.stdout_fd());
    streams_[1].fd = std::move(child_.stderr_fd());
    for (auto& s : streams_) set_nonblocking(s.fd.get());
    set_nonblocking(stdin_.get());
    if (stdin_ && pending_stdin_.empty() && close_stdin_when_drained_) stdin_.reset();
}

CommandIo::~CommandIo() = default;  // ChildProcess: a command not reaped yet dies with its group

void CommandIo::signal_group(int signal) const {
    ::kill(-pid_, signal);
}

void CommandIo::watch(PollSet& set, std::optional<CommandClock::time_point>& wake_by) {
    auto sooner = [&](CommandClock::time_point t) {
        wake_by = wake_by ? std::min(*wake_by, t) : t;
    };
    for (auto& s : streams_)
        s.watch_index = s.fd ? std::optional(set.add(s.fd.get(), POLLIN)) : std::nullopt;
    {
        std::lock_guard lock(stdin_mutex_);
        stdin_index_ = stdin_ && stdin_written_ < pending_stdin_.size()
                           ? std::optional(set.add(stdin_.get(), POLLOUT))
                           : std::nullopt;
    }
    pidfd_index_ = pidfd_ ? std::optional(set.add(pidfd_.get(), POLLIN)) : std::nullopt;
    if (!pidfd_) sooner(CommandClock::now() + kExitPollInterval);
    if (options_.deadline && !exited_) sooner(*options_.deadline);
}

void CommandIo::service(const PollSet& set) {
    for (Stream s : {Stream::out, Stream::err}) {
        auto& w = streams_[index(s)].watch_index;
        if (w && set.ready(*w)) read_output(s, 1);
        w.reset();
    }
    if (stdin_index_ && set.ready(*stdin_index_)) write_stdin();
    stdin_index_.reset();
    if (!exited_)
        exited_ = pidfd_ ? pidfd_index_ && set.ready(*pidfd_index_) : exit_seen_without_reaping();
    pidfd_index_.reset();
    if (!exited_ && options_.deadline && CommandClock::now() >= *options_.deadline) {
        timed_out_ = true;
        signal_group(SIGKILL);  // not reaped yet (finish() does that), so the group is ours
        options_.deadline.reset();
    }
}

bool CommandIo::exit_seen_without_reaping() {
    siginfo_t info{};
    return ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
           info.si_pid == pid_;
}

void CommandIo::take(Stream stream, std::string_view bytes) {
    Output& o = streams_[index(stream)];
    std::size_t room = bytes.size();
    if (options_.max_output_bytes)
        room = std::min(room,
                        *options_.max_output_bytes - std::min(*options_.max_output_bytes, o.taken));
    if (room < bytes.size()) o.truncated = true;
    o.taken += room;
    if (room > 0) sink_(stream, bytes.substr(0, room));
}

void CommandIo::read_output(Stream stream, int max_reads) {
    Output& o = streams_[index(stream)];
    if (!o.fd) return;
    if (!read_available(
            o.fd.get(), [&](std::string_view b) { take(stream, b); }, max_reads))
        o.fd.reset();
}

void CommandIo::write_stdin() {
    std::lock_guard lock(stdin_mutex_);
    if (!stdin_) return;
    ssize_t n = write_without_sigpipe(stdin_.get(), pending_stdin_.data() + stdin_written_,
                                      pending_stdin_.size() - stdin_written_);
    if (n > 0) stdin_written_ += static_cast<std::size_t>(n);
    if (n < 0 && errno != EAGAIN) {
        stdin_.reset();  // the command closed its stdin
        pending_stdin_.clear();
        stdin_written_ = 0;
        return;
    }
    if (stdin_written_ == pending_stdin_.size()) {
        pending_stdin_.clear();
        stdin_written_ = 0;
        if (close_stdin_when_drained_) stdin_.reset();
    } else if (stdin_written_ > (std::size_t{1} << 20) &&
               stdin_written_ > pending_stdin_.size() / 2) {
        // Written bytes are dropped now and then, not at every write: a big body goes out
        // a pipe buffer at a time, and moving the rest each time would cost its square.
        pending_stdin_.erase(0, stdin_written_);
        stdin_written_ = 0;
    }
}

CommandIo::StdinResult CommandIo::queue_stdin(std::string_view bytes, bool eof,
                                              std::size_t max_pending) {
    std::lock_guard lock(stdin_mutex_);
    if (!stdin_ || close_stdin_when_drained_) return StdinResult::closed;
    if (pending_stdin_.size() - stdin_written_ + bytes.size() > max_pending)
        return StdinResult::over_limit;
    pending_stdin_.append(bytes);
    if (eof) {
        close_stdin_when_drained_ = true;
        if (stdin_written_ == pending_stdin_.size()) stdin_.reset();
    }
    return StdinResult::queued;
}

ExitStatus CommandIo::finish() {
    // The leader is a zombie until reaped, which keeps its process group id ours.
    if (timed_out_) signal_group(SIGKILL);  // stragglers that joined the group meanwhile
    ExitStatus status = *child_.wait();
    // Reaped: forget it, so that ChildProcess's destructor leaves its group alone.
    child_.release();
    finished_ = true;
    read_output(Stream::out, kReadsAfterExit);
    read_output(Stream::err, kReadsAfterExit);
    std::lock_guard lock(stdin_mutex_);
    stdin_.reset();
    pending_stdin_.clear();
    stdin_written_ = 0;
    return status;
}

std::vector<UniqueFd> CommandIo::take_left_behind() {
    std::vector<UniqueFd> open;
    if (!finished_) return open;
    for (auto& s : streams_)
        if (s.fd) open.push_back(std::move(s.fd));
    return open;
}

}  // namespace deskbox::services
