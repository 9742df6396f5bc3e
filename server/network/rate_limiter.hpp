// A token bucket shared by all of one sandbox's outgoing flows (limits.egress_kbps): up to one
// second of bytes may go at once, then the rate holds.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace deskbox::network {

class RateLimiter {
  public:
    using Clock = std::chrono::steady_clock;
    // 0: no limit (take() grants everything), until set_rate() sets one.
    explicit RateLimiter(std::uint64_t bytes_per_second = 0) { set_rate(bytes_per_second); }

    // A new rate for every flow holding this limiter, at once (a live policy change).
    void set_rate(std::uint64_t bytes_per_second) {
        std::lock_guard lock(mutex_);
        refill_locked();
        rate_ = bytes_per_second;
        capacity_ = bytes_per_second ? std::max<std::uint64_t>(bytes_per_second, 16 * 1024) : 0;
        tokens_ = std::min(tokens_, static_cast<double>(capacity_));
        if (!started_) tokens_ = static_cast<double>(capacity_);
        started_ = true;
    }
    // Takes up to `want` bytes of budget now; 0 when the bucket is empty.
    std::uint64_t take(std::uint64_t want) {
        std::lock_guard lock(mutex_);
        if (rate_ == 0) return want;
        refill_locked();
        auto granted = std::min<std::uint64_t>(want, static_cast<std::uint64_t>(tokens_));
        tokens_ -= static_cast<double>(granted);
        return granted;
    }
    // Gives back what was taken but not used.
    void refund(std::uint64_t bytes) {
        std::lock_guard lock(mutex_);
        tokens_ = std::min(static_cast<double>(capacity_), tokens_ + static_cast<double>(bytes));
    }
    // How long until `bytes` of budget are there (at least a millisecond).
    std::chrono::milliseconds wait_for(std::uint64_t bytes) {
        std::lock_guard lock(mutex_);
        if (rate_ == 0) return std::chrono::milliseconds(1);
        refill_locked();
        double missing = static_cast<double>(std::min(bytes, capacity_)) - tokens_;
        auto ms = static_cast<long long>(missing * 1000.0 / static_cast<double>(rate_));
        return std::chrono::milliseconds(std::clamp<long long>(ms, 1, 1000));
    }
    std::uint64_t rate() const {
        std::lock_guard lock(mutex_);
        return rate_;
    }

  private:
    void refill_locked() {
        auto now = Clock::now();
        double seconds = std::chrono::duration<double>(now - last_).count();
        last_ = now;
        tokens_ = std::min(static_cast<double>(capacity_),
                           tokens_ + seconds * static_cast<double>(rate_));
    }

    mutable std::mutex mutex_;
    std::uint64_t rate_ = 0, capacity_ = 0;
    double tokens_ = 0;
    bool started_ = false;
    Clock::time_point last_ = Clock::now();
};

}  // namespace deskbox::network
