#include "streaming/frame_mirror.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "streaming/region.hpp"

namespace deskbox::streaming {
namespace {

constexpr int kMaxCursorSize = 1024;

// A recycled buffer is patched rect by rect (only exact merges, so no pixel is copied that did
// not change) unless that adds up to half the frame, when one whole-frame copy is cheaper.
constexpr std::size_t kCatchUpRects = 256;

// Copies `rect` of pixels into `frame`; source rows are `src_stride` apart (0: tightly packed).
void copy_rect(Frame& frame, const Rect& rect, const std::uint8_t* src,
               std::size_t src_stride = 0) {
    std::size_t row_bytes = static_cast<std::size_t>(rect.width) * kBytesPerPixel;
    if (src_stride == 0) src_stride = row_bytes;
    std::uint8_t* dst = frame.pixels.data() + static_cast<std::size_t>(rect.y) * frame.stride() +
                        static_cast<std::size_t>(rect.x) * kBytesPerPixel;
    if (rect.x == 0 && rect.width == frame.width && src_stride == row_bytes) {
        std::memcpy(dst, src, row_bytes * static_cast<std::size_t>(rect.height));
        return;
    }
    for (int row = 0; row < rect.height; ++row, dst += frame.stride(), src += src_stride)
        std::memcpy(dst, src, row_bytes);
}

}  // namespace

// Frame buffers of the current size, recycled when the last holder drops a replaced frame,
// so the writer patches a few rects of warm memory instead of copying a whole frame into a
// fresh 4-8 MB that still has to be faulted in.
class FrameMirror::FramePool : public std::enable_shared_from_this<FramePool> {
  public:
    // Enough for a few readers holding older frames while the writer moves on.
    static constexpr std::size_t kKeep = 4;

    FramePool() { free_.reserve(kKeep); }

    void set_size(int width, int height) {
        std::vector<std::unique_ptr<Frame>> dropped;
        std::lock_guard lock(mutex_);
        width_ = width;
        height_ = height;
        dropped.swap(free_);  // freed after the lock is released
        free_.reserve(kKeep);
    }

    // A frame of the current size. Its pixels show `version` (0 for a new, black frame) unless
    // `black`, which clears them.
    std::shared_ptr<Frame> acquire(bool black) {
        std::unique_ptr<Frame> frame;
        int width, height;
        {
            std::lock_guard lock(mutex_);
            width = width_;
            height = height_;
            // The most recent one needs the least catching up.
            auto newest = std::max_element(free_.begin(), free_.end(), [](auto& a, auto& b) {
                return a->version < b->version;
            });
            if (newest != free_.end()) {
                frame = std::move(*newest);
                free_.erase(newest);
            }
        }
        if (frame) {
            if (black) {
                std::fill(frame->pixels.begin(), frame->pixels.end(), std::uint8_t{0});
                frame->version = 0;
            }
        } else {
            frame = std::make_unique<Frame>();
            frame->width = width;
            frame->height = height;
            frame->pixels.resize(frame->stride() * static_cast<std::size_t>(height));
        }
        return std::shared_ptr<Frame>(frame.release(), Recycler{weak_from_this()});
    }

  private:
    struct Recycler {
        std::weak_ptr<FramePool> pool;
        void operator()(Frame* raw) const noexcept {
            std::unique_ptr<Frame> frame(raw);
            if (auto owner = pool.lock()) owner->give_back(frame);
        }
    };

    // Keeps `frame` if it fits; otherwise it is freed by the caller's unique_ptr.
    void give_back(std::unique_ptr<Frame>& frame) noexcept {
        std::lock_guard lock(mutex_);
        // free_ has kKeep reserved, so push_back cannot allocate (and throw) here.
        if (frame->width == width_ && frame->height == height_ && free_.size() < kKeep)
            free_.push_back(std::move(frame));
    }

