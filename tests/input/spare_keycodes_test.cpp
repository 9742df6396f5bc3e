// Spare keycode bookkeeping without X: a keymap kept in a map stands in for the server (remaps
// are written into it as the injector would), and a fake clock for time, so the client model's
// timing is checked exactly instead of by waiting.
#include "input/x11/spare_keycodes.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace deskbox::input::x11 {
namespace {

using namespace std::chrono_literals;
using Clock = SpareKeycodes::Clock;

constexpr Keysym kA = 0x61;           // a: on the layout
constexpr Keysym kE = 0xe9;           // eacute
constexpr Keysym kN = 0xf1;           // ntilde
constexpr Keysym kSun = 0x10065e5;    // 日
constexpr Keysym kBook = 0x1006728;   // 本
constexpr Keysym kWord = 0x1008a9e;   // 語
constexpr Keysym kSmile = 0x101f600;  // 😀

constexpr ClientModel kModel{100ms, 1000us};

struct FakeClock {
    Clock::time_point now{std::chrono::hours(1)};
    SpareKeycodes::Now function() {
        return [this] { return now; };
    }
};

// The server's keymap: keycode -> its keysyms (two levels); absent keycodes are empty.
struct FakeKeyboard {
    std::map<int, std::vector<Keysym>> keys;

    void rescan(SpareKeycodes& spares) const {
        spares.rescan(8, 20, [this](int keycode) {
            const auto it = keys.find(keycode);
            return it == keys.end() ? std::vector<Keysym>{0, 0} : it->second;
        });
    }
    void apply(const SpareRemap& remap) {
        for (const auto& run : remap.runs) {
            for (std::size_t i = 0; i < run.keysyms.size() / 2; ++i)
                keys[run.first_keycode + static_cast<int>(i)] = {run.keysyms[2 * i],
                                                                 run.keysyms[2 * i + 1]};
        }
    }
};

// Keycodes 8..20 with only 10, 11, 12 and 15 empty (8 is never spare).
FakeKeyboard layout() {
    FakeKeyboard keyboard;
    for (int kc = 9; kc <= 20; ++kc) {
        if (kc != 10 && kc != 11 && kc != 12 && kc != 15) keyboard.keys[kc] = {kA + kc, 0};
    }
    return keyboard;
}

// The message of the error map() throws.
std::string map_error(SpareKeycodes& spares, const std::vector<Keysym>& wanted, bool whole_key) {
    try {
        spares.map(wanted, whole_key);
    } catch (const std::runtime_error& error) {
        return error.what();
    }
    return "no error";
}

class SpareKeycodesTest : public ::testing::Test {
  protected:
    void SetUp() override { keyboard_.rescan(spares_); }

    // Maps and writes like the injector; fails the test if the map would have to wait.
    void map_now(const std::vector<Keysym>& wanted, bool whole_key = false) {
        const SpareRemap remap = spares_.map(wanted, whole_key);
        EXPECT_FALSE(remap.wait_until.has_value());
        keyboard_.apply(remap);
    }
    // A press and release of `keysym` at its place, as the injector sends them.
    void type(Keysym keysym, bool whole_key = false) {
        const auto place = spares_.find(keysym, whole_key);
        ASSERT_TRUE(place.has_value());
        spares_.note_key(place->keycode, true, place->levels());
        spares_.note_key(place->keycode, false, place->levels());
    }

