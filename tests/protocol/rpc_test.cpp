#include "protocol/rpc.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/child_process.hpp"
#include "tests/protocol/transports.hpp"

namespace deskbox::protocol {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// Generous bound for "must not hang"; never a performance expectation.
constexpr auto kHangGuard = 60s;

std::string pattern(std::size_t size, unsigned seed) {
    std::string out(size, '\0');
    for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<char>((i * 131 + seed) >> 3);
    return out;
}

// A one-shot latch a test opens; waiting handlers block until then.
class Gate {
  public:
    void open() {
        std::call_once(once_, [&] { promise_.set_value(); });
    }
    void wait() const { future_.wait(); }
    bool wait_for(std::chrono::milliseconds timeout) const {
        return future_.wait_for(timeout) == std::future_status::ready;
    }

  private:
    std::once_flag once_;
    std::promise<void> promise_;
    std::shared_future<void> future_ = promise_.get_future().share();
};

template <typename T>
bool ready(std::future<T>& future) {
    return future.wait_for(kHangGuard) == std::future_status::ready;
}

// A host (RpcClient) and an agent (RpcServer) joined by a socketpair after a real handshake.
class ProtocolRpc : public ::testing::Test {
  protected:
    void SetUp() override {
        auto pair = testing::channel_pair(testing::Transport::socketpair);
        auto agent_hello =
            std::async(std::launch::async, [&] { return handshake(*pair.b, "agent"); });
        handshake(*pair.a, "host");
        agent_hello.get();
        server = std::make_unique<RpcServer>(std::move(pair.b), server_options);
        client = std::make_unique<RpcClient>(std::move(pair.a));

        server->handle("ping", [](const Request&) { return Reply{}; });
        server->handle("echo", [](const Request& request) {
            return Reply{{{"params", request.params}, {"size", request.body.size()}}, request.body};
        });
        server->handle("fail.field", [](const Request&) -> Reply {
            throw RpcError("invalid_action", "x 5000 is outside the 1280x720 screen",
                           "actions[2].x", {{"completed", 2}});
        });
        server->handle("fail.internal",
                       [](const Request&) -> Reply { throw std::runtime_error("boom"); });
        server->handle("block", [this](const Request&) {
            entered.open();
            release.wait();
            return Reply{{{"released", true}}, {}};
        });
        server->handle(
            "serial.block",
            [this](const Request&) {
                serial_entered.open();
                release.wait();
                return Reply{};
            },
            Dispatch::serial);
        server->handle(
            "serial.append",
            [this](const Request& request) {
                const int now = ++in_flight;
                int seen = max_in_flight.load();
                while (now > seen && !max_in_flight.compare_exchange_weak(seen, now)) {
                }
                std::this_thread::yield();
                {
                    std::lock_guard lock(order_mutex);
                    order.emplace_back(request.params["thread"], request.params["seq"]);
                }
                --in_flight;
                return Reply{};
            },
            Dispatch::serial);
    }

    void TearDown() override {
        release.open();  // never leave a handler blocked (the server's destructor waits for them)
        client.reset();
        server.reset();
    }

    void start() {
        server->start();
        client->start();
    }

