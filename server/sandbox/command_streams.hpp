// The output of a sandbox's stream commands as it is produced: the agent's process.output and
// process.exit events, by pid, for whoever watches that command (POST /commands with
// `stream: true`, the MCP run_command). Events that come before anyone watches (the agent may
// send output before its exec.run answer gives the pid) wait, bounded, for a watcher.
#pragma once

#include <sys/types.h>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace deskbox::server {

struct CommandEvent {
    // interrupted: the watcher's own interrupt() (its client left), before any event still
    // waiting.
    enum class Kind { output, exit, lost, interrupted } kind = Kind::output;
    std::string stream;  // output: "stdout" or "stderr"
    std::string data;    // output: the bytes; lost: why no more events will come
    int exit_code = 0;   // exit
    int signal = 0;      // exit: the signal that ended it, 0 if none
};

class CommandStreams {
    struct Backlog;

  public:
    // Limits of what waits: per command (output beyond is dropped and said so once), and how
    // many commands nobody watches are remembered (the oldest goes).
    static constexpr std::size_t kMaxQueuedBytes = 16 << 20;
    static constexpr std::size_t kMaxUnwatched = 64;

    // One command's events, in order, from the first (those before the watch included).
    class Watch {
      public:
        ~Watch();
        Watch(const Watch&) = delete;
        Watch& operator=(const Watch&) = delete;
        // The next event, or nothing when none came by `deadline`. After exit or lost, nothing.
        std::optional<CommandEvent> next(std::chrono::steady_clock::time_point deadline);
        // Makes the next next() return `interrupted` at once (from any thread; cheap).
        void interrupt();
        pid_t pid() const { return pid_; }

      private:
        friend class CommandStreams;
        Watch(CommandStreams& owner, pid_t pid, std::shared_ptr<Backlog> backlog)
            : owner_(owner), pid_(pid), backlog_(std::move(backlog)) {}
        CommandStreams& owner_;
        pid_t pid_;
        std::shared_ptr<Backlog> backlog_;
    };

    // The agent's events (its reader thread).
    void output(pid_t pid, const std::string& stream, std::string bytes);
    void exited(pid_t pid, int exit_code, int signal);
    // The agent's channel closed: every watch ends with `lost`, nothing waits any more.
    void lost(const std::string& why);
    void reconnected();  // a new channel: watches may start again

    // Watches `pid` (one watcher per command: a second is refused with std::logic_error).
    std::unique_ptr<Watch> watch(pid_t pid);

  private:
    struct Backlog {
        std::deque<CommandEvent> events;
        std::size_t bytes = 0;
        bool overflowed = false;
        bool watched = false;
        bool ended = false;  // exit or lost is queued: nothing comes after it
        bool interrupted = false;
        std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
    };
    std::shared_ptr<Backlog> backlog_locked(pid_t pid);
    void push_locked(pid_t pid, CommandEvent event);
    void unwatch(pid_t pid);

    std::mutex mutex_;
    std::condition_variable arrived_;
    std::map<pid_t, std::shared_ptr<Backlog>> backlogs_;
    std::optional<std::string> lost_;  // the channel closed: why
};

// Output chunks as JSON text for clients: {"data": UTF-8 text}, plus "data_b64" (the exact
// bytes) when they are not UTF-8. A character split between two chunks waits for its end.
class CommandOutputText {
  public:
    nlohmann::json take(const CommandEvent& output);
    nlohmann::json flush();  // what waits at the end (a cut character), or null

  private:
    static nlohmann::json as_json(const std::string& stream, const std::string& bytes);
    std::map<std::string, std::string> carry_;  // by stream
};

}  // namespace deskbox::server
