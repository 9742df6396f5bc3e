// The durable log of lifecycle events: <state>/events/events.jsonl, one event per line,
// append-only. Each event is one write(2) on an O_APPEND fd, so a SIGKILLed server leaves whole
// lines (the page cache keeps them); a partial last line (a power loss, a full disk) is cut off
// when the log is opened, and ids go on from the last whole one. The newest events are also kept
// in memory for live streams; older ones are read from the file (a sparse index of line offsets
// finds where to start). Old events go with trim(): the kept tail is written to a new file that
// replaces the log whole, so a crash leaves either the old log or the trimmed one.
//
// A log belongs to one node (`node`, "" on a single server): its events carry that name, and
// lines without one (a single server's, or a log from before ids named their node, whose ids
// were bare numbers) are read as that node's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <vector>

#include "common/unique_fd.hpp"
#include "server/events/event.hpp"

namespace deskbox::server::events {

class EventLog {
  public:
    // Opens (or creates) `dir`/events.jsonl. Throws std::system_error naming the file.
    explicit EventLog(const std::filesystem::path& dir, std::size_t kept_in_memory = 4096,
                      std::string node = {});
    EventLog(const EventLog&) = delete;
    EventLog& operator=(const EventLog&) = delete;

    // Gives `event` the next id and the time now, appends it and tells the listeners.
    // Thread-safe; a failed write is reported on stderr and the event still goes to listeners.
    Event append(Event event);
    std::uint64_t last_id() const;
    const std::filesystem::path& path() const { return path_; }
    const std::string& node() const { return node_; }
    std::uint64_t size_bytes() const;
    // The oldest id the file still holds (last_id() + 1 when it holds none).
    std::uint64_t first_id() const;

    // Drops the oldest events written before `keep_since` (RFC 3339 as events write it), but
    // none with an id of `keep_from_id` or more (a webhook has not had it yet). Returns how
    // many went. Throws std::system_error if the new file cannot be written (the log is
    // unchanged then).
    std::size_t trim(const std::string& keep_since, std::uint64_t keep_from_id);

    // Up to `max` events with an id above `after`, oldest first: from memory when it still holds
    // them, else from the file (blocking reads: not on I/O threads).
    std::vector<Event> read_after(std::uint64_t after, std::size_t max) const;
    // The same from memory only; nullopt when memory no longer reaches back to `after`.
    std::optional<std::vector<Event>> recent_after(std::uint64_t after, std::size_t max) const;

    // Listeners run on the appending thread after each append and must not block.
    using Listener = std::function<void(const Event&)>;
    class Subscription {
      public:
        Subscription() = default;
        Subscription(EventLog* log, std::uint64_t key) : log_(log), key_(key) {}
        Subscription(Subscription&& other) noexcept
            : log_(std::exchange(other.log_, nullptr)), key_(other.key_) {}
        Subscription& operator=(Subscription&& other) noexcept;
        ~Subscription() { reset(); }
        void reset();

      private:
        EventLog* log_ = nullptr;
        std::uint64_t key_ = 0;
    };
    Subscription subscribe(Listener listener);

  private:
    void load();  // last id, the sparse index and memory, from the file
    // The event on one line of the file, or nullopt for a line that is not one (skipped).
    std::optional<Event> parse_line(const std::string& line) const;
    // Writes the file's bytes from `from` on to a new file and puts it in the log's place.
    void replace_with_tail(std::uint64_t from);
    std::vector<Event> read_file_after(std::uint64_t after, std::size_t max) const;
    // Into memory and, with the offset of its line in the file, the sparse index.
    void remember_locked(const Event& event, std::optional<std::uint64_t> offset);

    static constexpr std::uint64_t kIndexEvery = 256;
    std::filesystem::path path_;
    std::size_t kept_in_memory_;
    const std::string node_;
    // Held shared while the file is read by name, and alone while trim() replaces it: a
    // reader's offsets are always the file's it opens.
    mutable std::shared_mutex file_mutex_;
    mutable std::mutex mutex_;
    UniqueFd fd_;
    std::uint64_t last_id_ = 0;
    std::uint64_t size_ = 0;                        // bytes of whole lines in the file
    std::map<std::uint64_t, std::uint64_t> index_;  // id -> offset of its line
    std::deque<Event> recent_;
    std::mutex listeners_mutex_;  // held while listeners run: unsubscribing waits for them
    std::map<std::uint64_t, Listener> listeners_;
    std::uint64_t next_listener_ = 1;
};

}  // namespace deskbox::server::events
