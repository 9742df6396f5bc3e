// Copies bytes both ways between two connected TCP sockets with splice(2) through a pipe per
// direction, so payload never passes through user space; each direction is half-closed when
// its source ends, a reset on one side resets the other, and an optional rate limit holds the
// a->b direction. Used by the egress proxy and the exposed-port proxy.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>

#include "common/unique_fd.hpp"
#include "server/network/rate_limiter.hpp"

namespace deskbox::network {

// Once one side of a relayed connection has closed, the other may stay silent at most `idle`
// (0: forever): without it a peer that never answers a close holds the flow's fds for good.
// Used on one strand by its owner (SpliceRelay, HttpRelay).
class HalfClosedWatch {
  public:
    using Expired = std::function<void(const std::string& reason)>;
    explicit HalfClosedWatch(const boost::asio::any_io_executor& executor) : timer_(executor) {}
    void set_idle(std::chrono::milliseconds idle) { idle_ = idle; }
    void moved() { last_moved_ = std::chrono::steady_clock::now(); }
    // From the first call on (later ones do nothing), calls `expired` once nothing moved for
    // the idle time. `expired` may hold the owner: cancel() lets it go.
    void start(Expired expired);
    void cancel();

  private:
    void arm();

    boost::asio::steady_timer timer_;
    std::chrono::milliseconds idle_{0};
    std::chrono::steady_clock::time_point last_moved_ = std::chrono::steady_clock::now();
    Expired expired_;
    bool started_ = false;
};

// A pipe for splice(2), non-blocking, as large as the system allows (1 MiB): 0, or pipe2's
// errno (EMFILE, ENFILE: out of fds).
int make_splice_pipe(UniqueFd& read_end, UniqueFd& write_end);

// One direction of a relay: bytes from one socket into a pipe of its own and on to another
// socket with splice(2), never through user space; optionally at most `budget` bytes (an HTTP
// body) and under a rate limit. A member of its owner (SpliceRelay, HttpRelay), on the owner's
// strand; its handlers hold the owner through `keep`. It never closes or shuts down a socket:
// the owner does, told by the events.
class SpliceDirection {
  public:
    struct Events {
        std::function<void(std::uint64_t)> moved;        // bytes delivered, since the last call
        std::function<void()> ended;                     // the source's end, or the budget's
        std::function<void(const std::string&)> failed;  // "receiving: ...", "sending: ..."
    };
    explicit SpliceDirection(const boost::asio::any_io_executor& executor)
        : limit_timer_(executor) {}
    // Sockets must outlive it (members of the same owner); they are set non-blocking.
    void attach(boost::asio::ip::tcp::socket& from, boost::asio::ip::tcp::socket& to,
                UniqueFd pipe_read, UniqueFd pipe_write,
                std::shared_ptr<RateLimiter> limiter = nullptr);
    // Moves until the source ends or `budget` bytes went through (nullopt: no budget).
    void start(std::shared_ptr<void> keep, Events events,
               std::optional<std::uint64_t> budget = std::nullopt);
    void stop();  // no more events (the owner is finishing)
    std::uint64_t total() const { return total_; }
    bool active() const { return active_; }

  private:
    void pump(std::shared_ptr<void> keep);
    void fail(const std::string& error);

    boost::asio::ip::tcp::socket* from_ = nullptr;
    boost::asio::ip::tcp::socket* to_ = nullptr;
    UniqueFd pipe_read_, pipe_write_;
    std::shared_ptr<RateLimiter> limiter_;
    boost::asio::steady_timer limit_timer_;
    Events events_;
    std::optional<std::uint64_t> left_;  // of the budget, counted as read from the source
    std::size_t in_pipe_ = 0;
    std::uint64_t total_ = 0;
    bool eof_ = false, active_ = false;
};

class SpliceRelay : public std::enable_shared_from_this<SpliceRelay> {
  public:
    struct Result {
        std::uint64_t a_to_b = 0, b_to_a = 0;
        bool reset = false;  // ended by an error or reset rather than two clean closes
        std::string error;
    };
    using Done = std::function<void(const Result&)>;
    // Called after bytes moved (for live counters): (a_to_b, b_to_a) since the last call.
    using Progress = std::function<void(std::uint64_t, std::uint64_t)>;

    // Both sockets must use the same strand executor; the relay's handlers run on it. The relay
    // needs two pipes (four fds): when they cannot be made (EMFILE, ENFILE, ENOMEM) this returns
    // null with `error` set and leaves both sockets with the caller, who refuses the flow. It
    // never throws for that: it runs on I/O threads, where an exception would end deskboxd.
    static std::shared_ptr<SpliceRelay> create(boost::asio::ip::tcp::socket& a,
                                               boost::asio::ip::tcp::socket& b, Done done,
                                               std::error_code& error,
                                               std::shared_ptr<RateLimiter> limit_a_to_b = nullptr,
                                               Progress progress = {});
    // The fds one relayed connection holds: its two sockets and two pipes.
    static constexpr std::size_t kFdsPerConnection = 6;
    ~SpliceRelay();
    // Once one side has closed, the other may stay silent at most `idle` before both are reset
    // (0: forever). Without it a peer that never answers a close holds the flow's fds for good.
    // Call before start().
    void close_half_closed_after(std::chrono::milliseconds idle) { half_closed_.set_idle(idle); }
    void start();
    void close();  // from any thread: resets both and finishes
    void abort();  // the same, on the relay's own strand, at once

  private:
    struct Pipes {
        UniqueFd ab_read, ab_write, ba_read, ba_write;
    };
    struct Token {};  // create() only

  public:
    SpliceRelay(Token, boost::asio::ip::tcp::socket a, boost::asio::ip::tcp::socket b, Pipes pipes,
                Done done, std::shared_ptr<RateLimiter> limit_a_to_b, Progress progress);

  private:
    void start_direction(SpliceDirection& d, bool a_to_b);
    void maybe_finish();
    void finish(bool reset, const std::string& error);

    boost::asio::ip::tcp::socket a_, b_;
    HalfClosedWatch half_closed_;
    SpliceDirection ab_, ba_;
    bool ab_done_ = false, ba_done_ = false;
    Done done_;
    Progress progress_;
    bool finished_ = false;
};

// Ends a socket with a TCP reset (SO_LINGER 0), so the peer fails at once instead of seeing
// a clean end of stream.
void reset_socket(boost::asio::ip::tcp::socket& socket);

}  // namespace deskbox::network