    FakeClock clock_;
    FakeKeyboard keyboard_ = layout();
    SpareKeycodes spares_{kModel, clock_.function()};
};

TEST_F(SpareKeycodesTest, EmptyKeycodesAreSpareAndTakeTwoKeysymsEachWithoutWaiting) {
    EXPECT_EQ(spares_.keycodes(), (std::vector<Keycode>{10, 11, 12, 15}));
    EXPECT_EQ(spares_.capacity(false), 8u);
    EXPECT_EQ(spares_.capacity(true), 4u);

    const SpareRemap remap = spares_.map({kE, kN, kSun}, false);
    EXPECT_FALSE(remap.wait_until.has_value());
    // Key by key, plain level first; a free level repeats the other; one run for 10..11.
    ASSERT_EQ(remap.runs.size(), 1u);
    EXPECT_EQ(remap.runs[0].first_keycode, 10);
    EXPECT_EQ(remap.runs[0].keysyms, (std::vector<Keysym>{kE, kN, kSun, kSun}));
    EXPECT_EQ(spares_.find(kE, false), (SparePlace{10, 0, false}));
    EXPECT_EQ(spares_.find(kN, false), (SparePlace{10, 1, false}));
    EXPECT_EQ(spares_.find(kN, false)->levels(), 0b10u);
    EXPECT_EQ(spares_.find(kSun, false), (SparePlace{11, 0, false}));
    EXPECT_FALSE(spares_.find(kBook, false).has_value());
    // Mapped already: nothing to write.
    EXPECT_TRUE(spares_.map({kN, kE}, false).runs.empty());
}

TEST_F(SpareKeycodesTest, KeycodesThatAreNotConsecutiveAreWrittenInSeparateRuns) {
    keyboard_.apply(spares_.map({kE, kN, kSun, kBook, kWord, kSmile, kA + 100}, false));
    const SpareRemap remap = spares_.map({kA + 101}, false);  // the last free level: 15's Shift
    ASSERT_EQ(remap.runs.size(), 1u);
    EXPECT_EQ(remap.runs[0].first_keycode, 15);
    EXPECT_EQ(remap.runs[0].keysyms, (std::vector<Keysym>{kA + 100, kA + 101}));

    const SpareRemap cleared = spares_.clear();
    ASSERT_EQ(cleared.runs.size(), 2u);
    EXPECT_EQ(cleared.runs[0].first_keycode, 10);
    EXPECT_EQ(cleared.runs[0].keysyms, std::vector<Keysym>(6, 0));
    EXPECT_EQ(cleared.runs[1].first_keycode, 15);
    EXPECT_EQ(cleared.runs[1].keysyms, std::vector<Keysym>(2, 0));
    EXPECT_FALSE(cleared.wait_until.has_value()) << "nothing was typed with them";
}

TEST_F(SpareKeycodesTest, ReuseTakesTheLeastRecentlyUsedLevelAndKeepsWhatTheBatchNeeds) {
    spares_.set_usable_levels(1);  // one keysym per key: 4 places
    map_now({kE, kN, kSun, kBook});
    for (Keysym keysym : {kN, kE, kBook, kSun}) type(keysym);  // kN is now least recent
    clock_.now += 1s;                                          // clients have read it all

    const SpareRemap remap = spares_.map({kE, kWord}, false);  // kE is needed: it stays
    EXPECT_FALSE(remap.wait_until.has_value());
    keyboard_.apply(remap);
    EXPECT_EQ(spares_.find(kWord, false)->keycode, 10 + 1) << "kN's key, the least recent";
    EXPECT_FALSE(spares_.find(kN, false).has_value());
    EXPECT_EQ(spares_.find(kE, false)->keycode, 10);

    // Mapping counts as a use: kWord, mapped after everything was typed, goes last.
    keyboard_.apply(spares_.map({kSmile, kN, kBook}, false));
    EXPECT_EQ(spares_.find(kSmile, false)->keycode, 10) << "kE's key, typed second";
    EXPECT_EQ(spares_.find(kN, false)->keycode, 12) << "kSun's key, typed last";
    EXPECT_EQ(spares_.find(kWord, false)->keycode, 11);
    EXPECT_EQ(spares_.find(kBook, false)->keycode, 15);
}

TEST_F(SpareKeycodesTest, ReusingALevelWaitsUntilTheModelledClientHasReadItsLastEvent) {
    spares_.set_usable_levels(1);
    map_now({kE, kN, kSun, kBook});
    const Clock::time_point start = clock_.now;
    // Ten presses in one burst: the model reads one per key_cost, so the last is read at
    // start + 10 ms; kBook, typed last, is reusable 100 ms after that.
    for (int i = 0; i < 3; ++i) {
        for (Keysym keysym : {kE, kN, kSun}) type(keysym);
    }
    type(kBook);
    clock_.now = start + 50ms;
    const SpareRemap early = spares_.map({kE, kN, kSun, kWord}, false);  // only kBook's place
    ASSERT_TRUE(early.wait_until.has_value());
    EXPECT_EQ(*early.wait_until, start + 10ms + 100ms);
    keyboard_.apply(early);

    // Once the model has caught up, reuse needs no wait.
    type(kWord);  // its press is modelled read at now + 1 ms
    clock_.now = start + 50ms + 1ms + 100ms;
    EXPECT_FALSE(spares_.map({kE, kN, kSun, kSmile}, false).wait_until.has_value());
}

TEST_F(SpareKeycodesTest, APartialBatchMapsWhatIsReusableNowAndWaitsOnlyForItsMinimum) {
    spares_.set_usable_levels(1);
    map_now({kE, kN, kSun, kBook});
    const Clock::time_point start = clock_.now;
    // Read by the model at start + 1, 2, 3, 4 ms: reusable 100 ms after each.
    for (Keysym keysym : {kE, kN, kSun, kBook}) type(keysym);
    clock_.now = start + 101ms + 500us;  // only kE's place is reusable

    // At least one: kWord takes kE's place at once; kSmile would have to wait, so it waits
    // for a later batch.
    const SpareRemap ready_now = spares_.map({kWord, kSmile, kA + 100}, false, 1);
    EXPECT_FALSE(ready_now.wait_until.has_value());
    keyboard_.apply(ready_now);
    EXPECT_EQ(spares_.find(kWord, false)->keycode, 10);
    EXPECT_FALSE(spares_.find(kSmile, false).has_value());

    // At least two: the soonest reusable places, kN's and kSun's, after the later of them.
    const SpareRemap waits = spares_.map({kWord, kSmile, kA + 100}, false, 2);
    ASSERT_TRUE(waits.wait_until.has_value());
    EXPECT_EQ(*waits.wait_until, start + 3ms + 100ms);
    keyboard_.apply(waits);
    EXPECT_EQ(spares_.find(kSmile, false)->keycode, 11);
    EXPECT_EQ(spares_.find(kA + 100, false)->keycode, 12);
    EXPECT_EQ(spares_.find(kWord, false)->keycode, 10) << "needed by the batch: kept";
    EXPECT_EQ(spares_.find(kBook, false)->keycode, 15);
}

TEST_F(SpareKeycodesTest, AnIdleClientModelStartsAgainFromNow) {
    spares_.set_usable_levels(1);
    map_now({kE, kN, kSun, kBook});
    for (int i = 0; i < 50; ++i) type(kE);  // modelled read 50 ms from now
    clock_.now += 10s;
    type(kN);  // read 1 ms after it was sent, not 51 ms
    clock_.now += 100ms;
    const SpareRemap remap = spares_.map({kE, kSun, kBook, kWord}, false);
    ASSERT_TRUE(remap.wait_until.has_value());
    EXPECT_EQ(*remap.wait_until, clock_.now + 1ms);
}

TEST_F(SpareKeycodesTest, ReleasesDoNotAdvanceTheClientModel) {
    spares_.set_usable_levels(1);
    map_now({kE, kN, kSun, kBook});
    const Clock::time_point start = clock_.now;
    const Keycode key = spares_.find(kE, false)->keycode;
    spares_.note_key(key, true, 0b01);
    clock_.now += 20ms;
    spares_.note_key(key, false, 0b01);  // read with the press: start + 1 ms
    clock_.now += 10ms;
    const SpareRemap remap = spares_.map({kN, kSun, kBook, kWord}, false);
    ASSERT_TRUE(remap.wait_until.has_value());
    EXPECT_EQ(*remap.wait_until, start + 1ms + 100ms);
}

TEST_F(SpareKeycodesTest, KeysHeldDownAreNeverRemapped) {
    spares_.set_usable_levels(1);
    map_now({kE, kN, kSun, kBook});
    const auto hold = [&](Keysym keysym) {
        const auto place = spares_.find(keysym, false);
        spares_.note_key(place->keycode, true, place->levels());  // pressed, not released
    };
    hold(kE);  // the least recently used from here on, but held
    for (Keysym keysym : {kN, kSun, kBook}) type(keysym);
    clock_.now += 1s;
    keyboard_.apply(spares_.map({kWord}, false));
    EXPECT_EQ(spares_.find(kWord, false)->keycode, 11) << "kN's key: kE's is held";
    EXPECT_EQ(spares_.find(kE, false)->keycode, 10);

    for (Keysym keysym : {kWord, kSun, kBook}) hold(keysym);
    EXPECT_EQ(map_error(spares_, {kSmile}, false),
              "keysym 0x101f600 (U0001F600) is not on the keyboard and all 4 spare keycodes are "
              "held down by this action");
}

TEST_F(SpareKeycodesTest, WholeKeysHoldOneKeysymOnBothLevels) {
    keyboard_.apply(spares_.map({kE}, false));  // 10: {kE, kE}, level 1 free
    // A key holding one keysym on both levels already serves as a whole key.
    EXPECT_EQ(spares_.find(kE, true), (SparePlace{10, 0, true}));
    EXPECT_EQ(spares_.find(kE, true)->levels(), 0b11u);

    const SpareRemap remap = spares_.map({kE, kN}, true);
    ASSERT_EQ(remap.runs.size(), 1u);
    EXPECT_EQ(remap.runs[0].first_keycode, 11) << "10 is needed for kE";
    EXPECT_EQ(remap.runs[0].keysyms, (std::vector<Keysym>{kN, kN}));
    keyboard_.apply(remap);
    // Per level the whole key is found at its plain level.
    EXPECT_EQ(spares_.find(kN, false), (SparePlace{11, 0, false}));
}

TEST_F(SpareKeycodesTest, RescanKeepsOurKeysAndDropsThoseSomeoneElseRemapped) {
    keyboard_.apply(spares_.map({kE, kN, kSun, kBook}, false));  // 10: kE kN, 11: kSun kBook
    type(kSun);

    keyboard_.keys[10] = {kA, 0};  // setxkbmap or xmodmap took 10
    keyboard_.keys.erase(11);      // and emptied 11
    keyboard_.keys.erase(13);      // and freed 13
    keyboard_.rescan(spares_);
    EXPECT_EQ(spares_.keycodes(), (std::vector<Keycode>{11, 12, 13, 15}));
    EXPECT_FALSE(spares_.find(kE, false).has_value());
    EXPECT_FALSE(spares_.find(kSun, false).has_value());

    // 11 is still ours and remembers being typed: reusing it at once waits for the client.
    clock_.now += 1ms;
    spares_.set_usable_levels(1);
    const SpareRemap remap = spares_.map({kE, kN, kSun, kBook}, false);
    EXPECT_TRUE(remap.wait_until.has_value());
}

TEST(SpareKeycodes, AKeymapWithoutEmptyKeycodesHasNoRoom) {
    FakeKeyboard full;
    for (int kc = 8; kc <= 20; ++kc) full.keys[kc] = {kA, 0};
    full.keys.erase(8);  // keycode 8 is empty but never spare
    SpareKeycodes spares(kModel);
    full.rescan(spares);
    EXPECT_TRUE(spares.keycodes().empty());
    EXPECT_EQ(spares.capacity(false), 0u);
    EXPECT_TRUE(spares.map({}, false).runs.empty());
    EXPECT_EQ(map_error(spares, {kE}, true),
              "keysym 0xe9 (eacute) is not on the keyboard and the keymap has no spare keycode to "
              "map it to");
}

}  // namespace
}  // namespace deskbox::input::x11
