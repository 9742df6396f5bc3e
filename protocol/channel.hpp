// A message channel over a connected file descriptor (socket, pipe pair, virtio-serial port or
// any other character device). Reads on one thread; sends are thread-safe (one sender at a
// time, whole messages never interleave).
//
// The fds are switched to O_NONBLOCK and every wait is a poll() that also watches an internal
// eventfd, so close() from another thread wakes a blocked receive() or send(). A peer that went
// away never raises SIGPIPE: sockets are written with MSG_NOSIGNAL, other fds with SIGPIPE
// blocked on the writing thread (and a SIGPIPE raised by our write consumed before unblocking).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/unique_fd.hpp"
#include "protocol/message.hpp"

namespace deskbox::protocol {

// A wait ran out of time. Not a ProtocolError: the channel is still usable afterwards.
class TimeoutError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

class Channel {
  public:
    using Clock = std::chrono::steady_clock;

    // Takes ownership of read_fd and write_fd (they may be the same fd). Throws ProtocolError
    // if an fd is invalid.
    Channel(int read_fd, int write_fd, Limits limits = {});
    ~Channel();
    Channel(const Channel&) = delete;
    Channel& operator=(const Channel&) = delete;

    // Blocks for the next message; nullopt on clean EOF or after close().
    // Throws ProtocolError on malformed input, an I/O error or EOF inside a frame
    // ("truncated frame: ..."); the channel is closed after any ProtocolError.
    // With a deadline, throws TimeoutError if no whole message arrived by then (partial input
    // stays buffered for the next call). Only one thread may receive at a time.
    std::optional<Message> receive();
    std::optional<Message> receive(Clock::time_point deadline);

    // Sends one whole message. Throws ProtocolError if the channel is closed, the message breaks
    // the limits (nothing is written then, the channel stays open) or the write fails (the
    // channel is closed). With a deadline, throws TimeoutError if the message could not be
    // started by then; a send that times out midway closes the channel, since the peer would
    // otherwise see half a frame.
    void send(const Message& message);
    void send(const Message& message, Clock::time_point deadline);

    // Wakes a blocked receive()/send() and makes further ones fail. Idempotent, thread-safe;
    // the first call's reason is kept. A socket is shut down at once, so the peer sees EOF now;
    // other fds stay open until destruction, when the peer sees EOF.
    void close(std::string reason = "closed locally");
    bool closed() const { return closed_; }
    // Gives a received body's storage back for reuse by a later large body (see
    // FrameDecoder::recycle). Thread-safe; optional.
    void recycle(std::string&& body);
    // Why the channel closed: the first error that closed it, or "closed locally".
    std::string close_reason() const;
    const Limits& limits() const { return decoder_.limits(); }

  private:
    std::optional<Message> receive_until(std::optional<Clock::time_point> deadline);
    void send_until(const Message& message, std::optional<Clock::time_point> deadline);
    enum class Wait { ready, closed, timed_out };
    // poll()s fd for `events` and the wake eventfd; `revents` gets fd's poll result.
    Wait wait_for(int fd, short events, std::optional<Clock::time_point> deadline, short& revents);
    int write_fd() const { return write_fd_ ? write_fd_.get() : read_fd_.get(); }

    UniqueFd read_fd_;
    UniqueFd write_fd_;  // invalid when the same fd serves both directions
    UniqueFd wake_fd_;   // eventfd, readable forever once close() was called
    bool write_is_socket_ = false;
    FrameDecoder decoder_;
    std::mutex spare_mutex_;
    std::string spare_body_;  // from recycle(), handed to the decoder by the receiving thread
    // One whole message at a time: a sender waits for the slot (not a std::timed_mutex, whose
    // timed lock ThreadSanitizer cannot follow), so close() can wake waiters too.
    std::mutex send_mutex_;
    std::condition_variable send_slot_free_;
    bool sending_ = false;
    std::atomic<bool> closed_{false};
    mutable std::mutex reason_mutex_;
    std::string close_reason_;
};

// Exchanges hello messages: sends {"protocol":"deskbox-agent","version":1,"role":role,...extra}
// and waits up to `timeout` for the peer's. Throws ProtocolError on a wrong protocol name, an
// incompatible version, a first message that is not a hello, EOF or a timeout.
// Returns the peer's hello header.
nlohmann::json handshake(Channel& channel, std::string_view role,
                         const nlohmann::json& extra = nlohmann::json::object(),
                         std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace deskbox::protocol
