#include "server/network/splice_relay.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include <cerrno>
#include <cstring>

namespace deskbox::network {
namespace {

constexpr std::size_t kPipeSize = 1 << 20;  // 1 MiB per direction when the system allows it
constexpr std::size_t kChunk = 1 << 20;

}  // namespace

int make_splice_pipe(UniqueFd& read_end, UniqueFd& write_end) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return errno;
    read_end.reset(fds[0]);
    write_end.reset(fds[1]);
    ::fcntl(fds[1], F_SETPIPE_SZ, static_cast<int>(kPipeSize));  // best effort (pipe-max-size)
    return 0;
}

void reset_socket(boost::asio::ip::tcp::socket& socket) {
    if (!socket.is_open()) return;
    boost::system::error_code ignored;
    socket.set_option(boost::asio::socket_base::linger(true, 0), ignored);
    socket.close(ignored);
}

std::shared_ptr<SpliceRelay> SpliceRelay::create(boost::asio::ip::tcp::socket& a,
                                                 boost::asio::ip::tcp::socket& b, Done done,
                                                 std::error_code& error,
                                                 std::shared_ptr<RateLimiter> limit_a_to_b,
                                                 Progress progress) {
    error.clear();
    Pipes pipes;
    int err = make_splice_pipe(pipes.ab_read, pipes.ab_write);
    if (err == 0) err = make_splice_pipe(pipes.ba_read, pipes.ba_write);
    if (err != 0) {
        error = std::error_code(err, std::generic_category());
        return nullptr;  // the pipes made so far close here; the sockets stay the caller's
    }
    try {
        return std::make_shared<SpliceRelay>(Token{}, std::move(a), std::move(b), std::move(pipes),
                                             std::move(done), std::move(limit_a_to_b),
                                             std::move(progress));
    } catch (const std::bad_alloc&) {
        error = std::make_error_code(std::errc::not_enough_memory);
        return nullptr;
    }
}

SpliceRelay::SpliceRelay(Token, boost::asio::ip::tcp::socket a, boost::asio::ip::tcp::socket b,
                         Pipes pipes, Done done, std::shared_ptr<RateLimiter> limit_a_to_b,
                         Progress progress)
    : a_(std::move(a)),
      b_(std::move(b)),
      half_closed_(a_.get_executor()),
      ab_(a_.get_executor()),
      ba_(a_.get_executor()),
      done_(std::move(done)),
      progress_(std::move(progress)) {
    ab_.attach(a_, b_, std::move(pipes.ab_read), std::move(pipes.ab_write),
               std::move(limit_a_to_b));
    ba_.attach(b_, a_, std::move(pipes.ba_read), std::move(pipes.ba_write));
}

SpliceRelay::~SpliceRelay() = default;

void SpliceRelay::start() {
    boost::asio::post(a_.get_executor(), [self = shared_from_this()] {
        if (self->finished_) return;  // aborted before it began
        self->start_direction(self->ab_, true);
        self->start_direction(self->ba_, false);
    });
}

void SpliceRelay::start_direction(SpliceDirection& d, bool a_to_b) {
    SpliceDirection::Events events;
    events.moved = [this, a_to_b](std::uint64_t n) {
        half_closed_.moved();
        if (progress_) progress_(a_to_b ? n : 0, a_to_b ? 0 : n);
    };
    // A source's clean end passes on as a half-close; both ended: done.
    events.ended = [this, a_to_b] {
        ::shutdown((a_to_b ? b_ : a_).native_handle(), SHUT_WR);
        (a_to_b ? ab_done_ : ba_done_) = true;
        maybe_finish();
    };
    events.failed = [this](const std::string& error) { finish(true, error); };
    d.start(shared_from_this(), std::move(events));
}

void SpliceRelay::close() {
    boost::asio::post(a_.get_executor(),
                      [self = shared_from_this()] { self->finish(true, "closed by deskboxd"); });
}

void SpliceRelay::abort() {
    finish(true, "closed by deskboxd");
}

void SpliceDirection::attach(boost::asio::ip::tcp::socket& from, boost::asio::ip::tcp::socket& to,
                             UniqueFd pipe_read, UniqueFd pipe_write,
                             std::shared_ptr<RateLimiter> limiter) {
    from_ = &from;
    to_ = &to;
    pipe_read_ = std::move(pipe_read);
    pipe_write_ = std::move(pipe_write);
    limiter_ = std::move(limiter);
    boost::system::error_code ignored;
    from.non_blocking(true, ignored);
    to.non_blocking(true, ignored);
}

void SpliceDirection::start(std::shared_ptr<void> keep, Events events,
                            std::optional<std::uint64_t> budget) {
    events_ = std::move(events);
    left_ = budget;
    eof_ = false;
    active_ = true;
    pump(std::move(keep));
}

