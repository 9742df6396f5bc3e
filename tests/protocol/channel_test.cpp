#include "protocol/channel.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <future>
#include <map>
#include <thread>
#include <vector>

#include "tests/protocol/transports.hpp"

namespace deskbox::protocol {
namespace {

using nlohmann::json;
using testing::channel_pair;
using testing::raw_ends;
using testing::Transport;
using namespace std::chrono_literals;

// Generous bound for "must not hang"; never a performance expectation.
constexpr auto kHangGuard = 60s;

std::string pattern(std::size_t size, unsigned seed) {
    std::string out(size, '\0');
    for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<char>((i * 131 + seed) >> 3);
    return out;
}

std::string error_of(const std::function<void()>& action) {
    try {
        action();
    } catch (const ProtocolError& e) {
        return e.what();
    }
    return "(no ProtocolError)";
}

bool sigpipe_pending() {
    sigset_t pending;
    sigpending(&pending);
    return sigismember(&pending, SIGPIPE) == 1;
}

class ProtocolChannel : public ::testing::TestWithParam<Transport> {};

INSTANTIATE_TEST_SUITE_P(Transports, ProtocolChannel,
                         ::testing::Values(Transport::socketpair, Transport::pipes, Transport::pty),
                         [](const auto& info) { return testing::transport_name(info.param); });

TEST_P(ProtocolChannel, CarriesEveryKindAndAnEightMegabyteBody) {
    auto [a, b] = channel_pair(GetParam());
    std::vector<Message> sent;
    for (Kind kind : {Kind::hello, Kind::request, Kind::response, Kind::event, Kind::stream}) {
        sent.push_back(Message{kind, {{"kind", static_cast<int>(kind)}}, ""});
        sent.push_back(Message{kind,
                               {{"kind", static_cast<int>(kind)}, {"with", "body"}},
                               pattern(1000 + static_cast<int>(kind), 1)});
    }
    sent.push_back(Message{Kind::event, {{"event", "damage"}}, pattern(8 << 20, 2)});
    auto sender = std::async(std::launch::async, [&, &a = a] {
        for (const Message& message : sent) a->send(message);
    });
    for (const Message& expected : sent) {
        auto received = b->receive();
        ASSERT_TRUE(received);
        EXPECT_EQ(received->kind, expected.kind);
        EXPECT_EQ(received->header, expected.header);
        EXPECT_TRUE(received->body == expected.body) << "body of " << expected.header.dump();
    }
    ASSERT_EQ(sender.wait_for(kHangGuard), std::future_status::ready);
    sender.get();
}

TEST_P(ProtocolChannel, ARecycledBodyIsReceivedIntoAgain) {
    auto [a, b] = channel_pair(GetParam());
    auto sender = std::async(std::launch::async, [&a = a] {
        for (unsigned i = 0; i < 3; ++i)
            a->send(Message{Kind::event, {{"n", i}}, pattern((4 << 20) - i * 1000, i)});
    });
    const char* storage = nullptr;
    for (unsigned i = 0; i < 3; ++i) {
        auto message = b->receive();
        ASSERT_TRUE(message);
        EXPECT_TRUE(message->body == pattern((4 << 20) - i * 1000, i)) << i;
        if (storage) {
            EXPECT_EQ(message->body.data(), storage) << i;
        }
        storage = message->body.data();
        b->recycle(std::move(message->body));
    }
    ASSERT_EQ(sender.wait_for(kHangGuard), std::future_status::ready);
    sender.get();
}

TEST_P(ProtocolChannel, ConcurrentSendsNeverInterleave) {
    auto [a, b] = channel_pair(GetParam());
    const int threads = 4, per_thread = 40;
    std::vector<std::thread> senders;
    for (int t = 0; t < threads; ++t) {
        senders.emplace_back([&, t, &a = a] {
            for (int i = 0; i < per_thread; ++i) {
                const std::size_t size = static_cast<std::size_t>((i * 7919 + t * 104729) % 300000);
                a->send(Message{Kind::event,
                                {{"thread", t}, {"seq", i}, {"size", size}},
                                std::string(size, static_cast<char>('A' + t))});
            }
        });
    }
    std::map<int, int> next_seq;
    for (int n = 0; n < threads * per_thread; ++n) {
        auto message = b->receive();
        ASSERT_TRUE(message);
        const int t = message->header["thread"];
        const std::size_t size = message->header["size"];
        EXPECT_EQ(message->header["seq"], next_seq[t]++);
        ASSERT_EQ(message->body.size(), size);
        EXPECT_EQ(message->body.find_first_not_of(static_cast<char>('A' + t)), std::string::npos)
            << "bytes of another message inside thread " << t << "'s body";
    }
    for (auto& sender : senders) sender.join();
}

TEST_P(ProtocolChannel, CloseWakesABlockedReceive) {
    auto [a, b] = channel_pair(GetParam());
    auto receiver = std::async(std::launch::async, [&a = a] { return a->receive(); });
    EXPECT_EQ(receiver.wait_for(50ms), std::future_status::timeout);  // nothing sent yet
    a->close();
    ASSERT_EQ(receiver.wait_for(kHangGuard), std::future_status::ready);
    EXPECT_FALSE(receiver.get());
    EXPECT_TRUE(a->closed());
    EXPECT_FALSE(a->receive());
    EXPECT_NE(error_of([&a = a] { a->send(Message{}); }).find("closed"), std::string::npos);
}

TEST_P(ProtocolChannel, CloseWakesASendBlockedOnAPeerThatDoesNotRead) {
    auto [a, b] = channel_pair(GetParam());
    // 8 MB cannot fit in any kernel buffer, so the send blocks until close().
    auto sender = std::async(std::launch::async, [&a = a] {
        return error_of([&] { a->send(Message{Kind::event, {}, std::string(8 << 20, 'x')}); });
    });
    EXPECT_EQ(sender.wait_for(50ms), std::future_status::timeout);
    a->close();
    ASSERT_EQ(sender.wait_for(kHangGuard), std::future_status::ready);
    // Whether the close lands in poll or between poll and the write (EPIPE on a socket that
    // close() shut down), the sender is told the channel closed.
    const std::string error = sender.get();
    EXPECT_NE(error.find("closed"), std::string::npos) << error;
}

TEST_P(ProtocolChannel, SendDeadlineOnAStuckPeer) {
    auto [a, b] = channel_pair(GetParam());
    // Fill the kernel buffer with a message too big to fit: it times out midway and closes.
    const std::string reason = error_of([&a = a] {
        a->send(Message{Kind::event, {}, std::string(8 << 20, 'x')}, Channel::Clock::now() + 100ms);
    });
    EXPECT_NE(reason.find("timed out"), std::string::npos) << reason;
    EXPECT_TRUE(a->closed());
}

TEST_P(ProtocolChannel, ReceiveDeadlineTimesOutAndTheChannelStaysUsable) {
    auto ends = raw_ends(GetParam());
    Channel channel(ends.a_read.release(), ends.a_write.release());
    // Half a frame arrives before the deadline; it must survive the timeout.
    const std::string frame = encode(Message{Kind::event, {{"n", 1}}, "payload"});
    ASSERT_TRUE(write_all(ends.b_write.get(), frame.data(), 12));
    EXPECT_THROW(channel.receive(Channel::Clock::now() + 50ms), TimeoutError);
    EXPECT_FALSE(channel.closed());
    ASSERT_TRUE(write_all(ends.b_write.get(), frame.data() + 12, frame.size() - 12));
    auto message = channel.receive(Channel::Clock::now() + kHangGuard);
    ASSERT_TRUE(message);
    EXPECT_EQ(message->header["n"], 1);
    EXPECT_EQ(message->body, "payload");
}

TEST_P(ProtocolChannel, HandshakeExchangesHellos) {
    auto [a, b] = channel_pair(GetParam());
    auto agent = std::async(std::launch::async, [&b = b] {
        return handshake(*b, "agent", {{"display", ":5"}, {"screen", {{"width", 640}}}});
    });
    const json agent_hello = handshake(*a, "host");
    const json host_hello = agent.get();
    EXPECT_EQ(agent_hello["protocol"], "deskbox-agent");
    EXPECT_EQ(agent_hello["version"], 1);
    EXPECT_EQ(agent_hello["role"], "agent");
    EXPECT_EQ(agent_hello["display"], ":5");
    EXPECT_EQ(agent_hello["screen"]["width"], 640);
    EXPECT_EQ(host_hello["role"], "host");
    // Afterwards the channel carries ordinary messages.
    a->send(Message{Kind::request, {{"id", 1}}, ""});
    EXPECT_EQ(b->receive()->header["id"], 1);
}

// Handshake failures, with the peer side played by hand.
std::string handshake_error_with_peer_hello(const json& peer_hello, Kind kind = Kind::hello) {
    auto [a, b] = channel_pair(Transport::socketpair);
    b->send(Message{kind, peer_hello, ""});
    const std::string error = error_of([&a = a] { handshake(*a, "host", {}, 10s); });
    EXPECT_TRUE(a->closed()) << "a failed handshake closes the channel";
    return error;
}

TEST(ProtocolHandshake, RefusesAnotherVersion) {
    const std::string error = handshake_error_with_peer_hello(
        {{"protocol", "deskbox-agent"}, {"version", 2}, {"role", "agent"}});
    EXPECT_NE(error.find("version 2"), std::string::npos) << error;
    EXPECT_NE(error.find("version 1"), std::string::npos) << error;
}

TEST(ProtocolHandshake, RefusesAnotherProtocolOrAMalformedHello) {
    std::string error =
        handshake_error_with_peer_hello({{"protocol", "vnc"}, {"version", 1}, {"role", "agent"}});
    EXPECT_NE(error.find("'protocol'"), std::string::npos) << error;
    EXPECT_NE(error.find("\"vnc\""), std::string::npos) << error;
    error = handshake_error_with_peer_hello({{"protocol", "deskbox-agent"}, {"version", "1"}});
    EXPECT_NE(error.find("'version' must be an integer"), std::string::npos) << error;
    error = handshake_error_with_peer_hello({{"protocol", "deskbox-agent"}, {"version", 1}});
    EXPECT_NE(error.find("'role'"), std::string::npos) << error;
    error = handshake_error_with_peer_hello({{"id", 1}, {"method", "ping"}}, Kind::request);
    EXPECT_NE(error.find("expected a hello message first, got a request"), std::string::npos)
        << error;
}

TEST(ProtocolHandshake, TimesOutOnASilentPeerAndFailsOnEof) {
    auto [a, b] = channel_pair(Transport::socketpair);
    std::string error = error_of([&a = a] { handshake(*a, "host", {}, 100ms); });
    EXPECT_NE(error.find("no hello from the peer within 100 ms"), std::string::npos) << error;

    // The peer stops writing without a hello: EOF while our own hello still goes out.
    auto ends = raw_ends(Transport::socketpair);
    ASSERT_EQ(::shutdown(ends.b_write.get(), SHUT_WR), 0);
    Channel half_closed(ends.a_read.release(), ends.a_write.release());
    error = error_of([&] { handshake(half_closed, "host", {}, 10s); });
    EXPECT_NE(error.find("closed the channel before sending its hello"), std::string::npos)
        << error;

    // The peer is gone entirely: our hello cannot even be sent.
    auto [c, d] = channel_pair(Transport::socketpair);
    d.reset();
    error = error_of([&c = c] { handshake(*c, "host", {}, 10s); });
    EXPECT_NE(error.find("handshake: cannot send hello"), std::string::npos) << error;
}

TEST(ProtocolChannelEof, CleanEofAfterWholeFramesIsNullopt) {
    for (Transport transport : {Transport::socketpair, Transport::pipes}) {
        SCOPED_TRACE(testing::transport_name(transport));
        auto ends = raw_ends(transport);
        Channel channel(ends.a_read.release(), ends.a_write.release());
        const std::string bytes = encode(Message{Kind::event, {{"n", 1}}, "x"}) +
                                  encode(Message{Kind::event, {{"n", 2}}, ""});
        ASSERT_TRUE(write_all(ends.b_write.get(), bytes.data(), bytes.size()));
        ends.b_write.reset();
        ends.b_read.reset();
        EXPECT_EQ(channel.receive()->header["n"], 1);
        EXPECT_EQ(channel.receive()->header["n"], 2);
        EXPECT_FALSE(channel.receive());
    }
}

TEST(ProtocolChannelEof, EofInsideAFrameIsATruncatedFrameError) {
    for (Transport transport : {Transport::socketpair, Transport::pipes}) {
        SCOPED_TRACE(testing::transport_name(transport));
        auto ends = raw_ends(transport);
        Channel channel(ends.a_read.release(), ends.a_write.release());
        const std::string frame = encode(Message{Kind::event, {{"n", 1}}, std::string(100, 'x')});
        ASSERT_TRUE(write_all(ends.b_write.get(), frame.data(), frame.size() - 10));
        ends.b_write.reset();
        ends.b_read.reset();
        const std::string error = error_of([&] { channel.receive(); });
        EXPECT_NE(error.find("truncated frame"), std::string::npos) << error;
        EXPECT_TRUE(channel.closed());
        EXPECT_EQ(channel.close_reason(), error);
    }
}

TEST(ProtocolChannelEof, GarbageClosesTheChannelWithTheReason) {
    auto ends = raw_ends(Transport::socketpair);
    Channel channel(ends.a_read.release(), ends.a_write.release());
    const std::string garbage("\x07\x00\x00\x00\x2a{}xxxxxxx", 14);
    ASSERT_TRUE(write_all(ends.b_write.get(), garbage.data(), garbage.size()));
    const std::string error = error_of([&] { channel.receive(); });
    EXPECT_NE(error.find("unknown message kind 42"), std::string::npos) << error;
    EXPECT_TRUE(channel.closed());
    EXPECT_THROW(channel.send(Message{}), ProtocolError);
}

TEST(ProtocolChannelEof, WritingToAVanishedPeerIsAnErrorNotSigpipe) {
    // With the default disposition SIGPIPE would kill this test process.
    struct sigaction previous {};
    struct sigaction deflt {};
    deflt.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &deflt, &previous);
    for (Transport transport : {Transport::socketpair, Transport::pipes, Transport::pty}) {
        SCOPED_TRACE(testing::transport_name(transport));
        auto ends = raw_ends(transport);
        Channel channel(ends.a_read.release(), ends.a_write.release());
        ends.b_read.reset();
        ends.b_write.reset();
        const std::string error = error_of([&] {
            channel.send(Message{Kind::event, {}, std::string(1 << 20, 'x')});
        });
        EXPECT_NE(error.find("write failed"), std::string::npos) << error;
        EXPECT_TRUE(channel.closed());
        EXPECT_FALSE(sigpipe_pending());
    }
    sigaction(SIGPIPE, &previous, nullptr);
}

TEST(ProtocolChannelEof, AMessageOverTheLimitsIsRefusedWithoutClosing) {
    auto [a, b] = channel_pair(Transport::socketpair,
                               Limits{.max_header_bytes = 100, .max_body_bytes = 1000});
    const std::string error = error_of([&a = a] {
        a->send(Message{Kind::event, {}, std::string(1001, 'x')});
    });
    EXPECT_NE(error.find("body of 1001 bytes exceeds the limit of 1000"), std::string::npos);
    EXPECT_FALSE(a->closed());
    a->send(Message{Kind::event, {{"ok", true}}, std::string(1000, 'x')});
    EXPECT_EQ(b->receive()->header["ok"], true);
}

TEST(ProtocolChannelEof, OneFdServesBothDirections) {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    Channel a(fds[0], fds[0]);
    Channel b(fds[1], fds[1]);
    a.send(Message{Kind::request, {{"id", 1}}, "ping"});
    auto request = b.receive();
    ASSERT_TRUE(request);
    EXPECT_EQ(request->body, "ping");
    b.send(Message{Kind::response, {{"id", 1}}, "pong"});
    EXPECT_EQ(a.receive()->body, "pong");
}

TEST(ProtocolChannelEof, InvalidFdsAreRefused) {
    EXPECT_THROW(Channel(-1, -1), ProtocolError);
}

}  // namespace
}  // namespace deskbox::protocol
