// Prometheus metrics of deskboxd: latency histograms and error counters, rendered as text.
#pragma once

#include <array>
#include <chrono>
#include <map>
#include <mutex>
#include <string>

namespace deskbox::server {

class Histogram {
  public:
    // Seconds; buckets fit latencies from sub-millisecond actions to multi-second creates.
    static constexpr std::array<double, 14> kBuckets = {
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0};
    void observe(double seconds);
    std::string render(const std::string& name, const std::string& help) const;

  private:
    mutable std::mutex mutex_;
    std::array<std::uint64_t, kBuckets.size()> counts_{};
    std::uint64_t total_ = 0;
    double sum_ = 0;
};

class Metrics {
  public:
    Histogram create_seconds, screenshot_seconds, action_seconds, command_seconds;
    // `operation`: "create" or "command" when the error answered one (product error rates by
    // cause, next to create_seconds' and command_seconds' counts); empty for the rest.
    void count_error(const std::string& code, const std::string& operation = {});
    // A failure of an operation that answered 200 (a command that timed out or exited non-zero).
    void count_operation_error(const std::string& operation, const std::string& cause);
    void count_request();
    std::string render_counters() const;

  private:
    mutable std::mutex mutex_;
    std::map<std::string, std::uint64_t> errors_;
    std::map<std::pair<std::string, std::string>, std::uint64_t> operation_errors_;
    std::uint64_t requests_ = 0;
};

// Times a scope into a histogram.
class ScopedTimer {
  public:
    explicit ScopedTimer(Histogram& h) : h_(h), start_(std::chrono::steady_clock::now()) {}
    ~ScopedTimer() {
        h_.observe(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
    ScopedTimer(const ScopedTimer&) = delete;
    ScopedTimer& operator=(const ScopedTimer&) = delete;

  private:
    Histogram& h_;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace deskbox::server
