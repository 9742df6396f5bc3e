#include "protocol/channel.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace deskbox::protocol {
namespace {

// One write of `parts`: sendmsg on a socket (no SIGPIPE), writev on anything else.
ssize_t write_parts(int fd, bool socket, iovec* parts, int count) {
    if (!socket) return ::writev(fd, parts, count);
    msghdr msg{};
    msg.msg_iov = parts;
    msg.msg_iovlen = static_cast<std::size_t>(count);
    return ::sendmsg(fd, &msg, MSG_NOSIGNAL);
}

// Moves past `written` bytes of `parts`: whole parts are dropped, a part written in part shrinks.
void skip_written(iovec*& parts, int& count, std::size_t written) {
    while (count > 0 && written >= parts->iov_len) {
        written -= parts->iov_len;
        ++parts;
        --count;
    }
    if (count > 0) {
        parts->iov_base = static_cast<char*>(parts->iov_base) + written;
        parts->iov_len -= written;
    }
}

// Large enough that a big body arrives in few reads; prepare() caps it at the body's remainder.
constexpr std::size_t kReadChunk = 256 << 10;

std::string errno_text(int error) {
    return std::strerror(error);
}

void set_nonblocking(int fd) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        throw ProtocolError("agent channel: cannot make fd " + std::to_string(fd) +
                            " non-blocking: " + errno_text(errno));
}

// Blocks SIGPIPE on the calling thread for a write to a pipe or character device. If that
// write raised SIGPIPE (it failed with EPIPE), the now-pending signal is consumed before the
// mask is restored, unless one was already pending before (then it is not ours to take).
class SigpipeBlock {
  public:
    SigpipeBlock() {
        sigemptyset(&sigpipe_);
        sigaddset(&sigpipe_, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &sigpipe_, &old_mask_);
        sigset_t pending;
        sigpending(&pending);
        was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    }
    ~SigpipeBlock() {
        if (saw_epipe_ && !was_pending_) {
            const timespec no_wait{};
            while (sigtimedwait(&sigpipe_, nullptr, &no_wait) < 0 && errno == EINTR) {
            }
        }
        pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    }
    SigpipeBlock(const SigpipeBlock&) = delete;
    SigpipeBlock& operator=(const SigpipeBlock&) = delete;
    void saw_epipe() { saw_epipe_ = true; }

  private:
    sigset_t sigpipe_{};
    sigset_t old_mask_{};
    bool was_pending_ = false;
    bool saw_epipe_ = false;
};

std::string short_json(const nlohmann::json& value) {
    std::string text = value.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
    if (text.size() > 80) text = text.substr(0, 80) + "...";
    return text;
}

}  // namespace

Channel::Channel(int read_fd, int write_fd, Limits limits)
    : read_fd_(read_fd), write_fd_(write_fd == read_fd ? -1 : write_fd), decoder_(limits) {
    if (read_fd < 0 || write_fd < 0)
        throw ProtocolError("agent channel: invalid fd (read " + std::to_string(read_fd) +
                            ", write " + std::to_string(write_fd) + ")");
    set_nonblocking(read_fd_.get());
    if (write_fd_) set_nonblocking(write_fd_.get());
    struct stat st {};
    write_is_socket_ = ::fstat(this->write_fd(), &st) == 0 && S_ISSOCK(st.st_mode);
    wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_fd_) throw ProtocolError("agent channel: eventfd failed: " + errno_text(errno));
}

Channel::~Channel() {
    close();
}

std::string Channel::close_reason() const {
    std::lock_guard lock(reason_mutex_);
    return close_reason_;
}

void Channel::close(std::string reason) {
    {
        std::lock_guard lock(reason_mutex_);
        if (closed_) return;
        close_reason_ = std::move(reason);
        closed_ = true;
    }
    {
        std::lock_guard lock(send_mutex_);  // so no sender misses the wake-up below
    }
    send_slot_free_.notify_all();
    const std::uint64_t one = 1;
    // Never read back: the eventfd stays readable, so every later poll returns at once.
    [[maybe_unused]] ssize_t ignored = ::write(wake_fd_.get(), &one, sizeof one);
    // A socket can tell the peer right away without invalidating the fd another thread may be
    // polling; other fds (ENOTSOCK here) stay open until destruction.
    ::shutdown(read_fd_.get(), SHUT_RDWR);
    if (write_fd_) ::shutdown(write_fd_.get(), SHUT_RDWR);
}

