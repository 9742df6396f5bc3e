#include "guest-desktop/capture/capture_engine.hpp"

#include <poll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "guest-desktop/capture/damage_tracker.hpp"
#include "guest-desktop/capture/screen_grabber.hpp"
#include "guest-desktop/capture/tile_differ.hpp"
#include "x11/error_trap.hpp"

namespace deskbox::capture {
namespace {

// Scattered damage becomes one bounding grab beyond this many rects: a round trip costs
// more than grabbing a few extra pixels, and only damaged tiles are compared either way.
constexpr std::size_t kMaxGrabsPerPass = 4;

std::string describe_current_exception() {
    try {
        throw;
    } catch (const std::exception& e) {
        return e.what();
    } catch (...) {
        return "unknown exception";
    }
}

void check_options(const CaptureOptions& options) {
    if (options.max_fps < 1 || options.max_fps > 1000)
        throw CaptureError("max_fps: must be between 1 and 1000, got " +
                           std::to_string(options.max_fps));
    if (options.tile_size < 8 || options.tile_size > 1024)
        throw CaptureError("tile_size: must be between 8 and 1024, got " +
                           std::to_string(options.tile_size));
}

}  // namespace

CaptureEngine::CaptureEngine(const std::string& display_name, CaptureOptions options)
    : options_(options), max_fps_(options.max_fps) {
    check_options(options_);
    try {
        // Without its X server there is nothing left to capture, nor anything for the host
        // to look at: losing it ends the process (as Xlib's default would).
        connection_ =
            std::make_unique<x11::XConnection>(display_name, x11::OnServerLoss::exit_process);
    } catch (const x11::XConnectionError&) {
        throw CaptureError("cannot connect to X display '" + display_name + "'");
    }
    Display* dpy = connection_->get();

    x11::XErrorTrap trap(dpy);
    grabber_ = std::make_unique<ScreenGrabber>(dpy, options_.use_xshm);
    width_ = grabber_->width();
    height_ = grabber_->height();
    using_xshm_ = grabber_->using_xshm();
    xshm_reason_ = grabber_->xshm_unavailable_reason();
    differ_ = std::make_unique<TileDiffer>(width_, height_, options_.tile_size);
    if (options_.use_xdamage.value_or(true)) {
        try {
            damage_ = std::make_unique<DamageTracker>(dpy);
        } catch (const CaptureError& e) {
            if (options_.use_xdamage.value_or(false))
                throw CaptureError(std::string("use_xdamage: XDamage was required but ") +
                                   e.what());
            xdamage_reason_ = e.what();
        }
    }
    try {
        cursor_ = std::make_unique<CursorWatcher>(dpy);
    } catch (const CaptureError& e) {
        cursor_reason_ = e.what();  // capture still works; the host shows no cursor
    }
    // Root size changes (RandR) arrive as ConfigureNotify on the root.
    XSelectInput(dpy, DefaultRootWindow(dpy), StructureNotifyMask);
    if (trap.sync_and_check())
        throw CaptureError("setting up capture on " + display_name +
                           " failed: " + trap.first_error());

    wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_fd_) throw CaptureError(std::string("eventfd: ") + std::strerror(errno));
    // Requests made before the first start() wait for it: the agent's channel may read a
    // host's first screen.sync before the engine's thread runs.
    accepting_commands_ = true;
}

CaptureEngine::~CaptureEngine() {
    stop();
}

void CaptureEngine::set_callbacks(CaptureCallbacks callbacks) {
    if (running_) throw CaptureError("set_callbacks: the engine is running");
    callbacks_ = std::move(callbacks);
}

void CaptureEngine::start() {
    if (running_) return;
    stop_requested_ = false;
    {
        std::lock_guard lock(commands_mutex_);
        accepting_commands_ = true;
    }
    running_ = true;
    thread_ = std::thread([this] { run(); });
}

void CaptureEngine::stop() {
    if (!thread_.joinable()) {
        // Never started (or stopped already): whoever waits is told now, not at its timeout.
        std::deque<Command> left;
        {
            std::lock_guard lock(commands_mutex_);
            accepting_commands_ = false;
            left.swap(commands_);
        }
        for (auto& c : left) c.done->set_value({0, "the capture engine stopped"});
        return;
    }
    stop_requested_ = true;
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_.get(), &one, sizeof one);
    thread_.join();
    running_ = false;
}

void CaptureEngine::set_max_fps(int max_fps) {
    if (max_fps < 1 || max_fps > 1000)
        throw CaptureError("max_fps: must be between 1 and 1000, got " + std::to_string(max_fps));
    max_fps_ = max_fps;
}

CaptureStats CaptureEngine::stats() const {
    CaptureStats s;
    s.captures = stats_.captures;
    s.batches = stats_.batches;
    s.rects = stats_.rects;
    s.pixel_bytes = stats_.pixel_bytes;
    s.tiles_compared = stats_.tiles_compared;
    s.tiles_changed = stats_.tiles_changed;
    s.damage_notifies = stats_.damage_notifies;
    s.errors = stats_.errors;
    return s;
}

