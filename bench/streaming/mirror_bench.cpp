// Frame mirror under load: one writer applying damage flat out while readers take snapshots at
// 30 Hz and hold each frame for 10 ms (an encoder at work). Ours: copy-on-write snapshots.
// Alternative: the obvious design, one buffer and a mutex, readers copying the frame under it.
//
// Usage: mirror_bench [--seconds S]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <opencv2/core.hpp>

#include "bench/streaming/busy_screen.hpp"
#include "bench/support/load_average.hpp"
#include "streaming/frame_mirror.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using deskbox::streaming::FrameMirror;
using deskbox::streaming::Rect;

struct Damage {
    Rect rect;
    std::vector<std::uint8_t> pixels;
};

// Mostly text-sized updates, some tiles, a few window-sized repaints.
std::vector<Damage> make_damage(const cv::Mat& screen, int count) {
    std::mt19937 rng(4);
    std::vector<Damage> out;
    for (int i = 0; i < count; ++i) {
        int kind = static_cast<int>(rng() % 100);
        int w = kind < 70 ? 200 : kind < 95 ? 64 : 700;
        int h = kind < 70 ? 20 : kind < 95 ? 64 : 500;
        Rect r{static_cast<int>(rng() % static_cast<unsigned>(screen.cols - w)),
               static_cast<int>(rng() % static_cast<unsigned>(screen.rows - h)), w, h};
        Damage d{r, std::vector<std::uint8_t>(static_cast<std::size_t>(w) * h * 4)};
        for (int y = 0; y < h; ++y)
            std::memcpy(d.pixels.data() + static_cast<std::size_t>(y) * w * 4,
                        screen.ptr(r.y + y) + static_cast<std::size_t>(r.x) * 4,
                        static_cast<std::size_t>(w) * 4);
        out.push_back(std::move(d));
    }
    return out;
}

// The alternative: a single buffer; readers copy it out under the writer's mutex.
class LockedMirror {
  public:
    LockedMirror(int width, int height)
        : width_(width), pixels_(static_cast<std::size_t>(width) * height * 4) {}
    void apply(const Damage& d) {
        std::lock_guard lock(mutex_);
        std::size_t row = static_cast<std::size_t>(d.rect.width) * 4;
        for (int y = 0; y < d.rect.height; ++y)
            std::memcpy(
                pixels_.data() + (static_cast<std::size_t>(d.rect.y + y) * width_ + d.rect.x) * 4,
                d.pixels.data() + y * row, row);
    }
    void snapshot(std::vector<std::uint8_t>& out) {
        std::lock_guard lock(mutex_);
        out = pixels_;  // reuses out's capacity after the first call
    }

  private:
    std::mutex mutex_;
    int width_;
    std::vector<std::uint8_t> pixels_;
};

struct Result {
    double apply_p50 = 0, apply_p99 = 0, apply_max = 0, applies_per_s = 0;
    double snap_p50 = 0, snap_p99 = 0;
    long snapshots = 0;
};

