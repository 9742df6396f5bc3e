// The screen capture of deskbox-agent: its own X connection and thread, XShm (or XGetImage)
// grabs driven by XDamage (or polling), false damage dropped by comparing tiles against a
// shadow copy of the screen, captures coalesced to at most max_fps per second, and the
// cursor's image and position. Transport-agnostic: callbacks receive what the agent turns
// into `damage`, `cursor.shape` and `cursor.position` events.
//
// Invariant: applying every emitted DamageRect, in order, to a frame buffer gives exactly the
// engine's shadow copy, which is the screen as of the last capture.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/unique_fd.hpp"
#include "guest-desktop/capture/cursor_watcher.hpp"
#include "guest-desktop/capture/screen_capture.hpp"
#include "guest-desktop/capture/types.hpp"
#include "x11/connection.hpp"

namespace deskbox::capture {

class ScreenGrabber;
class DamageTracker;
class TileDiffer;

struct CaptureOptions {
    int max_fps = 30;                 // 1..1000 captures per second at most (sync/full excepted)
    int tile_size = 64;               // 8..1024 pixels; the unit of the false-damage compare
    std::optional<bool> use_xshm;     // nullopt: XShm if usable; false: XGetImage; true: require
    std::optional<bool> use_xdamage;  // nullopt: XDamage if present; false: poll; true: require
};

struct CaptureStats {
    std::uint64_t captures = 0;         // capture passes (damage fetch, grab, compare)
    std::uint64_t batches = 0;          // passes that emitted at least one rect
    std::uint64_t rects = 0;            // DamageRects emitted
    std::uint64_t pixel_bytes = 0;      // their pixel bytes
    std::uint64_t tiles_compared = 0;   // tiles compared with the shadow
    std::uint64_t tiles_changed = 0;    // of those, tiles that really changed
    std::uint64_t damage_notifies = 0;  // DamageNotify events received
    std::uint64_t errors = 0;           // failures reported through on_error
};

class CaptureEngine final : public ScreenCapture {
  public:
    // Opens its own connection to `display_name` and checks the extensions and the pixel
    // format. Throws CaptureError naming the option or the reason.
    explicit CaptureEngine(const std::string& display_name, CaptureOptions options = {});
    ~CaptureEngine() override;  // stops
    CaptureEngine(const CaptureEngine&) = delete;
    CaptureEngine& operator=(const CaptureEngine&) = delete;

    void set_callbacks(CaptureCallbacks callbacks) override;

    // Starts the thread; it first emits one rect covering the screen (the host mirror's
    // base), the cursor shape and the cursor position. No-op if running.
    void start() override;
    // Stops and joins the thread. Pending sync/full calls fail. No-op if not running.
    // Not from a callback (the thread cannot join itself).
    void stop() override;
    bool running() const { return running_.load(); }

    // Captures now, from another thread: one round trip to the server (so every request it
    // has processed before, e.g. an injected action another client XSync'd, is on screen),
    // grab, emit every pending damaged rect (on_damage returns before this does), and return
    // the seq of the last rect emitted so far (0 if none). Asked before the first start(), it
    // waits for it. Throws CaptureError on timeout, once the engine has stopped, or if the
    // capture (or a callback) failed.
    std::uint64_t sync(std::chrono::milliseconds timeout = std::chrono::seconds(5)) override;
    // Like sync, but emits one rect covering the whole screen.
    std::uint64_t full_frame(std::chrono::milliseconds timeout = std::chrono::seconds(5)) override;

    // Thread-safe; takes effect at the next capture. Throws CaptureError outside 1..1000.
    void set_max_fps(int max_fps) override;

    bool using_xshm() const { return using_xshm_.load(); }
    bool using_xdamage() const { return damage_ != nullptr; }
    // Why a fallback is in use (empty when not).
    const std::string& xshm_unavailable_reason() const { return xshm_reason_; }
    const std::string& xdamage_unavailable_reason() const { return xdamage_reason_; }
    // Non-empty when there is no XFIXES: no cursor events then, pixels still flow.
    const std::string& cursor_unavailable_reason() const { return cursor_reason_; }
    int width() const override { return width_.load(); }
    int height() const override { return height_.load(); }
    std::uint64_t last_seq() const { return last_seq_.load(); }
    CaptureStats stats() const;

  private:
    enum class CommandKind { sync, full };
    struct CommandResult {
        std::uint64_t seq = 0;
        std::optional<std::string> error;
    };
    struct Command {
        CommandKind kind;
        std::shared_ptr<std::promise<CommandResult>> done;
    };
    using Clock = std::chrono::steady_clock;

    std::uint64_t request(CommandKind kind, std::chrono::milliseconds timeout);
    void run();
    void run_commands();
    void drain_events();
    void wait_until(Clock::time_point deadline);
    void capture_damage(bool everything);
    void capture_full_frame();
    void emit_changed();
    void emit_rect(const Rect& rect);
    void poll_cursor(bool force);
    bool recover_from_resize();  // true if the screen changed size and was rebuilt
    void rebuild_for_new_size();
    void report(const std::string& message);
    Clock::duration period() const;

    CaptureOptions options_;
    std::unique_ptr<x11::XConnection> connection_;
    std::unique_ptr<ScreenGrabber> grabber_;
    std::unique_ptr<DamageTracker> damage_;
    std::unique_ptr<CursorWatcher> cursor_;
    std::unique_ptr<TileDiffer> differ_;
    std::string xshm_reason_;
    std::string xdamage_reason_;
    std::string cursor_reason_;
    CaptureCallbacks callbacks_;
    UniqueFd wake_fd_;  // eventfd: commands and stop

    std::thread thread_;
    std::atomic<bool> running_{false};
    std::atomic<bool> stop_requested_{false};
    std::mutex commands_mutex_;
    std::deque<Command> commands_;
    bool accepting_commands_ = false;  // guarded by commands_mutex_

    std::atomic<int> max_fps_;
    std::atomic<bool> using_xshm_{false};  // read by other threads; changes on a resize
    std::atomic<int> width_{0};
    std::atomic<int> height_{0};
    std::atomic<std::uint64_t> last_seq_{0};
    bool damage_pending_ = false;
    bool recompare_all_ = false;  // a failed pass lost its damage: compare everything next
    Clock::time_point last_capture_{};

    struct AtomicStats {
        std::atomic<std::uint64_t> captures{0}, batches{0}, rects{0}, pixel_bytes{0},
            tiles_compared{0}, tiles_changed{0}, damage_notifies{0}, errors{0};
    } stats_;
};

}  // namespace deskbox::capture