std::uint64_t CaptureEngine::sync(std::chrono::milliseconds timeout) {
    return request(CommandKind::sync, timeout);
}

std::uint64_t CaptureEngine::full_frame(std::chrono::milliseconds timeout) {
    return request(CommandKind::full, timeout);
}

std::uint64_t CaptureEngine::request(CommandKind kind, std::chrono::milliseconds timeout) {
    const char* name = kind == CommandKind::sync ? "sync" : "full_frame";
    auto done = std::make_shared<std::promise<CommandResult>>();
    auto result = done->get_future();
    {
        std::lock_guard lock(commands_mutex_);
        if (!accepting_commands_ || stop_requested_)
            throw CaptureError(std::string(name) + ": the capture engine is not running");
        commands_.push_back({kind, done});
    }
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_.get(), &one, sizeof one);
    if (result.wait_for(timeout) != std::future_status::ready)
        throw CaptureError(std::string(name) + ": timed out after " +
                           std::to_string(timeout.count()) + " ms");
    CommandResult outcome = result.get();
    // Errors travel as text and are thrown here, so no exception object is shared between
    // the threads.
    if (outcome.error) throw CaptureError(std::string(name) + ": " + *outcome.error);
    return outcome.seq;
}

CaptureEngine::Clock::duration CaptureEngine::period() const {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(1)) / max_fps_.load();
}

void CaptureEngine::report(const std::string& message) {
    ++stats_.errors;
    if (callbacks_.on_error) {
        try {
            callbacks_.on_error(message);
        } catch (...) {
            // A failing error sink must not stop the capture.
        }
    }
}

void CaptureEngine::run() {
    // Kept for the thread's life: asynchronous errors (e.g. a failed DamageSubtract) surface
    // here instead of Xlib's default handler exiting the process.
    x11::XErrorTrap trap(connection_->get());
    try {
        capture_full_frame();
        poll_cursor(true);
    } catch (const std::exception& e) {
        report(std::string("initial capture failed: ") + e.what());
    } catch (...) {
        report("initial capture failed: unknown exception");
    }
    last_capture_ = Clock::now();
    auto next_tick = last_capture_ + period();

    while (!stop_requested_) {
        try {
            run_commands();
            drain_events();
            auto now = Clock::now();
            if (damage_pending_ && now >= last_capture_ + period()) {
                capture_damage(false);
                last_capture_ = now;
            }
            if (now >= next_tick) {
                // Without XDamage every tick compares the whole screen.
                if (!damage_) {
                    capture_damage(true);
                    last_capture_ = now;
                }
                poll_cursor(false);
                next_tick = now + period();
            }
            if (trap.caught()) {
                report("X error during capture: " + trap.first_error());
                trap.clear();
            }
            auto deadline = next_tick;
            if (damage_pending_) deadline = std::min(deadline, last_capture_ + period());
            wait_until(deadline);
        } catch (...) {
            // Failures (a callback's too) are reported, never allowed to end the thread.
            report(describe_current_exception());
            trap.clear();
            try {
                recover_from_resize();
            } catch (...) {
                report(describe_current_exception());
            }
            last_capture_ = Clock::now();  // back off for a period before retrying
            wait_until(last_capture_ + period());
        }
    }

    std::deque<Command> left;
    {
        std::lock_guard lock(commands_mutex_);
        accepting_commands_ = false;
        left.swap(commands_);
    }
    for (auto& c : left) c.done->set_value({0, "the capture engine stopped"});
    running_ = false;
}

void CaptureEngine::run_commands() {
    std::uint64_t count = 0;
    [[maybe_unused]] auto n = ::read(wake_fd_.get(), &count, sizeof count);
    std::deque<Command> todo;
    {
        std::lock_guard lock(commands_mutex_);
        todo.swap(commands_);
    }
    for (auto& c : todo) {
        try {
            if (c.kind == CommandKind::sync) {
                // take_damage's round trip is the sync point; polling compares everything.
                capture_damage(!damage_);
                drain_events();  // cursor changes that arrived before the round trip's reply
                poll_cursor(false);
            } else {
                capture_full_frame();
            }
            last_capture_ = Clock::now();
            c.done->set_value({last_seq_, std::nullopt});
        } catch (...) {
            std::string reason = describe_current_exception();
            report(reason);
            c.done->set_value({0, std::move(reason)});
        }
    }
}

void CaptureEngine::drain_events() {
    Display* dpy = connection_->get();
    while (XPending(dpy) > 0) {
        XEvent event;
        XNextEvent(dpy, &event);
        if (damage_ && damage_->is_damage_event(event)) {
            ++stats_.damage_notifies;
            damage_pending_ = true;
        } else if (cursor_ && cursor_->handle_event(event)) {
            if (auto shape = cursor_->shape_if_changed(); shape && callbacks_.on_cursor_shape)
                callbacks_.on_cursor_shape(std::move(*shape));
        } else if (event.type == ConfigureNotify &&
                   event.xconfigure.window == DefaultRootWindow(dpy) &&
                   (event.xconfigure.width != width_ || event.xconfigure.height != height_)) {
            rebuild_for_new_size();
        }
    }
}

