// The host's copy of one sandbox's screen, built from the agent's `damage`, `cursor.shape` and
// `cursor.position` events. Screenshots, VNC, WebSocket viewers and recordings all read it.
//
// Concurrency: one writer (the agent channel; writer calls are serialised anyway) and any number
// of readers. Frames handed to readers are immutable and shared: a snapshot is a pointer copy
// under the lock, and a reader may keep a frame as long as it likes (e.g. while encoding it)
// without blocking anyone. A frame a reader has is never written again. While no reader holds
// the current frame, damage is copied straight into it under the lock; once one does, the next
// damage goes to another buffer outside the lock and the lock only swaps pointers. That buffer
// is usually the previous frame, recycled once its last reader dropped it, brought up to date by
// copying only the rects damaged since (the damage history says which); a new buffer gets one
// whole-frame copy. So the writer copies at most one extra frame's worth per snapshot taken, and
// readers never copy. bench/streaming/mirror_bench compares this with copying the frame out
// under a mutex.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "streaming/types.hpp"

namespace deskbox::streaming {

// One immutable screen image: BGRX, rows tightly packed.
struct Frame {
    int width = 0;
    int height = 0;
    std::uint64_t version = 0;  // the mirror version these pixels show
    std::vector<std::uint8_t> pixels;

    std::size_t stride() const { return static_cast<std::size_t>(width) * kBytesPerPixel; }
    ImageView view() const { return {pixels.data(), width, height, stride()}; }
};

struct FrameSnapshot {
    std::shared_ptr<const Frame> frame;  // null until reset() gave the screen a size
    std::uint64_t seq = 0;               // the agent's damage seq applied last
    std::uint64_t version = 0;           // frame number: bumps on every apply_damage and reset
    std::uint64_t generation = 0;        // bumps on every reset (the frame size may have changed)
    CursorState cursor;

    int width() const { return frame ? frame->width : 0; }
    int height() const { return frame ? frame->height : 0; }
};

// What changed between two frame versions.
struct FrameChanges {
    std::uint64_t version = 0;  // the version the changes lead to
    bool full = false;          // everything: first look, a reset, or history no longer kept
    std::vector<Rect> rects;    // covers every changed pixel (the whole frame when full)
};

// A snapshot plus what changed since the reader's previous one.
struct FrameUpdate {
    FrameSnapshot snapshot;
    FrameChanges changes;
    bool frame_changed = false;
    bool cursor_changed = false;
    bool closed = false;  // the mirror was closed; nothing more will come
};

class FrameMirror {
  public:
    struct Options {
        std::size_t history = 1024;  // damage rects remembered for changes_since()
        std::size_t max_rects = 32;  // changes are simplified to at most this many rects
        int max_dimension = 16384;   // reset() refuses larger screens
    };

    FrameMirror();
    explicit FrameMirror(Options options);
    ~FrameMirror();
    FrameMirror(const FrameMirror&) = delete;
    FrameMirror& operator=(const FrameMirror&) = delete;

    // ---- writer (the agent channel) ----
    // A new screen size: the frame becomes black. `seq` restarts the damage sequence (pass 0
    // for a new agent connection); nullopt keeps it (a resize within one session).
    void reset(int width, int height, std::optional<std::uint64_t> seq = std::nullopt);
    // A new agent session on the same screen (a VM restored from a snapshot): its seq may
    // start over; the pixels stay until its first full frame replaces them.
    void restart_seq();
    // Copies a damage event's pixels (BGRX, rows tightly packed) into the frame. Throws
    // ParameterError (frame unchanged) if the rect leaves the screen, the body has the wrong
    // size, seq went backwards or there is no screen yet: it comes from an untrusted guest.
    void apply_damage(std::uint64_t seq, int x, int y, int width, int height,
                      std::span<const std::uint8_t> bgrx);
    void apply_damage(std::uint64_t seq, int x, int y, int width, int height,
                      std::string_view bgrx) {
        apply_damage(seq, x, y, width, height,
                     std::span(reinterpret_cast<const std::uint8_t*>(bgrx.data()), bgrx.size()));
    }
    // A cursor.shape event: premultiplied ARGB32, native byte order, width*height*4 bytes. A
    // hotspot off the image is moved onto it; bad sizes throw ParameterError.
    void set_cursor_shape(int width, int height, int xhot, int yhot, std::uint64_t serial,
                          std::span<const std::uint8_t> argb);
    void set_cursor_position(int x, int y);
    // The sandbox is gone: wakes every waiter; later waits return at once.
    void close();

