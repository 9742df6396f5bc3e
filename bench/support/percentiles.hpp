// Percentiles of benchmark samples (nearest rank) and elapsed time, shared by the benchmarks.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace deskbox::bench {

struct Percentiles {
    double p50 = 0, p95 = 0, p99 = 0;
};

inline double percentile(std::vector<double> samples, double q) {
    if (samples.empty()) return 0;
    std::sort(samples.begin(), samples.end());
    auto i = static_cast<std::size_t>(q * static_cast<double>(samples.size() - 1) + 0.5);
    return samples[std::min(i, samples.size() - 1)];
}

// Milliseconds since `t0` on the steady clock.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

inline Percentiles percentiles(const std::vector<double>& samples) {
    return {percentile(samples, 0.50), percentile(samples, 0.95), percentile(samples, 0.99)};
}

}  // namespace deskbox::bench
