#include "guest-desktop/capture/settle.hpp"

#include <algorithm>
#include <thread>

namespace deskbox::capture {

namespace {

class RealSettleClock final : public SettleClock {
  public:
    Clock::time_point now() const override { return Clock::now(); }
    void sleep_for(Clock::duration pause) override { std::this_thread::sleep_for(pause); }
};

}  // namespace

SettleClock& real_settle_clock() {
    static RealSettleClock clock;
    return clock;
}

SettleResult sync_and_settle(ScreenCapture& capture,
                             const std::function<SettleClock::Clock::time_point()>& last_activity,
                             std::chrono::milliseconds settle, std::chrono::milliseconds max_wait,
                             SettleClock& clock) {
    const auto deadline = clock.now() + max_wait;
    SettleResult result{capture.sync(), settle.count() == 0};
    while (!result.settled) {
        const auto now = clock.now();
        const auto quiet = now - last_activity();
        if (quiet >= settle) {
            result.settled = true;
            break;
        }
        if (now >= deadline) break;
        clock.sleep_for(std::min<SettleClock::Clock::duration>(settle - quiet, deadline - now));
        // What happened during the pause is emitted before quiet is judged again.
        result.seq = capture.sync();
    }
    return result;
}

}  // namespace deskbox::capture