    // ---- readers ----
    FrameSnapshot snapshot() const;
    // Changes after frame `version` up to now (full if that version is unknown or too old).
    FrameChanges changes_since(std::uint64_t version) const;
    // The snapshot and the changes since `version`, taken together (version 0: everything).
    FrameUpdate update_since(std::uint64_t version) const;
    // True once a damage event with seq >= `seq` was applied; false on timeout or close.
    bool wait_for_seq(std::uint64_t seq, std::chrono::milliseconds timeout) const;
    // True once the frame version passed `frame_version` or the cursor version passed
    // `cursor_version`; false on timeout or close.
    bool wait_for_change(std::uint64_t frame_version, std::uint64_t cursor_version,
                         std::chrono::milliseconds timeout) const;

    std::uint64_t seq() const;
    std::uint64_t version() const;
    bool closed() const;

    // Calls `on_change` after every change (damage, reset, cursor, close) until the returned
    // Listener is destroyed. It runs on the writer's thread after the mirror's lock is released,
    // so it must be quick (post to an executor); it may read the mirror but must not destroy
    // its own Listener or call listen().
    class Listener;
    [[nodiscard]] Listener listen(std::function<void()> on_change) const;

  private:
    struct Listeners;
    class FramePool;

    // Under mutex_: the raw rects changed after `since` (not yet simplified).
    FrameChanges changes_locked(std::uint64_t since) const;
    void simplify(FrameChanges& changes) const;
    // Writer only: makes `stale` (a recycled or new buffer) show the current frame.
    void catch_up(Frame& stale) const;
    void record_locked(std::uint64_t seq, const Rect& rect);
    FrameSnapshot snapshot_locked() const;
    void notify();

    Options options_;
    std::mutex write_mutex_;  // serialises writers, so the frame can be read outside mutex_
    mutable std::mutex mutex_;
    mutable std::condition_variable changed_;
    std::shared_ptr<Frame> current_;
    mutable bool published_ = false;  // a reader took current_: never write it again
    std::uint64_t seq_ = 0;
    std::uint64_t version_ = 0;
    std::uint64_t generation_ = 0;
    std::uint64_t reset_version_ = 0;  // version_ right after the last reset
    struct DamageRecord {
        std::uint64_t version;
        Rect rect;
    };
    std::deque<DamageRecord> history_;
    CursorState cursor_;
    bool closed_ = false;
    std::shared_ptr<FramePool> pool_;
    std::shared_ptr<Listeners> listeners_;
};

class FrameMirror::Listener {
  public:
    Listener() = default;
    ~Listener();
    Listener(Listener&& other) noexcept;
    Listener& operator=(Listener&& other) noexcept;
    Listener(const Listener&) = delete;
    Listener& operator=(const Listener&) = delete;
    void reset();  // stops the callbacks; waits for one that is running

  private:
    friend class FrameMirror;
    Listener(std::weak_ptr<Listeners> owner, std::uint64_t id)
        : owner_(std::move(owner)), id_(id) {}
    std::weak_ptr<Listeners> owner_;
    std::uint64_t id_ = 0;
};

// One reader's position in the mirror, for live encoders: each call returns the latest frame and
// everything that changed since this subscriber's previous update (latest wins; a slow reader
// sees the union of the changes it missed, never a queue). The first update is full.
class FrameSubscriber {
  public:
    explicit FrameSubscriber(const FrameMirror& mirror) : mirror_(&mirror) {}

    // Waits up to `timeout` for a frame or cursor change; nullopt on timeout. After close()
    // it returns at once with `closed` set.
    std::optional<FrameUpdate> next(std::chrono::milliseconds timeout);
    // The latest state now, changed or not.
    FrameUpdate poll();

  private:
    FrameUpdate take();
    const FrameMirror* mirror_;
    std::uint64_t frame_version_ = 0;  // 0: nothing seen yet (a frame's version is >= 1)
    std::uint64_t cursor_version_ = 0;
};

}  // namespace deskbox::streaming
