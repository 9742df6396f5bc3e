// Spare keycodes: the keycodes a keymap leaves empty, which the XTest injector maps on demand
// to keysyms the layout lacks (é on "us", 日, 😀). Each has two levels (plain, Shift) holding a
// keysym each, so 2 keysyms per keycode are available without remapping.
//
// Pure bookkeeping, no X calls: the injector says what the keymap holds and which keys went
// down and up, and writes the remaps this returns. The clock is injected so that the timing
// model can be tested without waiting.
//
// Clients resolve a keycode to a keysym when they *read* an event, not when it was sent, so a
// level is reused (least recently used first) only once a client reading one key press per
// `key_cost` would have read its last event, plus `reuse_interval`. Free levels are taken at
// once: typing that needs no reuse is never slowed down.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "input/actions.hpp"

namespace deskbox::input::x11 {

// A keycode as X numbers it (8..255), without Xlib's KeyCode typedef.
using Keycode = std::uint8_t;

// The pessimistic model of the slowest client we wait for (see the file comment).
struct ClientModel {
    std::chrono::milliseconds reuse_interval{100};
    std::chrono::microseconds key_cost{1000};
};

// Where a keysym sits on the spare keys: one level of one key, or the whole key (both levels
// hold it, so a held Shift cannot change what the key types).
struct SparePlace {
    Keycode keycode = 0;
    int level = 0;  // 0 plain, 1 Shift; 0 for a whole key
    bool whole_key = false;
    // The levels a press of this place uses (bit 0: plain, bit 1: Shift), for note_key.
    unsigned levels() const { return whole_key ? 0b11u : 1u << level; }
    friend bool operator==(const SparePlace&, const SparePlace&) = default;
};

// Keyboard mapping changes to make: runs of consecutive keycodes, each keycode's keysyms for
// its two levels in order. A free level repeats the other, so no level is NoSymbol and a key
// used by one keysym types it with or without Shift; an emptied key is {0, 0}.
struct SpareRemap {
    struct Run {
        Keycode first_keycode = 0;
        std::vector<Keysym> keysyms;  // 2 per keycode
        friend bool operator==(const Run&, const Run&) = default;
    };
    std::vector<Run> runs;
    // Set when a level is reused before the model says clients have read its last event: the
    // runs must not be written before then.
    std::optional<std::chrono::steady_clock::time_point> wait_until;
};

class SpareKeycodes {
  public:
    using Clock = std::chrono::steady_clock;
    using Now = std::function<Clock::time_point()>;

    explicit SpareKeycodes(ClientModel model = {}, Now now = &Clock::now);

    // Takes in the keymap as it is now: keysyms_of(keycode) gives every keysym of keycodes
    // `first`..`last` (all groups and levels, NoSymbol included). Spare are the empty keycodes
    // and those of ours still holding what we mapped (a keymap may also change under us);
    // one someone else remapped is no longer ours. Keycode 8 is left out: it is evdev's
    // KEY_RESERVED and some clients ignore it.
    void rescan(int first, int last, const std::function<std::vector<Keysym>(int)>& keysyms_of);

    // How many levels a keysym may use alone: 2 when the keymap has a Shift key to press, else
    // 1. Whole keys always take both.
    void set_usable_levels(int levels) { usable_levels_ = levels; }

    std::vector<Keycode> keycodes() const;
    bool contains(int keycode) const {
        return keycode >= 0 && keycode < 256 && index_[keycode] >= 0;
    }

    // How many distinct keysyms fit at once.
    std::size_t capacity(bool whole_key) const;

    // Where `keysym` is mapped now, if it is.
    std::optional<SparePlace> find(Keysym keysym, bool whole_key) const;

    // Gives keysyms of `wanted` (distinct, at most capacity(), in the order they will be typed)
    // a place: those mapped already keep theirs, the others take places not needed and not held
    // down, those reusable now first (least recently used first), then those reusable soonest.
    // The first `at_least` missing keysyms are always mapped (waiting if they must); the rest
    // only while a place is reusable now, so typing goes on with what is ready instead of
    // waiting for the last place of a batch. Contiguous keycodes come in one run, so a client
    // refreshes its keymap once per batch instead of once per key. Throws std::runtime_error
    // (naming the first keysym that found no place) when too many keys are held down or there
    // are no spare keycodes.
    SpareRemap map(const std::vector<Keysym>& wanted, bool whole_key,
                   std::size_t at_least = std::numeric_limits<std::size_t>::max());

    // Empties every key we mapped (the injector is going away), like any remap once clients
    // have read the last events using them.
    SpareRemap clear();

    // Every key event the injector sends, spare or not: a press advances the client model, and
    // an event on a spare key makes the `levels` it used (SparePlace::levels; 0: both) most
    // recently used and reusable only once the model has read it.
    void note_key(int keycode, bool down, unsigned levels);

  private:
    struct Key {
        Keycode keycode = 0;
        std::array<Keysym, 2> keysyms{};                 // per level; 0 while free
        std::array<std::uint64_t, 2> last_use{};         // LRU order; 0 = never used
        std::array<Clock::time_point, 2> reusable_at{};  // see note_key
        int pressed = 0;                                 // held down: never remapped meanwhile
        std::array<Keysym, 2> contents() const;
    };

    int levels_for(bool whole_key) const { return whole_key ? 1 : usable_levels_; }
    // A position is one level of one key: key index * 2 + level.
    std::optional<std::size_t> find_position(Keysym keysym, bool whole_key) const;
    std::vector<std::size_t> free_positions(const std::vector<bool>& needed, bool whole_key) const;
    [[noreturn]] void throw_no_room(Keysym keysym) const;
    SpareRemap remap(std::vector<std::size_t> keys, Clock::time_point ready) const;

    ClientModel model_;
    Now now_;
    std::vector<Key> keys_;         // ascending keycodes
    std::array<int, 256> index_{};  // keycode -> index into keys_, or -1
    int usable_levels_ = 2;
    std::uint64_t use_counter_ = 0;
    // When a client reading key presses at `model_.key_cost` each would have read everything
    // we sent.
    Clock::time_point client_caught_up_at_{};
};

}  // namespace deskbox::input::x11
