// A message channel over a connected file descriptor (socket, pipe pair, virtio-serial port).
// Reads on one thread; sends are thread-safe (one mutex, whole messages never interleave).
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>

#include "protocol/message.hpp"

namespace deskbox::protocol {

class Channel {
public:
    // Takes ownership of read_fd and write_fd (they may be the same fd).
    Channel(int read_fd, int write_fd, Limits limits = {});
    ~Channel();
    Channel(const Channel&) = delete;
    Channel& operator=(const Channel&) = delete;

    // Blocks for the next message; nullopt on clean EOF or after close().
    // Throws ProtocolError on malformed input or an I/O error.
    std::optional<Message> receive();
    // Throws ProtocolError if the channel is closed or the write fails.
    void send(const Message& message);
    // Wakes a blocked receive() and makes further sends fail. Idempotent, thread-safe.
    void close();
    bool closed() const { return closed_; }

private:
    int read_fd_;
    int write_fd_;
    int wake_pipe_[2];
    FrameDecoder decoder_;
    std::mutex send_mutex_;
    std::atomic<bool> closed_{false};
};

// Exchanges hello messages; throws ProtocolError on a wrong name, an incompatible version or
// a timeout. Returns the peer's hello header.
nlohmann::json handshake(Channel& channel, std::string_view role,
                         const nlohmann::json& extra = nlohmann::json::object(),
                         std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace deskbox::protocol