double percentile(std::vector<double>& v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

template <class Apply, class Snapshot>
Result run(int readers, std::chrono::milliseconds duration, const std::vector<Damage>& damage,
           Apply apply, Snapshot snapshot_and_hold) {
    std::atomic<bool> stop{false};
    std::vector<std::vector<double>> snap_us(static_cast<std::size_t>(readers));
    std::vector<std::thread> threads;
    for (int r = 0; r < readers; ++r) {
        threads.emplace_back([&, r] {
            auto next = Clock::now();
            while (!stop.load()) {
                double us = snapshot_and_hold();
                snap_us[static_cast<std::size_t>(r)].push_back(us);
                next += 33ms;
                std::this_thread::sleep_until(next);
            }
        });
    }
    std::vector<double> apply_us;
    auto start = Clock::now();
    std::size_t i = 0;
    while (Clock::now() - start < duration) {
        auto t0 = Clock::now();
        apply(i + 1, damage[i % damage.size()]);
        apply_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        ++i;
    }
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    stop = true;
    for (auto& t : threads) t.join();
    Result result;
    result.applies_per_s = static_cast<double>(apply_us.size()) / seconds;
    result.apply_p50 = percentile(apply_us, 0.50);
    result.apply_p99 = percentile(apply_us, 0.99);
    result.apply_max = apply_us.empty() ? 0 : apply_us.back();
    std::vector<double> all;
    for (auto& v : snap_us) all.insert(all.end(), v.begin(), v.end());
    result.snapshots = static_cast<long>(all.size());
    result.snap_p50 = percentile(all, 0.50);
    result.snap_p99 = percentile(all, 0.99);
    return result;
}

void print(const char* name, const Result& r) {
    std::printf("  %-32s %8.1f %8.1f %9.1f %10.0f %10.1f %9.1f %6ld\n", name, r.apply_p50,
                r.apply_p99, r.apply_max, r.applies_per_s, r.snap_p50, r.snap_p99, r.snapshots);
}

void bench(int width, int height, int readers, std::chrono::milliseconds duration) {
    cv::Mat screen = deskbox::bench::make_busy_screen(width, height);
    std::vector<Damage> damage = make_damage(screen, 2000);

    FrameMirror mirror;
    mirror.reset(width, height);
    Result ours = run(
        readers, duration, damage,
        [&](std::size_t seq, const Damage& d) {
            mirror.apply_damage(seq, d.rect.x, d.rect.y, d.rect.width, d.rect.height,
                                std::span<const std::uint8_t>(d.pixels));
        },
        [&] {
            auto t0 = Clock::now();
            auto snap = mirror.snapshot();
            double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
            std::this_thread::sleep_for(10ms);  // the encoder holds the frame
            return us;
        });

    LockedMirror locked(width, height);
    Result alternative = run(
        readers, duration, damage, [&](std::size_t, const Damage& d) { locked.apply(d); },
        [&] {
            thread_local std::vector<std::uint8_t> mine;
            auto t0 = Clock::now();
            locked.snapshot(mine);
            double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
            std::this_thread::sleep_for(10ms);
            return us;
        });

    std::printf("\n%dx%d, %d reader%s at 30 Hz, writer flat out for %.1f s\n", width, height,
                readers, readers == 1 ? "" : "s", static_cast<double>(duration.count()) / 1000);
    std::printf("  %-32s %8s %8s %9s %10s %10s %9s %6s\n", "", "apply", "apply", "apply",
                "applies/s", "snapshot", "snapshot", "snaps");
    std::printf("  %-32s %8s %8s %9s %10s %10s %9s %6s\n", "", "p50 us", "p99 us", "max us", "",
                "p50 us", "p99 us", "");
    print("ours (copy-on-write)", ours);
    print("alternative (copy under mutex)", alternative);
    std::printf("  ratio alternative/ours: apply p99 %.2fx, snapshot p50 %.0fx, throughput %.2fx\n",
                alternative.apply_p99 / ours.apply_p99,
                alternative.snap_p50 / std::max(0.01, ours.snap_p50),
                ours.applies_per_s / alternative.applies_per_s);
}

// The 1-minute load average: figures taken on a busy machine are slower, not wrong.
using deskbox::bench::load_average;

}  // namespace

int main(int argc, char** argv) {
    double seconds = 2;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--seconds" && i + 1 < argc)
            seconds = std::max(0.1, std::atof(argv[++i]));
        else {
            std::fprintf(stderr, "usage: %s [--seconds S]\n", argv[0]);
            return 2;
        }
    }
    auto duration = std::chrono::milliseconds(static_cast<long>(seconds * 1000));
    std::printf("mirror_bench: damage apply vs concurrent snapshots, %u cores, load average %s\n",
                std::max(1u, std::thread::hardware_concurrency()), load_average().c_str());
    for (int readers : {1, 4}) {
        bench(1280, 800, readers, duration);
        bench(1920, 1080, readers, duration);
    }
    return 0;
}