    std::mutex mutex_;
    int width_ = 0;
    int height_ = 0;
    std::vector<std::unique_ptr<Frame>> free_;
};

struct FrameMirror::Listeners {
    std::mutex mutex;  // held while callbacks run, so removing one waits for it to finish
    std::uint64_t next_id = 1;
    std::map<std::uint64_t, std::function<void()>> callbacks;
};

FrameMirror::FrameMirror() : FrameMirror(Options{}) {}

FrameMirror::FrameMirror(Options options)
    : options_(options),
      pool_(std::make_shared<FramePool>()),
      listeners_(std::make_shared<Listeners>()) {
    if (options_.max_rects == 0) options_.max_rects = 1;
}

FrameMirror::~FrameMirror() = default;

void FrameMirror::reset(int width, int height, std::optional<std::uint64_t> seq) {
    if (width <= 0 || width > options_.max_dimension)
        throw ParameterError("width", "must be 1.." + std::to_string(options_.max_dimension) +
                                          ", got " + std::to_string(width));
    if (height <= 0 || height > options_.max_dimension)
        throw ParameterError("height", "must be 1.." + std::to_string(options_.max_dimension) +
                                           ", got " + std::to_string(height));
    {
        std::lock_guard writer(write_mutex_);
        pool_->set_size(width, height);
        std::shared_ptr<Frame> black = pool_->acquire(true);
        std::shared_ptr<Frame> old;  // released after the lock
        std::lock_guard lock(mutex_);
        old = std::exchange(current_, std::move(black));
        published_ = false;
        ++version_;
        ++generation_;
        reset_version_ = version_;
        current_->version = version_;
        history_.clear();
        if (seq) seq_ = *seq;
    }
    notify();
}

void FrameMirror::restart_seq() {
    std::lock_guard writer(write_mutex_);
    std::lock_guard lock(mutex_);
    seq_ = 0;
}

void FrameMirror::apply_damage(std::uint64_t seq, int x, int y, int width, int height,
                               std::span<const std::uint8_t> bgrx) {
    {
        std::lock_guard writer(write_mutex_);
        // current_ and seq_ change only under write_mutex_, which we hold: safe to read here.
        const Frame* frame = current_.get();
        if (!frame) throw ParameterError("screen", "damage before the screen size is known");
        if (seq < seq_)
            throw ParameterError(
                "seq", "went backwards: " + std::to_string(seq) + " after " + std::to_string(seq_));
        if (width <= 0)
            throw ParameterError("width", "must be positive, got " + std::to_string(width));
        if (height <= 0)
            throw ParameterError("height", "must be positive, got " + std::to_string(height));
        Rect rect{x, y, width, height};
        std::string where = "rect " + to_string(rect) + " leaves the " +
                            std::to_string(frame->width) + "x" + std::to_string(frame->height) +
                            " screen";
        if (x < 0 || static_cast<std::int64_t>(x) + width > frame->width)
            throw ParameterError("x", where);
        if (y < 0 || static_cast<std::int64_t>(y) + height > frame->height)
            throw ParameterError("y", where);
        std::size_t expected = static_cast<std::size_t>(rect.area()) * kBytesPerPixel;
        if (bgrx.size() != expected)
            throw ParameterError("body", "expected " + std::to_string(expected) + " bytes (" +
                                             std::to_string(width) + "x" + std::to_string(height) +
                                             " BGRX), got " + std::to_string(bgrx.size()));

        // While no reader holds the current frame, damage goes straight into it under the lock
        // (mirror_bench: a 1.4 MB rect holds it ~0.3 ms). Once a reader has it, it is never
        // written again: the damage goes into another buffer outside the lock, usually the
        // previous frame recycled, and the lock only swaps pointers. Doing that for every rect
        // (never in place) made snapshots O(1) even against a flat-out writer but doubled the
        // writer's copying: half the throughput and 5-20x the p99 apply time.
        bool in_place = false;
        {
            std::lock_guard lock(mutex_);
            if (!published_) {
                copy_rect(*current_, rect, bgrx.data());
                current_->version = version_ + 1;
                record_locked(seq, rect);
                in_place = true;
            }
        }
        if (!in_place) {
            std::shared_ptr<Frame> fresh = pool_->acquire(false);
            if (rect != Rect{0, 0, frame->width, frame->height}) catch_up(*fresh);
            copy_rect(*fresh, rect, bgrx.data());
            fresh->version = version_ + 1;
            std::shared_ptr<Frame> old;  // released (and maybe recycled) after the lock
            std::lock_guard lock(mutex_);
            old = std::exchange(current_, std::move(fresh));
            published_ = false;
            record_locked(seq, rect);
        }
    }
    notify();
}

void FrameMirror::catch_up(Frame& stale) const {
    // current_, version_ and history_ change only under write_mutex_, held by our caller, and
    // readers never write them or the frame.
    const Frame& now = *current_;
    FrameChanges missed = changes_locked(stale.version);
    if (!missed.full) missed.rects = simplify_region(std::move(missed.rects), kCatchUpRects);
    std::int64_t area = 0;
    for (const Rect& r : missed.rects) area += r.area();
    if (missed.full || area * 2 > static_cast<std::int64_t>(now.width) * now.height) {
        std::memcpy(stale.pixels.data(), now.pixels.data(), now.pixels.size());
    } else {
        for (const Rect& r : missed.rects)
            copy_rect(stale, r,
                      now.pixels.data() + static_cast<std::size_t>(r.y) * now.stride() +
                          static_cast<std::size_t>(r.x) * kBytesPerPixel,
                      now.stride());
    }
    stale.version = version_;
}

void FrameMirror::record_locked(std::uint64_t seq, const Rect& rect) {
    seq_ = seq;
    ++version_;
    history_.push_back({version_, rect});
    while (history_.size() > options_.history) history_.pop_front();
}

void FrameMirror::set_cursor_shape(int width, int height, int xhot, int yhot, std::uint64_t serial,
                                   std::span<const std::uint8_t> argb) {
    std::string range = "1.." + std::to_string(kMaxCursorSize);
    if (width <= 0 || width > kMaxCursorSize)
        throw ParameterError("width", "must be " + range + ", got " + std::to_string(width));
    if (height <= 0 || height > kMaxCursorSize)
        throw ParameterError("height", "must be " + range + ", got " + std::to_string(height));
    // X hands out hotspots on the far edge too (Firefox's blank 1x1 cursor has its hotspot
    // at 1,1): harmless, so it is moved onto the image instead of failing the agent channel.
    xhot = std::clamp(xhot, 0, width - 1);
    yhot = std::clamp(yhot, 0, height - 1);
    std::size_t expected = static_cast<std::size_t>(width) * height * 4;
    if (argb.size() != expected)
        throw ParameterError("body", "expected " + std::to_string(expected) + " bytes (" +
                                         std::to_string(width) + "x" + std::to_string(height) +
                                         " ARGB32), got " + std::to_string(argb.size()));
    auto shape = std::make_shared<CursorImage>();
    shape->width = width;
    shape->height = height;
    shape->xhot = xhot;
    shape->yhot = yhot;
    shape->serial = serial;
    shape->argb.resize(static_cast<std::size_t>(width) * height);
    std::memcpy(shape->argb.data(), argb.data(), expected);
    {
        std::lock_guard writer(write_mutex_);
        std::lock_guard lock(mutex_);
        cursor_.shape = std::move(shape);
        ++cursor_.version;
    }
    notify();
}

void FrameMirror::set_cursor_position(int x, int y) {
    {
        std::lock_guard writer(write_mutex_);
        // X never reports the pointer outside the screen; anything else is a broken guest.
        int width = current_ ? current_->width : 0;
        int height = current_ ? current_->height : 0;
        if (!current_)
            throw ParameterError("screen", "cursor position before the screen size is known");
        std::string screen = std::to_string(width) + "x" + std::to_string(height) + " screen";
        if (x < 0 || x >= width)
            throw ParameterError("x", std::to_string(x) + " is outside the " + screen);
        if (y < 0 || y >= height)
            throw ParameterError("y", std::to_string(y) + " is outside the " + screen);
        std::lock_guard lock(mutex_);
        if (cursor_.position_known && cursor_.x == x && cursor_.y == y) return;
        cursor_.x = x;
        cursor_.y = y;
        cursor_.position_known = true;
        ++cursor_.version;
    }
    notify();
}

void FrameMirror::close() {
    {
        std::lock_guard lock(mutex_);
        closed_ = true;
    }
    notify();
}

void FrameMirror::notify() {
    changed_.notify_all();
    std::lock_guard lock(listeners_->mutex);
    for (auto& [id, callback] : listeners_->callbacks) {
        // A throwing callback must not undo the writer's update, which is already applied.
        try {
            callback();
        } catch (...) {
        }
    }
}

FrameSnapshot FrameMirror::snapshot_locked() const {
    if (current_) published_ = true;
    return {current_, seq_, version_, generation_, cursor_};
}

FrameSnapshot FrameMirror::snapshot() const {
    std::lock_guard lock(mutex_);
    return snapshot_locked();
}

FrameChanges FrameMirror::changes_locked(std::uint64_t since) const {
    FrameChanges changes;
    changes.version = version_;
    if (!current_ || since == version_) return changes;
    bool known = since < version_ && since >= reset_version_ && !history_.empty() &&
                 history_.front().version <= since + 1;
    if (!known) {
        changes.full = true;
        changes.rects = {{0, 0, current_->width, current_->height}};
        return changes;
    }
    for (auto it = history_.rbegin(); it != history_.rend() && it->version > since; ++it)
        changes.rects.push_back(it->rect);
    return changes;
}

void FrameMirror::simplify(FrameChanges& changes) const {
    if (!changes.full)
        changes.rects = simplify_region(std::move(changes.rects), options_.max_rects);
}

FrameChanges FrameMirror::changes_since(std::uint64_t version) const {
    FrameChanges changes;
    {
        std::lock_guard lock(mutex_);
        changes = changes_locked(version);
    }
    simplify(changes);
    return changes;
}

FrameUpdate FrameMirror::update_since(std::uint64_t version) const {
    FrameUpdate update;
    {
        std::lock_guard lock(mutex_);
        update.snapshot = snapshot_locked();
        update.changes = changes_locked(version);
        update.closed = closed_;
    }
    simplify(update.changes);
    update.frame_changed = update.changes.full || !update.changes.rects.empty();
    return update;
}

bool FrameMirror::wait_for_seq(std::uint64_t seq, std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, timeout, [&] { return seq_ >= seq || closed_; });
    return seq_ >= seq;
}

