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

// 0, or the errno of pipe2 (EMFILE, ENFILE: out of fds).
int make_pipe(UniqueFd& read_end, UniqueFd& write_end) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return errno;
    read_end.reset(fds[0]);
    write_end.reset(fds[1]);
    ::fcntl(fds[1], F_SETPIPE_SZ, static_cast<int>(kPipeSize));  // best effort (pipe-max-size)
    return 0;
}

}  // namespace

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
    int err = make_pipe(pipes.ab_read, pipes.ab_write);
    if (err == 0) err = make_pipe(pipes.ba_read, pipes.ba_write);
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
      limit_timer_(a_.get_executor()),
      half_closed_(a_.get_executor()),
      done_(std::move(done)),
      progress_(std::move(progress)) {
    ab_.from = &a_;
    ab_.to = &b_;
    ab_.limiter = std::move(limit_a_to_b);
    ba_.from = &b_;
    ba_.to = &a_;
    ab_.pipe_read = std::move(pipes.ab_read);
    ab_.pipe_write = std::move(pipes.ab_write);
    ba_.pipe_read = std::move(pipes.ba_read);
    ba_.pipe_write = std::move(pipes.ba_write);
    boost::system::error_code ignored;
    a_.non_blocking(true, ignored);
    b_.non_blocking(true, ignored);
}

SpliceRelay::~SpliceRelay() = default;

void SpliceRelay::start() {
    boost::asio::post(a_.get_executor(), [self = shared_from_this()] {
        self->pump(self->ab_);
        self->pump(self->ba_);
    });
}

void SpliceRelay::close() {
    boost::asio::post(a_.get_executor(),
                      [self = shared_from_this()] { self->finish(true, "closed by deskboxd"); });
}

void SpliceRelay::abort() {
    finish(true, "closed by deskboxd");
}

void SpliceRelay::pump(Direction& d) {
    d.waiting = false;
    if (finished_ || d.done) return;
    auto self = shared_from_this();
    const int from = d.from->native_handle(), to = d.to->native_handle();
    std::uint64_t moved_out = 0;
    while (true) {
        if (d.in_pipe > 0) {
            ssize_t n = ::splice(d.pipe_read.get(), nullptr, to, nullptr, d.in_pipe,
                                 SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
            if (n > 0) {
                half_closed_.moved();
                d.in_pipe -= static_cast<std::size_t>(n);
                d.total += static_cast<std::uint64_t>(n);
                moved_out += static_cast<std::uint64_t>(n);
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno == EAGAIN) {
                d.waiting = true;
                d.to->async_wait(boost::asio::socket_base::wait_write,
                                 [self, &d](boost::system::error_code ec) {
                                     if (ec) return self->fail(ec.message());
                                     self->pump(d);
                                 });
                break;
            }
            fail(std::string("sending: ") + std::strerror(n < 0 ? errno : EPIPE));
            return;
        }
        if (d.eof) {
            ::shutdown(to, SHUT_WR);
            d.done = true;
            break;
        }
        std::size_t want = kChunk;
        if (d.limiter) {
            want = static_cast<std::size_t>(d.limiter->take(kChunk));
            if (want == 0) {
                d.waiting = true;
                limit_timer_.expires_after(d.limiter->wait_for(16 * 1024));
                limit_timer_.async_wait([self, &d](boost::system::error_code ec) {
                    if (!ec) self->pump(d);
                });
                break;
            }
        }
        ssize_t n = ::splice(from, nullptr, d.pipe_write.get(), nullptr, want,
                             SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (d.limiter) d.limiter->refund(want - static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
        if (n > 0) {
            d.in_pipe += static_cast<std::size_t>(n);
            continue;
        }
        if (n == 0) {
            d.eof = true;
            continue;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN) {
            d.waiting = true;
            d.from->async_wait(boost::asio::socket_base::wait_read,
                               [self, &d](boost::system::error_code ec) {
                                   if (ec) return self->fail(ec.message());
                                   self->pump(d);
                               });
            break;
        }
        fail(std::string("receiving: ") + std::strerror(errno));
        return;
    }
    if (moved_out && progress_) {
        if (&d == &ab_)
            progress_(moved_out, 0);
        else
            progress_(0, moved_out);
    }
    maybe_finish();
}

void SpliceRelay::fail(const std::string& error) {
    finish(true, error);
}

void SpliceRelay::maybe_finish() {
    if (ab_.done && ba_.done) return finish(false, {});
    if (ab_.done || ba_.done)
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
    limit_timer_.cancel();
    half_closed_.cancel();
    if (reset) {
        reset_socket(a_);
        reset_socket(b_);
    } else {
        a_.close(ignored);
        b_.close(ignored);
    }
    Result r;
    r.a_to_b = ab_.total;
    r.b_to_a = ba_.total;
    r.reset = reset;
    r.error = error;
    if (done_) {
        auto done = std::move(done_);
        done(r);
    }
}

}  // namespace deskbox::network