void SpliceDirection::stop() {
    active_ = false;
    limit_timer_.cancel();
    events_ = {};
}

void SpliceDirection::fail(const std::string& error) {
    active_ = false;
    auto events = std::move(events_);
    if (events.failed) events.failed(error);
}

// `keep` holds the owner (whose members the sockets and this are) while a handler waits.
void SpliceDirection::pump(std::shared_ptr<void> keep) {
    if (!active_) return;
    const int from = from_->native_handle(), to = to_->native_handle();
    std::uint64_t moved_out = 0;
    auto report = [&] {
        if (moved_out && events_.moved) events_.moved(std::exchange(moved_out, 0));
    };
    while (true) {
        if (in_pipe_ > 0) {
            ssize_t n = ::splice(pipe_read_.get(), nullptr, to, nullptr, in_pipe_,
                                 SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
            if (n > 0) {
                in_pipe_ -= static_cast<std::size_t>(n);
                total_ += static_cast<std::uint64_t>(n);
                moved_out += static_cast<std::uint64_t>(n);
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno == EAGAIN) {
                report();
                to_->async_wait(boost::asio::socket_base::wait_write,
                                [this, keep](boost::system::error_code ec) {
                                    if (!active_) return;
                                    if (ec) return fail("sending: " + ec.message());
                                    pump(keep);
                                });
                return;
            }
            const int err = n < 0 ? errno : EPIPE;
            report();
            return fail(std::string("sending: ") + std::strerror(err));
        }
        if (eof_ || (left_ && *left_ == 0)) {
            report();
            active_ = false;
            auto events = std::move(events_);  // the call may start this direction again
            if (events.ended) events.ended();
            return;
        }
        std::size_t want = kChunk;
        if (left_) want = static_cast<std::size_t>(std::min<std::uint64_t>(want, *left_));
        if (limiter_) {
            want = static_cast<std::size_t>(limiter_->take(want));
            if (want == 0) {
                report();
                limit_timer_.expires_after(limiter_->wait_for(16 * 1024));
                limit_timer_.async_wait([this, keep](boost::system::error_code ec) {
                    if (!ec) pump(keep);
                });
                return;
            }
        }
        ssize_t n = ::splice(from, nullptr, pipe_write_.get(), nullptr, want,
                             SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (limiter_) limiter_->refund(want - static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
        if (n > 0) {
            in_pipe_ += static_cast<std::size_t>(n);
            if (left_) *left_ -= static_cast<std::uint64_t>(n);
            continue;
        }
        if (n == 0) {
            eof_ = true;
            continue;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN) {
            report();
            from_->async_wait(boost::asio::socket_base::wait_read,
                              [this, keep](boost::system::error_code ec) {
                                  if (!active_) return;
                                  if (ec) return fail("receiving: " + ec.message());
                                  pump(keep);
                              });
            return;
        }
        const int err = errno;
        report();
        return fail(std::string("receiving: ") + std::strerror(err));
    }
}

void SpliceRelay::maybe_finish() {
    if (ab_done_ && ba_done_) return finish(false, {});
    if (ab_done_ || ba_done_)
        half_closed_.start(
            [self = shared_from_this()](const std::string& reason) { self->finish(true, reason); });
}

void HalfClosedWatch::start(Expired expired) {
    if (started_ || idle_.count() == 0) return;
    started_ = true;
    expired_ = std::move(expired);
    moved();
    arm();
}

void HalfClosedWatch::cancel() {
    timer_.cancel();
    expired_ = nullptr;
}

void HalfClosedWatch::arm() {
    timer_.expires_at(last_moved_ + idle_);
    // The handler's copy of `expired_` keeps the owner (and so this watch) alive until it ran.
    timer_.async_wait([this, expired = expired_](boost::system::error_code ec) {
        if (ec || !expired_) return;
        if (std::chrono::steady_clock::now() < last_moved_ + idle_)
            return arm();  // bytes moved since: wait from then
        auto call = std::exchange(expired_, nullptr);
        call("one side closed and the other stayed silent for " +
             std::to_string(idle_.count() / 1000) + " s");
    });
}

void SpliceRelay::finish(bool reset, const std::string& error) {
    if (finished_) return;
    finished_ = true;
    boost::system::error_code ignored;
    ab_.stop();
    ba_.stop();
    half_closed_.cancel();
    if (reset) {
        reset_socket(a_);
        reset_socket(b_);
    } else {
        a_.close(ignored);
        b_.close(ignored);
    }
    Result r;
    r.a_to_b = ab_.total();
    r.b_to_a = ba_.total();
    r.reset = reset;
    r.error = error;
    if (done_) {
        auto done = std::move(done_);
        done(r);
    }
}

}  // namespace deskbox::network