bool FrameMirror::wait_for_change(std::uint64_t frame_version, std::uint64_t cursor_version,
                                  std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mutex_);
    auto changed = [&] {
        return (current_ && version_ != frame_version) || cursor_.version != cursor_version;
    };
    changed_.wait_for(lock, timeout, [&] { return changed() || closed_; });
    return changed();
}

std::uint64_t FrameMirror::seq() const {
    std::lock_guard lock(mutex_);
    return seq_;
}

std::uint64_t FrameMirror::version() const {
    std::lock_guard lock(mutex_);
    return version_;
}

bool FrameMirror::closed() const {
    std::lock_guard lock(mutex_);
    return closed_;
}

FrameMirror::Listener FrameMirror::listen(std::function<void()> on_change) const {
    std::lock_guard lock(listeners_->mutex);
    std::uint64_t id = listeners_->next_id++;
    listeners_->callbacks.emplace(id, std::move(on_change));
    return Listener(listeners_, id);
}

FrameMirror::Listener::~Listener() {
    reset();
}

FrameMirror::Listener::Listener(Listener&& other) noexcept
    : owner_(std::move(other.owner_)), id_(std::exchange(other.id_, 0)) {}

FrameMirror::Listener& FrameMirror::Listener::operator=(Listener&& other) noexcept {
    if (this != &other) {
        reset();
        owner_ = std::move(other.owner_);
        id_ = std::exchange(other.id_, 0);
    }
    return *this;
}

void FrameMirror::Listener::reset() {
    if (auto owner = owner_.lock()) {
        std::lock_guard lock(owner->mutex);
        owner->callbacks.erase(id_);
    }
    owner_.reset();
    id_ = 0;
}

FrameUpdate FrameSubscriber::take() {
    FrameUpdate update = mirror_->update_since(frame_version_);
    update.cursor_changed = update.snapshot.cursor.version != cursor_version_;
    frame_version_ = update.changes.version;
    cursor_version_ = update.snapshot.cursor.version;
    return update;
}

std::optional<FrameUpdate> FrameSubscriber::next(std::chrono::milliseconds timeout) {
    if (!mirror_->wait_for_change(frame_version_, cursor_version_, timeout) && !mirror_->closed())
        return std::nullopt;
    return take();
}

FrameUpdate FrameSubscriber::poll() {
    return take();
}

}  // namespace deskbox::streaming
