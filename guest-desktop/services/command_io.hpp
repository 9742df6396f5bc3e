// The one I/O engine of exec.*, for foreground and background commands alike: feeds a
// command's stdin from a queue, hands its stdout and stderr to a sink (up to a cap per stream;
// the rest is read and dropped so the command never blocks on a full pipe), notices its exit
// through a pidfd without reaping it, and SIGKILLs its process group at its deadline.
//
// EINTR, one policy: a read or write interrupted by a signal is retried at once (no byte is
// lost or doubled, no stream ends early); an interrupted poll counts as "nothing ready yet",
// and the loop around it checks exits and deadlines before polling again.
//
// When the command exits, what it started and left running (`server &`) is left alone: it is
// in the command's process group but is not the command. finish() reaps the command without
// touching the group, and the output pipes those processes still hold are handed out
// (take_left_behind()) to be drained, so their writes neither block nor raise SIGPIPE.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/child_process.hpp"
#include "common/unique_fd.hpp"

namespace deskbox::services {

using CommandClock = std::chrono::steady_clock;

// The fds of one poll() (one command's, or many commands' and more), with the EINTR policy.
class PollSet {
  public:
    std::size_t add(int fd, short events);  // → its index
    std::size_t size() const { return fds_.size(); }
    bool ready(std::size_t index) const { return fds_[index].revents != 0; }
    // Until an fd is ready or `until` passes (nullopt: no limit). Interrupted or failed:
    // returns with nothing ready.
    void wait(std::optional<CommandClock::time_point> until);

  private:
    std::vector<pollfd> fds_;
};

// Reads what `fd` has now (up to `max_reads` chunks, each to `sink`). False at EOF or on an
// error: the fd is done.
bool read_available(int fd, const std::function<void(std::string_view)>& sink, int max_reads = 1);

class CommandIo {
  public:
    enum class Stream { out, err };
    using Sink = std::function<void(Stream, std::string_view)>;
    struct Options {
        std::optional<CommandClock::time_point> deadline;  // the process group is killed then
        std::optional<std::size_t> max_output_bytes;       // per stream; nullopt: all of it
        bool stdin_open = false;  // more stdin may be queued later; else closed once drained
    };

    // Takes the child and whichever of its pipes it has.
    CommandIo(ChildProcess child, std::string_view stdin_bytes, Options options, Sink sink);
    // A command still running is killed with its process group and reaped.
    ~CommandIo();
    CommandIo(const CommandIo&) = delete;
    CommandIo& operator=(const CommandIo&) = delete;

    pid_t pid() const { return pid_; }
    // Signals the command's process group. Only while the command is not reaped (before
    // finish()): the caller's registry makes sure of that, under the caller's lock.
    void signal_group(int signal) const;

    // One pumping thread: watch() adds its fds to `set` and moves `wake_by` earlier if it
    // needs a look without any fd ready (deadline; exit polling without a pidfd); service()
    // then handles what `set` found, the exit and the deadline.
    void watch(PollSet& set, std::optional<CommandClock::time_point>& wake_by);
    void service(const PollSet& set);
    bool exited() const { return exited_; }
    bool timed_out() const { return timed_out_; }
    bool truncated(Stream stream) const { return streams_[index(stream)].truncated; }

    // Any thread: queues bytes for stdin; eof closes it once they are written.
    enum class StdinResult { queued, closed, over_limit };
    StdinResult queue_stdin(std::string_view bytes, bool eof, std::size_t max_pending);

    // Once exited(): reaps the command and takes the output it wrote before exiting. After a
    // timeout its whole group is killed first; otherwise the group is left alone.
    ExitStatus finish();
    // After finish(): output pipes that processes the command left behind still hold open.
    std::vector<UniqueFd> take_left_behind();

  private:
    struct Output {
        UniqueFd fd;
        std::size_t taken = 0;
        bool truncated = false;
        std::optional<std::size_t> watch_index;
    };
    static std::size_t index(Stream s) { return s == Stream::out ? 0 : 1; }
    void take(Stream stream, std::string_view bytes);
    void read_output(Stream stream, int max_reads);
    void write_stdin();
    bool exit_seen_without_reaping();

    ChildProcess child_;
    pid_t pid_;
    Options options_;
    Sink sink_;
    UniqueFd pidfd_;  // invalid on kernels without pidfd_open: exits are polled then
    Output streams_[2];
    std::optional<std::size_t> pidfd_index_, stdin_index_;
    bool exited_ = false;
    bool timed_out_ = false;
    bool finished_ = false;

    std::mutex stdin_mutex_;  // the queue is filled by any thread, drained by the pumping one
    UniqueFd stdin_;
    std::string pending_stdin_;
    std::size_t stdin_written_ = 0;  // how much of pending_stdin_ went out already
    bool close_stdin_when_drained_;
};

}  // namespace deskbox::services