Channel::Wait Channel::wait_for(int fd, short events, std::optional<Clock::time_point> deadline,
                                short& revents) {
    revents = 0;
    for (;;) {
        if (closed_) return Wait::closed;
        int timeout_ms = -1;
        if (deadline) {
            const auto left =
                std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
            if (left.count() <= 0) return Wait::timed_out;
            timeout_ms = static_cast<int>(std::min<std::int64_t>(left.count(), 1 << 30));
        }
        pollfd fds[2] = {{fd, events, 0}, {wake_fd_.get(), POLLIN, 0}};
        const int n = ::poll(fds, 2, timeout_ms);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw ProtocolError("agent channel: poll failed: " + errno_text(errno));
        }
        if (fds[1].revents != 0) return Wait::closed;
        revents = fds[0].revents;
        if (revents != 0) return Wait::ready;  // incl. POLLHUP/POLLERR: the I/O call says why
    }
}

std::optional<Message> Channel::receive() {
    return receive_until(std::nullopt);
}
std::optional<Message> Channel::receive(Clock::time_point deadline) {
    return receive_until(deadline);
}

void Channel::recycle(std::string&& body) {
    std::lock_guard lock(spare_mutex_);
    if (body.capacity() > spare_body_.capacity()) spare_body_ = std::move(body);
}

std::optional<Message> Channel::receive_until(std::optional<Clock::time_point> deadline) {
    try {
        // After a read that filled its whole span more data is likely waiting: read again
        // before paying for a poll().
        bool more_likely = false;
        for (;;) {
            if (closed_) return std::nullopt;
            {
                std::lock_guard lock(spare_mutex_);
                if (spare_body_.capacity() > 0) decoder_.recycle(std::exchange(spare_body_, {}));
            }
            if (auto message = decoder_.next()) return message;
            short revents = 0;
            if (!more_likely) {
                switch (wait_for(read_fd_.get(), POLLIN, deadline, revents)) {
                    case Wait::closed:
                        return std::nullopt;
                    case Wait::timed_out:
                        throw TimeoutError("agent channel: no message before the deadline");
                    case Wait::ready:
                        break;
                }
            }
            const std::span<char> space = decoder_.prepare(kReadChunk);
            const ssize_t n = ::read(read_fd_.get(), space.data(), space.size());
            const int error = errno;
            decoder_.commit(n > 0 ? static_cast<std::size_t>(n) : 0);
            more_likely = n > 0 && static_cast<std::size_t>(n) == space.size();
            if (n < 0) {
                const bool hung_up =
                    (revents & (POLLHUP | POLLERR | POLLNVAL)) && !(revents & POLLIN);
                if (error == EINTR || ((error == EAGAIN || error == EWOULDBLOCK) && !hung_up))
                    continue;
                // Some character devices (ptys, virtio-serial with the host side gone) report
                // POLLHUP but EAGAIN on read; retrying would spin, so that counts as EOF.
                if (!hung_up || (revents & (POLLERR | POLLNVAL)))
                    throw ProtocolError("agent channel: read failed: " + errno_text(error));
            }
            if (n <= 0) {
                decoder_.finish();  // throws "truncated frame" if EOF cut a frame
                return std::nullopt;
            }
        }
    } catch (const ProtocolError& e) {
        close(e.what());
        throw;
    }
}

void Channel::send(const Message& message) {
    send_until(message, std::nullopt);
}
void Channel::send(const Message& message, Clock::time_point deadline) {
    send_until(message, deadline);
}

