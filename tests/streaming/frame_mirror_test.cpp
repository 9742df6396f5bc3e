#include "streaming/frame_mirror.hpp"

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace deskbox::streaming {
namespace {

using namespace std::chrono_literals;

// A damage event as the agent would send it: pixels for the rect, tightly packed.
struct Damage {
    Rect rect;
    std::vector<std::uint8_t> pixels;
};

Damage random_damage(std::mt19937& rng, int screen_width, int screen_height) {
    std::uniform_int_distribution<int> xs(0, screen_width - 1), ys(0, screen_height - 1);
    Damage d;
    d.rect.x = xs(rng);
    d.rect.y = ys(rng);
    d.rect.width = std::uniform_int_distribution<int>(1, screen_width - d.rect.x)(rng);
    d.rect.height = std::uniform_int_distribution<int>(1, screen_height - d.rect.y)(rng);
    d.pixels.resize(static_cast<std::size_t>(d.rect.area()) * 4);
    for (auto& b : d.pixels) b = static_cast<std::uint8_t>(rng());
    return d;
}

// What the frame must look like: the same damage applied with the simplest possible loop.
struct Reference {
    int width, height;
    std::vector<std::uint8_t> pixels;
    Reference(int w, int h) : width(w), height(h), pixels(static_cast<std::size_t>(w) * h * 4, 0) {}
    void apply(const Damage& d) {
        for (int y = 0; y < d.rect.height; ++y)
            for (int x = 0; x < d.rect.width; ++x)
                for (int c = 0; c < 4; ++c)
                    pixels[((static_cast<std::size_t>(d.rect.y) + y) * width + d.rect.x + x) * 4 +
                           c] = d.pixels[(static_cast<std::size_t>(y) * d.rect.width + x) * 4 + c];
    }
};

void apply(FrameMirror& mirror, std::uint64_t seq, const Damage& d) {
    mirror.apply_damage(seq, d.rect.x, d.rect.y, d.rect.width, d.rect.height,
                        std::span<const std::uint8_t>(d.pixels));
}

// Pixels covered by any of `rects` on a width x height screen.
std::vector<bool> mask_of(const std::vector<Rect>& rects, int width, int height) {
    std::vector<bool> mask(static_cast<std::size_t>(width) * height, false);
    for (const Rect& r : rects)
        for (int y = r.y; y < r.bottom(); ++y)
            for (int x = r.x; x < r.right(); ++x)
                mask[static_cast<std::size_t>(y) * width + x] = true;
    return mask;
}

TEST(FrameMirror, StartsWithoutAFrameAndResetGivesABlackOne) {
    FrameMirror mirror;
    EXPECT_EQ(mirror.snapshot().frame, nullptr);
    mirror.reset(64, 48);
    FrameSnapshot snap = mirror.snapshot();
    ASSERT_NE(snap.frame, nullptr);
    EXPECT_EQ(snap.width(), 64);
    EXPECT_EQ(snap.height(), 48);
    EXPECT_EQ(snap.frame->pixels, std::vector<std::uint8_t>(64 * 48 * 4, 0));
    EXPECT_EQ(snap.generation, 1u);
}

TEST(FrameMirror, AppliesRandomRectsExactly) {
    std::mt19937 rng(42);
    FrameMirror mirror;
    mirror.reset(200, 150);
    Reference ref(200, 150);
    for (std::uint64_t seq = 1; seq <= 300; ++seq) {
        Damage d = random_damage(rng, 200, 150);
        apply(mirror, seq, d);
        ref.apply(d);
        // Snapshots in between force the copy-on-write path as well as the in-place one.
        if (seq % 3 == 0) {
            FrameSnapshot snap = mirror.snapshot();
            ASSERT_EQ(snap.frame->pixels, ref.pixels) << "after seq " << seq;
            EXPECT_EQ(snap.seq, seq);
        }
    }
    FrameSnapshot snap = mirror.snapshot();
    EXPECT_EQ(snap.frame->pixels, ref.pixels);
    EXPECT_EQ(snap.seq, 300u);
    EXPECT_EQ(snap.version, 301u);  // one reset + 300 damage events
}

TEST(FrameMirror, SmallDamageWhileReadersHoldFramesStaysExact) {
    // Snapshots held across damage force the writer onto recycled buffers that it patches with
    // only the rects they missed; every frame must still equal the reference.
    std::mt19937 rng(8);
    FrameMirror mirror;
    mirror.reset(200, 150);
    Reference ref(200, 150);
    std::vector<FrameSnapshot> held;
    for (std::uint64_t seq = 1; seq <= 400; ++seq) {
        Damage d = random_damage(rng, 200, 150);
        d.rect.width = std::min(d.rect.width, 12);
        d.rect.height = std::min(d.rect.height, 10);
        d.pixels.resize(static_cast<std::size_t>(d.rect.area()) * 4);
        apply(mirror, seq, d);
        ref.apply(d);
        if (seq % 2 == 0) held.push_back(mirror.snapshot());
        if (held.size() > 3) held.erase(held.begin());  // readers let go, buffers recycle
        if (seq % 5 == 0) {
            FrameSnapshot snap = mirror.snapshot();
            ASSERT_EQ(snap.frame->pixels, ref.pixels) << "after seq " << seq;
            EXPECT_EQ(snap.frame->version, snap.version);
        }
    }
    for (const FrameSnapshot& old : held) EXPECT_LE(old.version, mirror.version());
}

TEST(FrameMirror, FullScreenDamageReplacesEverything) {
    std::mt19937 rng(7);
    FrameMirror mirror;
    mirror.reset(32, 16);
    FrameSnapshot before = mirror.snapshot();  // published: the next damage takes a new buffer
    Damage d{{0, 0, 32, 16}, std::vector<std::uint8_t>(32 * 16 * 4)};
    for (auto& b : d.pixels) b = static_cast<std::uint8_t>(rng());
    apply(mirror, 1, d);
    EXPECT_EQ(mirror.snapshot().frame->pixels, d.pixels);
    EXPECT_EQ(before.frame->pixels, std::vector<std::uint8_t>(32 * 16 * 4, 0));
}

TEST(FrameMirror, SnapshotsAreImmutable) {
    FrameMirror mirror;
    mirror.reset(16, 16);
    std::vector<std::uint8_t> white(4 * 4 * 4, 0xff);
    mirror.apply_damage(1, 0, 0, 4, 4, std::span<const std::uint8_t>(white));
    FrameSnapshot first = mirror.snapshot();
    std::vector<std::uint8_t> copy = first.frame->pixels;
    std::vector<std::uint8_t> grey(8 * 8 * 4, 0x80);
    mirror.apply_damage(2, 2, 2, 8, 8, std::span<const std::uint8_t>(grey));
    EXPECT_EQ(first.frame->pixels, copy);
    EXPECT_EQ(first.seq, 1u);
    FrameSnapshot second = mirror.snapshot();
    EXPECT_NE(second.frame->pixels, copy);
    EXPECT_EQ(second.frame->pixels[(2 * 16 + 2) * 4], 0x80);
    EXPECT_EQ(second.frame->pixels[0], 0xff);
}

TEST(FrameMirror, RejectsBadDamageAndLeavesTheFrameUnchanged) {
    std::mt19937 rng(1);
    FrameMirror mirror;
    mirror.reset(100, 80);
    apply(mirror, 5, random_damage(rng, 100, 80));
    FrameSnapshot before = mirror.snapshot();
    std::vector<std::uint8_t> pixels_before = before.frame->pixels;

    struct Case {
        std::uint64_t seq;
        int x, y, w, h;
        std::size_t body;
        const char* field;
    };
    const Case cases[] = {
        {6, -1, 0, 10, 10, 400, "x"},         {6, 0, -1, 10, 10, 400, "y"},
        {6, 91, 0, 10, 10, 400, "x"},          // one column past the right edge
        {6, 0, 71, 10, 10, 400, "y"},          // one row past the bottom
        {6, 2147483600, 0, 100, 1, 400, "x"},  // x + width overflows int
        {6, 0, 0, 0, 10, 0, "width"},         {6, 0, 0, 10, -3, 0, "height"},
        {6, 0, 0, 10, 10, 399, "body"},       {6, 0, 0, 10, 10, 401, "body"},
        {4, 0, 0, 10, 10, 400, "seq"},  // seq went backwards
    };
    for (const Case& c : cases) {
        std::vector<std::uint8_t> body(c.body, 0x55);
        try {
            mirror.apply_damage(c.seq, c.x, c.y, c.w, c.h, std::span<const std::uint8_t>(body));
            ADD_FAILURE() << "accepted x=" << c.x << " y=" << c.y << " " << c.w << "x" << c.h;
        } catch (const ParameterError& e) {
            EXPECT_EQ(e.field(), c.field) << e.what();
            EXPECT_NE(std::string(e.what()).find(c.field), std::string::npos);
        }
    }
    FrameSnapshot after = mirror.snapshot();
    EXPECT_EQ(after.frame->pixels, pixels_before);
    EXPECT_EQ(after.seq, 5u);
    EXPECT_EQ(after.version, before.version);
    EXPECT_TRUE(mirror.changes_since(before.version).rects.empty());
}

TEST(FrameMirror, RejectsDamageBeforeTheScreenSizeIsKnown) {
    FrameMirror mirror;
    std::vector<std::uint8_t> body(4, 0);
    try {
        mirror.apply_damage(1, 0, 0, 1, 1, std::span<const std::uint8_t>(body));
        FAIL() << "accepted damage without a screen";
    } catch (const ParameterError& e) {
        EXPECT_EQ(e.field(), "screen");
    }
    EXPECT_THROW(mirror.reset(0, 10), ParameterError);
    EXPECT_THROW(mirror.reset(10, 100000), ParameterError);
}

TEST(FrameMirror, AcceptsTheSameSeqTwice) {
    // One capture may be sent as several rects under one seq.
    FrameMirror mirror;
    mirror.reset(8, 8);
    std::vector<std::uint8_t> body(4, 1);
    mirror.apply_damage(3, 0, 0, 1, 1, std::span<const std::uint8_t>(body));
    mirror.apply_damage(3, 1, 0, 1, 1, std::span<const std::uint8_t>(body));
    EXPECT_EQ(mirror.seq(), 3u);
}

TEST(FrameMirror, WaitForSeqWakesOnApply) {
    FrameMirror mirror;
    mirror.reset(8, 8);
    std::thread writer([&] {
        std::this_thread::sleep_for(50ms);
        std::vector<std::uint8_t> body(4, 9);
        for (std::uint64_t seq = 1; seq <= 5; ++seq)
            mirror.apply_damage(seq, 0, 0, 1, 1, std::span<const std::uint8_t>(body));
    });
    bool reached = mirror.wait_for_seq(5, 30s);
    writer.join();
    EXPECT_TRUE(reached);
    EXPECT_GE(mirror.seq(), 5u);
}

TEST(FrameMirror, WaitForSeqTimesOutAndCloseWakes) {
    FrameMirror mirror;
    mirror.reset(8, 8);
    EXPECT_TRUE(mirror.wait_for_seq(0, 0ms));  // nothing to wait for
    EXPECT_FALSE(mirror.wait_for_seq(1, 20ms));
    std::thread closer([&] {
        std::this_thread::sleep_for(30ms);
        mirror.close();
    });
    EXPECT_FALSE(mirror.wait_for_seq(1, 30s));  // woken by close, not satisfied
    closer.join();
    EXPECT_TRUE(mirror.closed());
}

TEST(FrameMirror, ResetKeepsOrRestartsSeq) {
    FrameMirror mirror;
    mirror.reset(8, 8);
    std::vector<std::uint8_t> body(4, 1);
    mirror.apply_damage(10, 0, 0, 1, 1, std::span<const std::uint8_t>(body));
    mirror.reset(16, 8);  // resize within a session
    EXPECT_EQ(mirror.seq(), 10u);
    EXPECT_THROW(mirror.apply_damage(9, 0, 0, 1, 1, std::span<const std::uint8_t>(body)),
                 ParameterError);
    mirror.reset(16, 8, 0);  // a new agent connection
    EXPECT_EQ(mirror.seq(), 0u);
    mirror.apply_damage(1, 15, 0, 1, 1, std::span<const std::uint8_t>(body));
    FrameSnapshot snap = mirror.snapshot();
    EXPECT_EQ(snap.width(), 16);
    EXPECT_EQ(snap.generation, 3u);
    EXPECT_EQ(snap.frame->pixels[15 * 4], 1);
    EXPECT_EQ(snap.frame->pixels[0], 0);  // cleared by the reset
}

TEST(FrameMirror, ChangesSinceCoverExactlyTheDamagedRects) {
    std::mt19937 rng(3);
    FrameMirror mirror;
    mirror.reset(120, 90);
    std::uint64_t start = mirror.version();
    EXPECT_TRUE(mirror.changes_since(start).rects.empty());
    EXPECT_FALSE(mirror.changes_since(start).full);

    std::vector<Rect> damaged;
    for (std::uint64_t seq = 1; seq <= 6; ++seq) {
        Damage d = random_damage(rng, 120, 90);
        d.rect.width = std::min(d.rect.width, 30);
        d.rect.height = std::min(d.rect.height, 20);
        d.pixels.resize(static_cast<std::size_t>(d.rect.area()) * 4);
        apply(mirror, seq, d);
        damaged.push_back(d.rect);
    }
    FrameChanges changes = mirror.changes_since(start);
    EXPECT_FALSE(changes.full);
    EXPECT_EQ(changes.version, mirror.version());
    EXPECT_LE(changes.rects.size(), 6u);
    EXPECT_EQ(mask_of(changes.rects, 120, 90), mask_of(damaged, 120, 90));

    // From the middle: only the later rects.
    FrameChanges tail = mirror.changes_since(start + 4);
    EXPECT_EQ(mask_of(tail.rects, 120, 90), mask_of({damaged[4], damaged[5]}, 120, 90));
}

TEST(FrameMirror, ManyChangesAreMergedButStillCoverEverything) {
    std::mt19937 rng(5);
    FrameMirror::Options options;
    options.max_rects = 8;
    FrameMirror mirror(options);
    mirror.reset(300, 200);
    std::uint64_t start = mirror.version();
    std::vector<Rect> damaged;
    for (std::uint64_t seq = 1; seq <= 100; ++seq) {
        Damage d = random_damage(rng, 300, 200);
        d.rect.width = std::min(d.rect.width, 12);
        d.rect.height = std::min(d.rect.height, 9);
        d.pixels.resize(static_cast<std::size_t>(d.rect.area()) * 4);
        apply(mirror, seq, d);
        damaged.push_back(d.rect);
    }
    FrameChanges changes = mirror.changes_since(start);
    EXPECT_LE(changes.rects.size(), 8u);
    std::vector<bool> got = mask_of(changes.rects, 300, 200);
    std::vector<bool> want = mask_of(damaged, 300, 200);
    for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_TRUE(!want[i] || got[i]) << "pixel " << i % 300 << "," << i / 300 << " not covered";
}

TEST(FrameMirror, ChangesAcrossAResetOrBeyondTheHistoryAreFull) {
    FrameMirror::Options options;
    options.history = 4;
    FrameMirror mirror(options);
    mirror.reset(10, 10);
    std::uint64_t start = mirror.version();
    std::vector<std::uint8_t> body(4, 1);
    for (std::uint64_t seq = 1; seq <= 10; ++seq)
        mirror.apply_damage(seq, 0, 0, 1, 1, std::span<const std::uint8_t>(body));
    FrameChanges old = mirror.changes_since(start);
    EXPECT_TRUE(old.full);
    ASSERT_EQ(old.rects.size(), 1u);
    EXPECT_EQ(old.rects[0], (Rect{0, 0, 10, 10}));
    EXPECT_FALSE(mirror.changes_since(mirror.version() - 2).full);  // still in the history

    std::uint64_t before_reset = mirror.version();
    mirror.reset(20, 10);
    FrameChanges after = mirror.changes_since(before_reset);
    EXPECT_TRUE(after.full);
    EXPECT_EQ(after.rects[0], (Rect{0, 0, 20, 10}));
    EXPECT_TRUE(mirror.changes_since(0).full);
    EXPECT_TRUE(mirror.changes_since(mirror.version() + 100).full);  // a version never issued
}

TEST(FrameMirror, CursorImageAndPositionAreValidatedAndVersioned) {
    FrameMirror mirror;
    mirror.reset(100, 50);
    std::vector<std::uint8_t> argb(4 * 3 * 4, 0xff);
    mirror.set_cursor_shape(4, 3, 1, 2, 77, std::span<const std::uint8_t>(argb));
    CursorState cursor = mirror.snapshot().cursor;
    ASSERT_NE(cursor.shape, nullptr);
    EXPECT_EQ(cursor.shape->serial, 77u);
    EXPECT_EQ(cursor.shape->argb.size(), 12u);
    EXPECT_EQ(cursor.shape->argb[0], 0xffffffffu);
    EXPECT_EQ(cursor.version, 1u);

    auto field_of = [&](auto&& call) {
        try {
            call();
        } catch (const ParameterError& e) {
            return e.field();
        }
        return std::string("accepted");
    };
    auto span = std::span<const std::uint8_t>(argb);
    // A hotspot off the image (Firefox's blank cursor: 1x1 with its hotspot at 1,1) is moved
    // onto its edge, not an error that would end the agent's channel.
    EXPECT_EQ(field_of([&] { mirror.set_cursor_shape(4, 3, 4, -1, 2, span); }), "accepted");
    EXPECT_EQ(mirror.snapshot().cursor.shape->xhot, 3);
    EXPECT_EQ(mirror.snapshot().cursor.shape->yhot, 0);
    EXPECT_EQ(mirror.snapshot().cursor.version, 2u);
    EXPECT_EQ(field_of([&] { mirror.set_cursor_shape(4, 4, 0, 0, 1, span); }), "body");
    EXPECT_EQ(field_of([&] { mirror.set_cursor_shape(0, 3, 0, 0, 1, span); }), "width");
    EXPECT_EQ(field_of([&] { mirror.set_cursor_shape(4, 5000, 0, 0, 1, span); }), "height");
    EXPECT_EQ(field_of([&] { mirror.set_cursor_position(100, 0); }), "x");
    EXPECT_EQ(field_of([&] { mirror.set_cursor_position(0, -1); }), "y");
    EXPECT_EQ(mirror.snapshot().cursor.version, 2u);  // rejected calls changed nothing

    mirror.set_cursor_position(99, 49);
    cursor = mirror.snapshot().cursor;
    EXPECT_TRUE(cursor.position_known);
    EXPECT_EQ(cursor.x, 99);
    EXPECT_EQ(cursor.y, 49);
    EXPECT_EQ(cursor.version, 3u);
    mirror.set_cursor_position(99, 49);  // no movement, no new version
    EXPECT_EQ(mirror.snapshot().cursor.version, 3u);
}

TEST(FrameSubscriber, FirstUpdateIsFullThenOnlyChangesWithLatestWins) {
    FrameMirror mirror;
    FrameSubscriber subscriber(mirror);
    EXPECT_FALSE(subscriber.next(10ms).has_value());  // no screen yet
    mirror.reset(50, 40);
    auto first = subscriber.next(1s);
    ASSERT_TRUE(first.has_value());
    EXPECT_TRUE(first->changes.full);
    EXPECT_TRUE(first->frame_changed);
    EXPECT_FALSE(subscriber.next(10ms).has_value());  // nothing new

    // Three changes while the subscriber is busy: one update with their union, latest frame.
    std::vector<std::uint8_t> a(5 * 5 * 4, 1), b(3 * 2 * 4, 2), c(5 * 5 * 4, 3);
    mirror.apply_damage(1, 0, 0, 5, 5, std::span<const std::uint8_t>(a));
    mirror.apply_damage(2, 20, 30, 3, 2, std::span<const std::uint8_t>(b));
    mirror.apply_damage(3, 0, 0, 5, 5, std::span<const std::uint8_t>(c));
    auto update = subscriber.next(1s);
    ASSERT_TRUE(update.has_value());
    EXPECT_FALSE(update->changes.full);
    EXPECT_EQ(update->snapshot.seq, 3u);
    EXPECT_EQ(update->snapshot.frame->pixels[0], 3);
    EXPECT_EQ(mask_of(update->changes.rects, 50, 40),
              mask_of({{0, 0, 5, 5}, {20, 30, 3, 2}}, 50, 40));
    EXPECT_FALSE(update->cursor_changed);
    EXPECT_FALSE(subscriber.next(10ms).has_value());

    // A cursor move alone wakes it too.
    mirror.set_cursor_position(10, 10);
    auto moved = subscriber.next(1s);
    ASSERT_TRUE(moved.has_value());
    EXPECT_TRUE(moved->cursor_changed);
    EXPECT_FALSE(moved->frame_changed);
    EXPECT_EQ(moved->snapshot.cursor.x, 10);

    mirror.close();
    auto closed = subscriber.next(1s);
    ASSERT_TRUE(closed.has_value());
    EXPECT_TRUE(closed->closed);
}

TEST(FrameSubscriber, NextWakesWhenTheWriterApplies) {
    FrameMirror mirror;
    mirror.reset(8, 8);
    FrameSubscriber subscriber(mirror);
    subscriber.poll();
    std::thread writer([&] {
        std::this_thread::sleep_for(30ms);
        std::vector<std::uint8_t> body(4, 7);
        mirror.apply_damage(1, 3, 4, 1, 1, std::span<const std::uint8_t>(body));
    });
    auto update = subscriber.next(30s);
    writer.join();
    ASSERT_TRUE(update.has_value());
    ASSERT_EQ(update->changes.rects.size(), 1u);
    EXPECT_EQ(update->changes.rects[0], (Rect{3, 4, 1, 1}));
}

TEST(FrameMirror, ListenerIsCalledUntilDestroyed) {
    FrameMirror mirror;
    mirror.reset(4, 4);
    std::atomic<int> calls{0};
    {
        FrameMirror::Listener listener = mirror.listen([&] { ++calls; });
        std::vector<std::uint8_t> body(4, 1);
        mirror.apply_damage(1, 0, 0, 1, 1, std::span<const std::uint8_t>(body));
        mirror.set_cursor_position(1, 1);
        EXPECT_EQ(calls.load(), 2);
        FrameMirror::Listener moved = std::move(listener);
        mirror.set_cursor_position(2, 2);
        EXPECT_EQ(calls.load(), 3);
    }
    mirror.set_cursor_position(3, 3);
    EXPECT_EQ(calls.load(), 3);
}

TEST(FrameMirror, ListenerMayOutliveTheMirror) {
    FrameMirror::Listener listener;
    {
        FrameMirror mirror;
        listener = mirror.listen([] {});
    }
    listener.reset();  // must not touch the destroyed mirror
    SUCCEED();
}

TEST(FrameMirror, SnapshotsOutliveTheMirror) {
    FrameSnapshot snap;
    {
        FrameMirror mirror;
        mirror.reset(4, 4);
        snap = mirror.snapshot();
        std::vector<std::uint8_t> body(4, 1);
        mirror.apply_damage(1, 0, 0, 1, 1, std::span<const std::uint8_t>(body));
    }
    EXPECT_EQ(snap.frame->pixels.size(), 64u);
    EXPECT_EQ(snap.frame->pixels[0], 0);
}

// One writer and several readers. Every snapshot must equal the reference frame of its version
// (no torn frames), and a subscriber that patches its own copy with only the reported damage
// rects must end up with exactly the mirror's frame.
TEST(FrameMirror, ConcurrentWriterAndReadersSeeConsistentFrames) {
    constexpr int kWidth = 64, kHeight = 48, kSteps = 400;
    std::mt19937 rng(11);
    std::vector<Damage> damages;
    std::vector<std::vector<std::uint8_t>> expected;  // by version: [1] after reset, [1+i] after i
    Reference ref(kWidth, kHeight);
    expected.push_back({});
    expected.push_back(ref.pixels);
    for (int i = 0; i < kSteps; ++i) {
        damages.push_back(random_damage(rng, kWidth, kHeight));
        ref.apply(damages.back());
        expected.push_back(ref.pixels);
    }

    FrameMirror mirror;
    mirror.reset(kWidth, kHeight);
    std::atomic<bool> done{false};
    std::atomic<int> snapshots_checked{0};
    std::vector<std::thread> readers;
    for (int r = 0; r < 2; ++r) {
        readers.emplace_back([&] {
            do {
                FrameSnapshot snap = mirror.snapshot();
                ASSERT_LT(snap.version, expected.size());
                ASSERT_EQ(snap.frame->pixels, expected[snap.version])
                    << "torn frame " << snap.version;
                ++snapshots_checked;
            } while (!done.load());
        });
    }
    std::vector<std::uint8_t> patched;
    std::thread subscriber_thread([&] {
        FrameSubscriber subscriber(mirror);
        std::uint64_t seen = 0;
        while (seen != static_cast<std::uint64_t>(kSteps) + 1) {
            auto update = subscriber.next(50ms);
            if (!update) continue;
            seen = update->changes.version;
            const Frame& frame = *update->snapshot.frame;
            if (update->changes.full) patched = frame.pixels;
            for (const Rect& r : update->changes.rects)
                for (int y = r.y; y < r.bottom(); ++y)
                    std::memcpy(
                        patched.data() + (static_cast<std::size_t>(y) * kWidth + r.x) * 4,
                        frame.pixels.data() + (static_cast<std::size_t>(y) * kWidth + r.x) * 4,
                        static_cast<std::size_t>(r.width) * 4);
            ASSERT_EQ(patched, frame.pixels)
                << "damage did not cover a change at version " << update->snapshot.version;
        }
    });
    for (int i = 0; i < kSteps; ++i) {
        apply(mirror, static_cast<std::uint64_t>(i) + 1, damages[i]);
        if (i % 50 == 0) std::this_thread::yield();
    }
    done = true;
    for (auto& t : readers) t.join();
    subscriber_thread.join();
    EXPECT_GT(snapshots_checked.load(), 0);
    EXPECT_EQ(patched, expected.back());
    EXPECT_EQ(mirror.snapshot().frame->pixels, expected.back());
}

}  // namespace
}  // namespace deskbox::streaming
