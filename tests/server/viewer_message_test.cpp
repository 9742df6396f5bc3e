// Viewers' stream messages decoded apart from the socket: the fuzzer's seed corpus replayed
// through its checks, what a few messages become, and the message rate limit.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "server/stream/viewer_messages.hpp"
#include "tests/support/corpus_replay.hpp"
#include "tests/support/test_paths.hpp"

namespace deskbox::server {
namespace {

using Kind = ViewerRequest::Kind;

TEST(ViewerMessageCorpus, EverySeedPassesTheFuzzChecks) {
    EXPECT_GE(test::replay_corpus(deskbox::test_paths::source("server/stream/fuzz/corpus")), 12u);
}

TEST(ViewerMessages, DecodeToInputOrSayWhy) {
    input::PointerInput pointer(input::dom_buttons(), 320, 200);
    auto r =
        decode_viewer_message(R"({"type":"pointer","x":500,"y":-3,"buttons":1})", pointer, true);
    ASSERT_EQ(r.kind, Kind::input);
    ASSERT_EQ(r.actions.size(), 2u);
    EXPECT_EQ(std::get<input::Move>(r.actions[0]).to, (input::Point{319, 0}));  // clamped
    EXPECT_EQ(std::get<input::MouseDown>(r.actions[1]).button, input::Button::left);
    auto leave = pointer.release_all();
    ASSERT_EQ(leave.size(), 1u);
    EXPECT_EQ(std::get<input::MouseUp>(leave[0]).button, input::Button::left);

    r = decode_viewer_message("{\"type\":\"text\",\"text\":\"caf\xe9\"}", pointer, true);
    EXPECT_EQ(r.kind, Kind::bad);
    EXPECT_NE(r.error.find("not valid UTF-8"), std::string::npos) << r.error;
    r = decode_viewer_message(R"({"type":"ping","t":[[1]]})", pointer, true);
    EXPECT_EQ(r.kind, Kind::bad);
    r = decode_viewer_message(R"({"type":"ping","t":17})", pointer, false);
    ASSERT_EQ(r.kind, Kind::pong);
    EXPECT_EQ(r.reply["t"], 17);
    r = decode_viewer_message(R"({"type":"key","key":"a","down":true})", pointer, false);
    EXPECT_EQ(r.kind, Kind::view_only);
    // A type name cut at 32 bytes inside a character still gives a valid UTF-8 reason.
    r = decode_viewer_message("{\"type\":\"" + std::string(31, 'x') + "\xc3\xa9\"}", pointer, true);
    EXPECT_EQ(r.kind, Kind::bad);
    EXPECT_NE(r.error.find("\\xC3"), std::string::npos) << r.error;
}

TEST(ViewerMessages, HoldsAtMostTheKeyLimit) {
    input::PointerInput pointer(input::dom_buttons(), 320, 200);
    std::size_t pressed = 0;
    for (int k = 1; k <= 100; ++k)
        pressed += pointer.key(static_cast<std::uint32_t>(0x100 + k), true).size();
    EXPECT_EQ(pressed, input::PointerInput::kMaxHeldKeys);
    EXPECT_EQ(pointer.release_all().size(), input::PointerInput::kMaxHeldKeys);
}

TEST(ViewerMessages, RateAllowsABurstThenThePerSecondRate) {
    MessageRate::Clock::time_point t0{};
    MessageRate rate(t0);
    int allowed = 0;
    for (int i = 0; i < 5000; ++i) allowed += rate.allow(t0);
    EXPECT_EQ(allowed, static_cast<int>(MessageRate::kBurst));
    // Half a second later: half a second's worth more, and no more.
    auto t1 = t0 + std::chrono::milliseconds(500);
    allowed = 0;
    for (int i = 0; i < 5000; ++i) allowed += rate.allow(t1);
    EXPECT_EQ(allowed, static_cast<int>(MessageRate::kPerSecond / 2));
    // A quiet minute refills to the burst, not beyond.
    auto t2 = t1 + std::chrono::minutes(1);
    allowed = 0;
    for (int i = 0; i < 5000; ++i) allowed += rate.allow(t2);
    EXPECT_EQ(allowed, static_cast<int>(MessageRate::kBurst));
}

}  // namespace
}  // namespace deskbox::server