    RpcServerOptions server_options;
    Gate entered, serial_entered, release;
    std::promise<std::string> closed;
    std::atomic<int> in_flight{0}, max_in_flight{0};
    std::mutex order_mutex;
    std::vector<std::pair<int, int>> order;
    std::unique_ptr<RpcServer> server;
    std::unique_ptr<RpcClient> client;
};

TEST_F(ProtocolRpc, PingAndAnEightMegabyteBodyBothWays) {
    start();
    EXPECT_EQ(client->call("ping").result, json::object());
    const std::string body = pattern(8 << 20, 3);
    Reply reply = client->call("echo", {{"path", "/tmp/x"}}, body);
    EXPECT_EQ(reply.result["params"]["path"], "/tmp/x");
    EXPECT_EQ(reply.result["size"], body.size());
    EXPECT_TRUE(reply.body == body);
}

TEST_F(ProtocolRpc, UnknownMethodIsAnErrorNamingTheField) {
    start();
    try {
        client->call("no.such.method");
        FAIL() << "no error";
    } catch (const RpcError& e) {
        EXPECT_EQ(e.code(), "unknown_method");
        EXPECT_EQ(e.field(), "method");
        EXPECT_NE(std::string(e.what()).find("no.such.method"), std::string::npos);
    }
}

TEST_F(ProtocolRpc, AHandlerErrorCarriesCodeMessageFieldAndDetails) {
    start();
    try {
        client->call("fail.field");
        FAIL() << "no error";
    } catch (const RpcError& e) {
        EXPECT_EQ(e.code(), "invalid_action");
        EXPECT_EQ(e.field(), "actions[2].x");
        EXPECT_STREQ(e.what(), "x 5000 is outside the 1280x720 screen");
        EXPECT_EQ(e.details(), json({{"completed", 2}}));
    }
    try {
        client->call("fail.internal");
        FAIL() << "no error";
    } catch (const RpcError& e) {
        EXPECT_EQ(e.code(), "internal");
        EXPECT_STREQ(e.what(), "boom");
        EXPECT_EQ(e.field(), "");
    }
    EXPECT_NO_THROW(client->call("ping"));  // errors are answers, the channel lives on
}

TEST_F(ProtocolRpc, ConcurrentCallersEachGetTheirOwnAnswer) {
    start();
    std::vector<std::thread> callers;
    std::atomic<int> wrong{0};
    for (int t = 0; t < 8; ++t) {
        callers.emplace_back([&, t] {
            for (int i = 0; i < 100; ++i) {
                const json params = {{"thread", t}, {"i", i}};
                const std::string body = std::to_string(t * 1000 + i);
                Reply reply = client->call("echo", params, body);
                if (reply.result["params"] != params || reply.body != body) ++wrong;
            }
        });
    }
    for (auto& caller : callers) caller.join();
    EXPECT_EQ(wrong, 0);
}

TEST_F(ProtocolRpc, SerialMethodsRunOneAtATimeInArrivalOrder) {
    start();
    const int threads = 4, per_thread = 100;
    std::vector<std::thread> callers;
    for (int t = 0; t < threads; ++t) {
        callers.emplace_back([&, t] {
            std::vector<std::future<Reply>> answers;
            for (int i = 0; i < per_thread; ++i) {
                answers.push_back(client->call_async("serial.append", {{"thread", t}, {"seq", i}}));
                if (i % 10 == 0) answers.push_back(client->call_async("echo"));  // concurrent mix
            }
            for (auto& answer : answers) answer.get();
        });
    }
    for (auto& caller : callers) caller.join();
    ASSERT_EQ(order.size(), static_cast<std::size_t>(threads * per_thread));
    std::map<int, int> next;
    for (auto [thread, seq] : order) EXPECT_EQ(seq, next[thread]++) << "thread " << thread;
    EXPECT_EQ(max_in_flight, 1);
}

TEST_F(ProtocolRpc, ALongHandlerDoesNotBlockAPing) {
    start();
    auto blocked = client->call_async("block");
    auto serial_blocked = client->call_async("serial.block");
    ASSERT_TRUE(entered.wait_for(kHangGuard));
    ASSERT_TRUE(serial_entered.wait_for(kHangGuard));
    // Both long handlers are running; a ping still gets through (it would time out otherwise).
    EXPECT_NO_THROW(client->call("ping", {}, {}, kHangGuard));
    EXPECT_EQ(blocked.wait_for(0s), std::future_status::timeout);
    release.open();
    ASSERT_TRUE(ready(blocked));
    EXPECT_EQ(blocked.get().result["released"], true);
    ASSERT_TRUE(ready(serial_blocked));
    serial_blocked.get();
}

// Workers idle past the timeout leave (in a sandbox each thread holds a limits.pids slot);
// the last one stays, and a later burst grows the pool again.
class ProtocolRpcIdle : public ProtocolRpc {
  protected:
    void SetUp() override {
        server_options.idle_timeout = 100ms;
        ProtocolRpc::SetUp();
        server->handle("nap", [](const Request&) {
            std::this_thread::sleep_for(500ms);
            return Reply{};
        });
    }
    bool workers_become(std::size_t n) {
        for (auto end = std::chrono::steady_clock::now() + kHangGuard;
             std::chrono::steady_clock::now() < end; std::this_thread::sleep_for(10ms))
            if (server->worker_count() == n) return true;
        return false;
    }
};

TEST_F(ProtocolRpcIdle, IdleWorkersLeaveAndABurstBringsThemBack) {
    start();
    std::vector<std::future<Reply>> calls;
    for (int i = 0; i < 6; ++i) calls.push_back(client->call_async("block"));
    ASSERT_TRUE(workers_become(6)) << server->worker_count();
    release.open();
    for (auto& c : calls) {
        ASSERT_TRUE(ready(c));
        EXPECT_EQ(c.get().result["released"], true);
    }
    ASSERT_TRUE(workers_become(1)) << server->worker_count();
    EXPECT_NO_THROW(client->call("ping", {}, {}, kHangGuard));
    calls.clear();
    for (int i = 0; i < 3; ++i) calls.push_back(client->call_async("nap"));
    EXPECT_TRUE(workers_become(3)) << server->worker_count();
    for (auto& c : calls) ASSERT_TRUE(ready(c));
    EXPECT_TRUE(workers_become(1)) << server->worker_count();
}

TEST_F(ProtocolRpc, ACallTimesOutAndTheChannelStaysUsable) {
    start();
    try {
        client->call("block", {}, {}, 100ms);
        FAIL() << "no timeout";
    } catch (const TimeoutError& e) {
        EXPECT_NE(std::string(e.what()).find("'block' timed out after 100 ms"), std::string::npos)
            << e.what();
    }
    release.open();  // its late answer arrives for an id nobody waits for any more
    EXPECT_NO_THROW(client->call("ping"));
    EXPECT_EQ(client->call("echo", {{"n", 1}}).result["params"]["n"], 1);
}

TEST_F(ProtocolRpc, ClosingTheClientFailsPendingCallsAtOnce) {
    client->on_close([&](const std::string& reason) { closed.set_value(reason); });
    start();
    auto pending = client->call_async("block", {}, {}, 600s);
    ASSERT_TRUE(entered.wait_for(kHangGuard));
    client->close();
    ASSERT_TRUE(ready(pending));
    EXPECT_THROW(pending.get(), ProtocolError);
    auto reason = closed.get_future();
    ASSERT_TRUE(ready(reason));
    EXPECT_EQ(reason.get(), "closed locally");
    EXPECT_THROW(client->call("ping"), ProtocolError);
}

TEST_F(ProtocolRpc, EventsFromManyThreadsArriveWhole) {
    const int threads = 4, per_thread = 100;
    std::mutex mutex;
    std::condition_variable arrived;
    std::map<int, int> next;
    int count = 0, bad = 0;
    client->on_event([&](Message&& event) {
        std::lock_guard lock(mutex);
        const int t = event.header["thread"];
        if (event.header["event"] != "damage" || event.header["seq"] != next[t]++ ||
            event.body != std::string(event.header["size"].get<std::size_t>(), char('a' + t)))
            ++bad;
        ++count;
        arrived.notify_all();
    });
    start();
    std::vector<std::thread> senders;
    for (int t = 0; t < threads; ++t) {
        senders.emplace_back([&, t] {
            for (int i = 0; i < per_thread; ++i) {
                const std::size_t size = static_cast<std::size_t>((i * 4099) % 70000);
                server->send_event({{"event", "damage"}, {"thread", t}, {"seq", i}, {"size", size}},
                                   std::string(size, char('a' + t)));
            }
        });
    }
    for (auto& sender : senders) sender.join();
    std::unique_lock lock(mutex);
    ASSERT_TRUE(arrived.wait_for(lock, kHangGuard, [&] { return count == threads * per_thread; }));
    EXPECT_EQ(bad, 0);
}

TEST_F(ProtocolRpc, StreamsFlowBothWaysWithEof) {
    std::mutex mutex;
    std::condition_variable arrived;
    std::string at_agent, at_host;
    bool agent_eof = false, host_eof = false;
    server->on_stream([&](StreamChunk&& chunk) {
        std::lock_guard lock(mutex);
        EXPECT_EQ(chunk.stream, 7u);
        at_agent += chunk.data;
        agent_eof = agent_eof || chunk.eof;
        arrived.notify_all();
        if (chunk.eof) server->send_stream(7, "reply:" + at_agent, true);  // echo it back
    });
    client->on_stream([&](StreamChunk&& chunk) {
        std::lock_guard lock(mutex);
        at_host += chunk.data;
        host_eof = host_eof || chunk.eof;
        arrived.notify_all();
    });
    start();
    client->send_stream(7, "GET / HTTP/1.1\r\n");
    client->send_stream(7, std::string("\0\xff", 2));
    client->send_stream(7, "", true);
    std::unique_lock lock(mutex);
    ASSERT_TRUE(arrived.wait_for(lock, kHangGuard, [&] { return host_eof; }));
    EXPECT_TRUE(agent_eof);
    EXPECT_EQ(at_agent, std::string("GET / HTTP/1.1\r\n\0\xff", 18));
    EXPECT_EQ(at_host, "reply:" + at_agent);
}

TEST_F(ProtocolRpc, ServerWaitReturnsWhenTheHostGoesAway) {
    start();
    EXPECT_NO_THROW(client->call("ping"));
    client.reset();  // closes the host end
    const std::string reason = server->wait();
    EXPECT_FALSE(reason.empty());
}

TEST(ProtocolRpcPeer, ThePeerProcessDyingFailsPendingCallsPromptly) {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    UniqueFd agent_end(fds[1]);
    SpawnOptions options;
    options.argv = {"sleep", "600"};
    options.keep_fds = {agent_end.get()};
    ChildProcess agent = ChildProcess::spawn(options);
    agent_end.reset();  // only the child holds the agent's end now

    RpcClient client(std::make_unique<Channel>(fds[0], fds[0]));
    std::promise<std::string> closed;
    client.on_close([&](const std::string& reason) { closed.set_value(reason); });
    client.start();
    auto sync = client.call_async("screen.sync");
    auto command = client.call_async("exec.run", {{"argv", {"sleep", "1000"}}}, "", 600s);
    EXPECT_EQ(sync.wait_for(0s), std::future_status::timeout);

    agent.signal(SIGKILL);
    agent.wait();
    ASSERT_TRUE(ready(sync));
    ASSERT_TRUE(ready(command));
    EXPECT_THROW(sync.get(), ProtocolError);
    EXPECT_THROW(command.get(), ProtocolError);
    auto reason = closed.get_future();
    ASSERT_TRUE(ready(reason));
    const std::string why = reason.get();
    EXPECT_FALSE(why.empty());
    try {
        client.call("ping");
        FAIL() << "a call on a dead channel must fail";
    } catch (const ProtocolError& e) {
        EXPECT_EQ(std::string(e.what()), why) << "later calls report the same cause";
    }
}

TEST(ProtocolRpcPeer, MalformedRequestsGetBadRequestAndAMissingIdClosesTheChannel) {
    auto [host, agent] = testing::channel_pair(testing::Transport::socketpair);
    RpcServer server(std::move(agent));
    server.handle("echo", [](const Request& r) { return Reply{r.params, {}}; });
    server.start();
    auto answer = [&host = host](json request) {
        host->send(Message{Kind::request, std::move(request), ""});
        auto response = host->receive();
        EXPECT_TRUE(response);
        return response ? response->header : json();
    };
    json response = answer({{"id", 1}, {"method", 5}});
    EXPECT_EQ(response["id"], 1);
    EXPECT_EQ(response["error"]["code"], "bad_request");
    EXPECT_EQ(response["error"]["field"], "method");
    response = answer({{"id", 2}, {"method", "echo"}, {"params", {1, 2}}});
    EXPECT_EQ(response["error"]["code"], "bad_request");
    EXPECT_EQ(response["error"]["field"], "params");
    response = answer({{"id", 3}, {"method", "echo"}, {"params", {{"a", 1}}}});
    EXPECT_EQ(response["result"], json({{"a", 1}}));

    host->send(Message{Kind::request, {{"method", "echo"}}, ""});
    const std::string reason = server.wait();
    EXPECT_NE(reason.find("request without a numeric 'id'"), std::string::npos) << reason;
    EXPECT_FALSE(host->receive()) << "the agent's end closes";
}

TEST(ProtocolRpcPeer, AMalformedResponseClosesTheClientWithTheReason) {
    auto [host, agent] = testing::channel_pair(testing::Transport::socketpair);
    RpcClient client(std::move(host));
    std::promise<std::string> closed;
    client.on_close([&](const std::string& reason) { closed.set_value(reason); });
    client.start();
    auto pending = client.call_async("ping");
    auto request = agent->receive();
    ASSERT_TRUE(request);
    EXPECT_EQ(request->header["method"], "ping");
    EXPECT_EQ(request->header["params"], json::object());
    agent->send(Message{Kind::response, {{"result", json::object()}}, ""});
    ASSERT_TRUE(ready(pending));
    EXPECT_THROW(pending.get(), ProtocolError);
    auto reason = closed.get_future();
    ASSERT_TRUE(ready(reason));
    EXPECT_NE(reason.get().find("response without a numeric 'id'"), std::string::npos);
}

TEST(ProtocolRpcPeer, AResponseOverTheLimitsBecomesAnInternalError) {
    // The agent's channel refuses bodies over 1 KiB; the handler returns 2 KiB.
    auto ends = testing::raw_ends(testing::Transport::socketpair);
    auto small_agent = std::make_unique<Channel>(ends.b_read.release(), ends.b_write.release(),
                                                 Limits{.max_body_bytes = 1024});
    RpcServer server(std::move(small_agent));
    server.handle("big", [](const Request&) { return Reply{{}, std::string(2048, 'x')}; });
    server.handle("ping", [](const Request&) { return Reply{}; });
    server.start();
    RpcClient client(std::make_unique<Channel>(ends.a_read.release(), ends.a_write.release()));
    client.start();
    try {
        client.call("big");
        FAIL() << "no error";
    } catch (const RpcError& e) {
        EXPECT_EQ(e.code(), "internal");
        EXPECT_NE(std::string(e.what()).find("response could not be sent"), std::string::npos)
            << e.what();
    }
    EXPECT_NO_THROW(client.call("ping"));
}

TEST(ProtocolRpcPeer, MisuseIsReportedNotHung) {
    auto [host, agent] = testing::channel_pair(testing::Transport::socketpair);
    RpcClient client(std::move(host));
    EXPECT_THROW(client.call("ping"), std::logic_error);  // before start()
    client.start();
    EXPECT_THROW(client.call("ping", json::array()), std::invalid_argument);
    EXPECT_THROW(client.on_event([](Message&&) {}), std::logic_error);
}

}  // namespace
}  // namespace deskbox::protocol
