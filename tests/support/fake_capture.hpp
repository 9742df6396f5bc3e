// A ScreenCapture without X, for code that only drives a capture (the agent's settle): sync and
// full_frame emit the rects queued with damage() to on_damage, in order, and return the last
// seq; each call is counted; a hook runs inside every sync (what the screen did meanwhile).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>

#include "guest-desktop/capture/screen_capture.hpp"

namespace deskbox::testing {

class FakeCapture final : public capture::ScreenCapture {
  public:
    FakeCapture(int width = 800, int height = 600) : width_(width), height_(height) {}

    void set_callbacks(capture::CaptureCallbacks callbacks) override {
        callbacks_ = std::move(callbacks);
    }
    void start() override {
        running_ = true;
        damage({0, 0, width_, height_});
    }
    void stop() override { running_ = false; }
    std::uint64_t sync(std::chrono::milliseconds) override {
        if (!running_) throw capture::CaptureError("the capture is not running");
        ++syncs_;
        if (on_sync) on_sync(syncs_);
        return flush();
    }
    std::uint64_t full_frame(std::chrono::milliseconds timeout) override {
        damage({0, 0, width_, height_});
        return sync(timeout);
    }
    void set_max_fps(int max_fps) override {
        if (max_fps < 1 || max_fps > 1000) throw capture::CaptureError("max_fps: 1..1000");
        max_fps_ = max_fps;
    }
    int width() const override { return width_; }
    int height() const override { return height_; }

    // A change the next sync emits.
    void damage(capture::Rect area) { pending_.push_back(area); }
    // Runs inside sync number n (1, 2, ...), before its rects are emitted.
    std::function<void(int n)> on_sync;
    int syncs() const { return syncs_; }
    int max_fps() const { return max_fps_; }

  private:
    std::uint64_t flush() {
        while (!pending_.empty()) {
            const auto area = pending_.front();
            pending_.pop_front();
            capture::DamageRect rect{++seq_, area.x, area.y, area.width, area.height, {}};
            rect.pixels.assign(static_cast<std::size_t>(area.width) * area.height * 4, '\0');
            if (callbacks_.on_damage) callbacks_.on_damage(std::move(rect));
        }
        return seq_;
    }

    int width_, height_;
    capture::CaptureCallbacks callbacks_;
    std::deque<capture::Rect> pending_;
    std::uint64_t seq_ = 0;
    int syncs_ = 0;
    int max_fps_ = 30;
    bool running_ = false;
};

}  // namespace deskbox::testing