void Channel::send_until(const Message& message, std::optional<Clock::time_point> deadline) {
    {
        std::unique_lock lock(send_mutex_);
        const auto slot_free = [&] { return !sending_ || closed_; };
        if (!deadline) {
            send_slot_free_.wait(lock, slot_free);
        } else if (!send_slot_free_.wait_until(lock, *deadline, slot_free)) {
            throw TimeoutError("agent channel: send timed out waiting for another sender");
        }
        if (closed_) throw ProtocolError("agent channel is closed");
        sending_ = true;
    }
    struct ReleaseSlot {
        Channel& channel;
        ~ReleaseSlot() {
            {
                std::lock_guard lock(channel.send_mutex_);
                channel.sending_ = false;
            }
            channel.send_slot_free_.notify_one();
        }
    } release_slot{*this};
    const std::string head = encode_head(message, limits());  // limit errors leave it open

    iovec parts[2] = {{const_cast<char*>(head.data()), head.size()},
                      {const_cast<char*>(message.body.data()), message.body.size()}};
    iovec* iov = parts;
    int iov_count = message.body.empty() ? 1 : 2;
    const std::size_t total = head.size() + message.body.size();
    std::size_t written = 0;
    const int fd = write_fd();
    std::optional<SigpipeBlock> sigpipe_block;
    if (!write_is_socket_) sigpipe_block.emplace();
    short revents = 0;  // of the last poll

    while (written < total) {
        const ssize_t n = write_parts(fd, write_is_socket_, iov, iov_count);
        if (n < 0) {
            const int error = errno;
            if (error == EINTR) continue;
            // A character device whose other side is gone can poll POLLHUP yet keep answering
            // EAGAIN (a pty master without its slave); that is a dead peer, not a full buffer.
            const bool hung_up = (revents & (POLLHUP | POLLERR | POLLNVAL)) && !(revents & POLLOUT);
            if ((error == EAGAIN || error == EWOULDBLOCK) && !hung_up) {
                switch (wait_for(fd, POLLOUT, deadline, revents)) {
                    case Wait::ready:
                        continue;
                    case Wait::closed:
                        throw ProtocolError("agent channel closed during send");
                    case Wait::timed_out:
                        if (written == 0)
                            throw TimeoutError("agent channel: send timed out (peer not reading)");
                        const std::string reason =
                            "agent channel: send timed out after " + std::to_string(written) +
                            " of " + std::to_string(total) + " bytes; channel closed mid-frame";
                        close(reason);
                        throw ProtocolError(reason);
                }
            }
            if (error == EPIPE && sigpipe_block) sigpipe_block->saw_epipe();
            // close() from another thread shuts a socket down: the write then fails with EPIPE
            // between our poll and the call. That is our close, not the peer's failure.
            if (closed_) throw ProtocolError("agent channel closed during send");
            const std::string reason =
                "agent channel: write failed: " +
                (hung_up ? std::string("the peer hung up") : errno_text(error));
            close(reason);
            throw ProtocolError(reason);
        }
        written += static_cast<std::size_t>(n);
        skip_written(iov, iov_count, static_cast<std::size_t>(n));
    }
}

nlohmann::json handshake(Channel& channel, std::string_view role, const nlohmann::json& extra,
                         std::chrono::milliseconds timeout) {
    const auto deadline = Channel::Clock::now() + timeout;
    const std::string within = " within " + std::to_string(timeout.count()) + " ms";
    if (!extra.is_object() && !extra.is_null())
        throw ProtocolError(
            std::string("handshake: extra hello fields must be a JSON object, not ") +
            extra.type_name());
    Message hello{Kind::hello, extra.is_null() ? nlohmann::json::object() : extra, {}};
    hello.header["protocol"] = kProtocolName;
    hello.header["version"] = kProtocolVersion;
    hello.header["role"] = role;

    std::optional<Message> reply;
    try {
        try {
            channel.send(hello, deadline);
        } catch (const ProtocolError& e) {
            throw ProtocolError(std::string("handshake: cannot send hello: ") + e.what());
        }
        reply = channel.receive(deadline);
    } catch (const TimeoutError&) {
        const std::string reason = "handshake: no hello from the peer" + within;
        channel.close(reason);
        throw ProtocolError(reason);
    }
    auto refuse = [&](const std::string& reason) {
        channel.close("handshake: " + reason);
        return ProtocolError("handshake: " + reason);
    };
    if (!reply) throw refuse("the peer closed the channel before sending its hello");
    if (reply->kind != Kind::hello)
        throw refuse("expected a hello message first, got a " +
                     std::string(kind_name(reply->kind)) + " message");
    const nlohmann::json& peer = reply->header;
    const auto name = peer.find("protocol");
    if (name == peer.end() || !name->is_string() || name->get<std::string>() != kProtocolName)
        throw refuse("field 'protocol' must be \"deskbox-agent\", the peer sent " +
                     (name == peer.end() ? std::string("nothing") : short_json(*name)));
    const auto version = peer.find("version");
    if (version == peer.end() || !version->is_number_integer())
        throw refuse("field 'version' must be an integer, the peer sent " +
                     (version == peer.end() ? std::string("nothing") : short_json(*version)));
    if (*version != kProtocolVersion)
        throw refuse("the peer speaks deskbox-agent version " + short_json(*version) +
                     ", this side speaks version " + std::to_string(kProtocolVersion));
    const auto peer_role = peer.find("role");
    if (peer_role == peer.end() || !peer_role->is_string())
        throw refuse("field 'role' must be a string");
    return peer;
}

}  // namespace deskbox::protocol