void CaptureEngine::wait_until(Clock::time_point deadline) {
    Display* dpy = connection_->get();
    // Replies read during captures may have queued events that poll() cannot see.
    if (XEventsQueued(dpy, QueuedAfterFlush) > 0) return;
    auto left = std::max(Clock::duration::zero(), deadline - Clock::now());
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec timeout{static_cast<time_t>(ns / 1'000'000'000),
                     static_cast<long>(ns % 1'000'000'000)};
    pollfd fds[2] = {{ConnectionNumber(dpy), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    ::ppoll(fds, 2, &timeout, nullptr);
}

void CaptureEngine::capture_damage(bool everything) {
    ++stats_.captures;
    TileGrid candidates(differ_->width(), differ_->height(), differ_->tile());
    if (damage_) {
        // Clear the damage before grabbing: drawing after this point is damaged again and
        // caught by the next pass, so nothing is lost between fetch and grab.
        damage_pending_ = false;
        for (const auto& r : damage_->take_damage()) candidates.mark_rect(r);
    }
    if (everything || recompare_all_) candidates.mark_all();
    recompare_all_ = false;
    if (candidates.any()) {
        auto grabs = candidates.merged_rects();
        if (grabs.size() > kMaxGrabsPerPass) grabs = {candidates.bounds()};
        try {
            for (const auto& area : grabs)
                stats_.tiles_compared += differ_->compare(grabber_->grab(area), candidates);
        } catch (const CaptureError&) {
            if (recover_from_resize()) return;
            recompare_all_ = true;  // the damage fetched for this pass is gone
            throw;
        }
    }
    emit_changed();
}

void CaptureEngine::capture_full_frame() {
    ++stats_.captures;
    if (damage_) {
        damage_pending_ = false;
        damage_->take_damage();  // covered by this grab
    }
    ImageView frame;
    try {
        frame = grabber_->grab_full();
    } catch (const CaptureError&) {
        if (recover_from_resize()) return;
        throw;
    }
    differ_->reset(frame);
    recompare_all_ = false;
    ++stats_.batches;
    emit_rect(grabber_->screen());
}

bool CaptureEngine::recover_from_resize() {
    XWindowAttributes root{};
    if (!XGetWindowAttributes(connection_->get(), DefaultRootWindow(connection_->get()), &root) ||
        (root.width == width_ && root.height == height_))
        return false;
    rebuild_for_new_size();
    return true;
}

void CaptureEngine::emit_changed() {
    stats_.tiles_changed += static_cast<std::uint64_t>(differ_->changed().marked_count());
    auto rects = differ_->take_changed_rects();
    if (rects.empty()) return;
    ++stats_.batches;
    for (const auto& r : rects) emit_rect(r);
}

void CaptureEngine::emit_rect(const Rect& rect) {
    DamageRect out;
    out.seq = last_seq_ + 1;
    out.x = rect.x;
    out.y = rect.y;
    out.width = rect.width;
    out.height = rect.height;
    out.pixels = differ_->copy_pixels(rect);
    ++stats_.rects;
    stats_.pixel_bytes += out.pixels.size();
    last_seq_ = out.seq;
    if (callbacks_.on_damage) callbacks_.on_damage(std::move(out));
}

void CaptureEngine::poll_cursor(bool force) {
    if (!cursor_) return;
    if (auto shape = cursor_->shape_if_changed(force); shape && callbacks_.on_cursor_shape)
        callbacks_.on_cursor_shape(std::move(*shape));
    if (auto position = cursor_->position_if_changed(force);
        position && callbacks_.on_cursor_position)
        callbacks_.on_cursor_position(*position);
}

void CaptureEngine::rebuild_for_new_size() {
    // TODO(protocol): the host mirror needs a screen-size event before this full frame; for
    // now the new size is only visible through width()/height() and the frame's rect.
    std::optional<bool> use_xshm = grabber_->using_xshm() ? std::optional<bool>() : false;
    // Built before the old ones go, so a failure leaves the engine usable at the old size.
    auto grabber = std::make_unique<ScreenGrabber>(connection_->get(), use_xshm);
    auto differ =
        std::make_unique<TileDiffer>(grabber->width(), grabber->height(), options_.tile_size);
    grabber_ = std::move(grabber);
    differ_ = std::move(differ);
    using_xshm_ = grabber_->using_xshm();
    width_ = grabber_->width();
    height_ = grabber_->height();
    differ_->reset(grabber_->grab_full());
    recompare_all_ = false;
    ++stats_.batches;
    emit_rect(grabber_->screen());
}
}  // namespace deskbox::capture
