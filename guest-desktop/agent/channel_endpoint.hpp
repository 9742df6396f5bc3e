// Produces agent channels one after another: the host may disconnect and come back (a
// restarted deskboxd adopts its sandboxes), so the agent serves connection after connection.
#pragma once

#include <atomic>
#include <memory>

#include "common/unique_fd.hpp"
#include "guest-desktop/agent/agent_options.hpp"
#include "protocol/channel.hpp"

namespace deskbox::agent {

class ChannelEndpoint {
  public:
    // Throws std::system_error if a listening socket cannot be created.
    explicit ChannelEndpoint(ChannelSpec spec);
    ~ChannelEndpoint();
    ChannelEndpoint(const ChannelEndpoint&) = delete;
    ChannelEndpoint& operator=(const ChannelEndpoint&) = delete;

    // Blocks until the next connection; nullptr after interrupt() or when no more can come
    // (stdio is one connection only).
    std::unique_ptr<protocol::Channel> next();
    // Thread-safe; wakes a blocked next().
    void interrupt();

  private:
    bool wait_readable(int fd, int timeout_ms);
    ChannelSpec spec_;
    UniqueFd listener_;
    Pipe wake_;
    std::atomic<bool> interrupted_{false};
    bool stdio_used_ = false;
};

}  // namespace deskbox::agent
