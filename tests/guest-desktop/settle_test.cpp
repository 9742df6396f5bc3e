// screen.sync's settle (guest-desktop/capture/settle.hpp) on a fake capture and a fake clock:
// no X, no real time, every path exact.
#include "guest-desktop/capture/settle.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "tests/support/fake_capture.hpp"

namespace deskbox::capture {
namespace {

using namespace std::chrono_literals;
using Clock = SettleClock::Clock;

// Time moves only when the settle sleeps.
class FakeClock final : public SettleClock {
  public:
    Clock::time_point now() const override { return now_; }
    void sleep_for(Clock::duration pause) override {
        pauses.push_back(pause);
        now_ += pause;
    }
    Clock::time_point at(Clock::duration since_start) const { return start_ + since_start; }
    std::vector<Clock::duration> pauses;

  private:
    Clock::time_point start_{std::chrono::hours(1)};
    Clock::time_point now_ = start_;
};

class SettleTest : public ::testing::Test {
  protected:
    void SetUp() override {
        capture_.set_callbacks(
            {.on_damage = [this](DamageRect&&) { last_activity_ = clock_.now(); },
             .on_cursor_shape = {},
             .on_cursor_position = {},
             .on_error = {}});
        capture_.start();
    }
    SettleResult settle(std::chrono::milliseconds quiet, std::chrono::milliseconds max_wait) {
        return sync_and_settle(
            capture_, [this] { return last_activity_; }, quiet, max_wait, clock_);
    }

    FakeClock clock_;
    testing::FakeCapture capture_;
    Clock::time_point last_activity_{};
};

TEST_F(SettleTest, WithoutASettleItSyncsOnceAndReturns) {
    auto result = settle(0ms, 1000ms);
    EXPECT_TRUE(result.settled);
    EXPECT_EQ(result.seq, 1u) << "the start's full frame, emitted by the sync";
    EXPECT_EQ(capture_.syncs(), 1);
    EXPECT_TRUE(clock_.pauses.empty());
}

TEST_F(SettleTest, AQuietScreenIsSettledAfterOnePauseOfTheRemainder) {
    // The sync emits the start's frame: activity now; then nothing happens.
    auto result = settle(300ms, 1000ms);
    EXPECT_TRUE(result.settled);
    ASSERT_EQ(clock_.pauses.size(), 1u);
    EXPECT_EQ(clock_.pauses[0], 300ms);
    EXPECT_EQ(capture_.syncs(), 2) << "what happened during the pause is captured first";
}

TEST_F(SettleTest, ActivityLongAgoNeedsNoPause) {
    capture_.sync(1s);  // the start's frame goes out at 1 h
    clock_.sleep_for(10s);
    clock_.pauses.clear();
    auto result = settle(300ms, 1000ms);
    EXPECT_TRUE(result.settled);
    EXPECT_TRUE(clock_.pauses.empty());
}

TEST_F(SettleTest, DamageDuringThePauseRestartsTheQuietPeriod) {
    // The app repaints 100 ms after the first pause started... then is still.
    capture_.on_sync = [this](int n) {
        if (n == 2) capture_.damage({10, 10, 5, 5});
    };
    auto result = settle(300ms, 5000ms);
    EXPECT_TRUE(result.settled);
    EXPECT_EQ(result.seq, 2u) << "the repaint's rect";
    ASSERT_EQ(clock_.pauses.size(), 2u);
    EXPECT_EQ(clock_.pauses[0], 300ms);
    EXPECT_EQ(clock_.pauses[1], 300ms) << "quiet counts from the repaint";
    EXPECT_EQ(clock_.now(), clock_.at(600ms));
}

TEST_F(SettleTest, AScreenThatNeverSettlesEndsAtMaxWaitUnsettled) {
    capture_.on_sync = [this](int) { capture_.damage({0, 0, 1, 1}); };  // a spinner
    auto result = settle(300ms, 1000ms);
    EXPECT_FALSE(result.settled);
    EXPECT_EQ(clock_.now(), clock_.at(1000ms)) << "never past max_wait";
    EXPECT_EQ(clock_.pauses.back(), 100ms) << "the last pause is cut at the deadline";
    EXPECT_EQ(result.seq, static_cast<std::uint64_t>(capture_.syncs()) + 1)
        << "every sync's rect, after the start's frame";
}

TEST_F(SettleTest, InputCountsAsActivityToo) {
    // No damage, but input ended 200 ms ago: 100 ms more.
    capture_.sync(1s);
    clock_.sleep_for(10s);
    clock_.pauses.clear();
    last_activity_ = clock_.now() - 200ms;
    auto result = settle(300ms, 1000ms);
    EXPECT_TRUE(result.settled);
    ASSERT_EQ(clock_.pauses.size(), 1u);
    EXPECT_EQ(clock_.pauses[0], 100ms);
}

TEST_F(SettleTest, AStoppedCaptureIsAnError) {
    capture_.stop();
    EXPECT_THROW(settle(300ms, 1000ms), CaptureError);
}

}  // namespace
}  // namespace deskbox::capture
