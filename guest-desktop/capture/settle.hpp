// screen.sync's settle: capture now, then wait until neither input nor damage has happened for
// `settle` (an app usually repaints a few ms after the input that caused it), capturing again
// after each pause, never past `max_wait`. Given the capture, when activity last happened and
// a clock, so it is tested without X and without real time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "guest-desktop/capture/screen_capture.hpp"

namespace deskbox::capture {

class SettleClock {
  public:
    using Clock = std::chrono::steady_clock;
    virtual ~SettleClock() = default;
    virtual Clock::time_point now() const = 0;
    virtual void sleep_for(Clock::duration pause) = 0;
};

// std::chrono::steady_clock and a real sleep.
SettleClock& real_settle_clock();

struct SettleResult {
    std::uint64_t seq = 0;  // the capture's last seq when the wait ended
    bool settled = false;   // quiet for `settle` (always true when `settle` is 0)
};

// `last_activity()` is when input last ended or damage was last emitted (on the clock's time
// line; the epoch when never).
SettleResult sync_and_settle(ScreenCapture& capture,
                             const std::function<SettleClock::Clock::time_point()>& last_activity,
                             std::chrono::milliseconds settle, std::chrono::milliseconds max_wait,
                             SettleClock& clock = real_settle_clock());

}  // namespace deskbox::capture
