// CommandStreams without a guest: events that come before the watch wait for it, in order; a
// watch ends with exit or lost; what nobody watches is bounded; output text keeps a character
// cut between chunks whole and says when bytes are not UTF-8.
#include <gtest/gtest.h>

#include <thread>

#include "server/sandbox/command_streams.hpp"

namespace deskbox::server {
namespace {

using std::chrono::steady_clock;

std::optional<CommandEvent> next_soon(CommandStreams::Watch& watch) {
    return watch.next(steady_clock::now() + std::chrono::seconds(5));
}

TEST(CommandStreams, EventsBeforeTheWatchWaitForItInOrder) {
    CommandStreams streams;
    streams.output(42, "stdout", "early ");
    auto watch = streams.watch(42);
    streams.output(42, "stderr", "late");
    streams.exited(42, 3, 0);
    streams.output(42, "stdout", "after the exit: dropped");
    auto first = next_soon(*watch);
    ASSERT_TRUE(first);
    EXPECT_EQ(first->data, "early ");
    EXPECT_EQ(next_soon(*watch)->stream, "stderr");
    auto exit = next_soon(*watch);
    ASSERT_TRUE(exit);
    EXPECT_EQ(exit->kind, CommandEvent::Kind::exit);
    EXPECT_EQ(exit->exit_code, 3);
    EXPECT_FALSE(watch->next(steady_clock::now() + std::chrono::milliseconds(20)));
    EXPECT_THROW(streams.watch(42), std::logic_error);  // one watcher per command
}

TEST(CommandStreams, AWatchWakesWhenOutputComesFromAnotherThread) {
    CommandStreams streams;
    auto watch = streams.watch(7);
    std::thread agent([&] { streams.output(7, "stdout", "hello"); });
    auto event = next_soon(*watch);
    agent.join();
    ASSERT_TRUE(event);
    EXPECT_EQ(event->data, "hello");
}

TEST(CommandStreams, AnInterruptWakesTheWatcherBeforeWhatWaits) {
    CommandStreams streams;
    auto watch = streams.watch(9);
    streams.output(9, "stdout", "waiting");
    std::thread client_left([&] { watch->interrupt(); });
    client_left.join();
    EXPECT_EQ(next_soon(*watch)->kind, CommandEvent::Kind::interrupted);
    EXPECT_EQ(next_soon(*watch)->data, "waiting");
}

TEST(CommandStreams, ALostChannelEndsEveryWatchAndLaterOnesUntilReconnected) {
    CommandStreams streams;
    auto watch = streams.watch(1);
    streams.lost("agent gone");
    auto event = next_soon(*watch);
    ASSERT_TRUE(event);
    EXPECT_EQ(event->kind, CommandEvent::Kind::lost);
    EXPECT_EQ(event->data, "agent gone");
    EXPECT_EQ(next_soon(*streams.watch(2))->kind, CommandEvent::Kind::lost);
    streams.reconnected();
    auto fresh = streams.watch(3);
    EXPECT_FALSE(fresh->next(steady_clock::now() + std::chrono::milliseconds(20)));
}

TEST(CommandStreams, UnwatchedCommandsAreBoundedAndASlowWatcherLosesOutputNotMemory) {
    CommandStreams streams;
    for (pid_t pid = 1000; pid < 1000 + 200; ++pid) streams.exited(pid, 0, 0);
    // The oldest were forgotten: a watch of one finds nothing waiting.
    EXPECT_FALSE(streams.watch(1000)->next(steady_clock::now() + std::chrono::milliseconds(20)));
    EXPECT_TRUE(next_soon(*streams.watch(1199)));

    auto watch = streams.watch(5);
    const std::string mib(1 << 20, 'x');
    for (int i = 0; i < 20; ++i) streams.output(5, "stdout", mib);
    std::size_t bytes = 0;
    std::string last;
    while (auto event = watch->next(steady_clock::now() + std::chrono::milliseconds(20))) {
        bytes += event->data.size();
        last = event->data;
    }
    EXPECT_LE(bytes, CommandStreams::kMaxQueuedBytes + 200);
    EXPECT_NE(last.find("output dropped"), std::string::npos) << last;
}

TEST(CommandOutputText, ACharacterCutBetweenChunksWaitsForItsEnd) {
    CommandOutputText text;
    const std::string euro = "\xe2\x82\xac";
    auto first = text.take({CommandEvent::Kind::output, "stdout", "a" + euro.substr(0, 2)});
    EXPECT_EQ(first["data"], "a");
    auto second = text.take({CommandEvent::Kind::output, "stdout", euro.substr(2) + "b"});
    EXPECT_EQ(second["data"], euro + "b");
    EXPECT_FALSE(second.contains("data_b64"));
    EXPECT_TRUE(text.flush().is_null());
    auto cut = text.take({CommandEvent::Kind::output, "stderr", euro.substr(0, 1)});
    EXPECT_TRUE(cut.is_null());
    auto rest = text.flush();
    ASSERT_FALSE(rest.is_null());
    EXPECT_EQ(rest["stream"], "stderr");
    EXPECT_EQ(rest["data_b64"], "4g==");  // the lone lead byte, exactly
    auto invalid = text.take({CommandEvent::Kind::output, "stdout", "\xff\xfe ok"});
    EXPECT_TRUE(invalid.contains("data_b64"));
}

}  // namespace
}  // namespace deskbox::server
