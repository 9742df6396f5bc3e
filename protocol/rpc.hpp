// Requests, responses, events and byte streams on top of a Channel.
//
// Host side:                                  Agent side:
//   auto ch = std::make_unique<Channel>(...);   auto ch = std::make_unique<Channel>(...);
//   handshake(*ch, "host");                     handshake(*ch, "agent", {{"display", ":1"}});
//   RpcClient client(std::move(ch));            RpcServer server(std::move(ch));
//   client.on_event(...); client.on_close(...); server.handle("ping", ..., Dispatch::concurrent);
//   client.start();                             server.start();
//   Reply r = client.call("ping");              server.send_event(...); server.wait();
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "protocol/channel.hpp"

namespace deskbox::protocol {

// An error answer. Handlers throw it (RpcServer sends it as the error response) and
// RpcClient::call throws it when the agent answered with an error.
class RpcError : public std::runtime_error {
  public:
    // `details` (an object) adds members to the error object, e.g. {"completed":3}.
    RpcError(std::string code, const std::string& message, std::string field = {},
             nlohmann::json details = nlohmann::json::object());
    const std::string& code() const { return code_; }
    const std::string& field() const { return field_; }  // empty when none
    const nlohmann::json& details() const { return details_; }

    nlohmann::json to_json() const;  // {"code","message","field"?,...details}
    // Tolerates a malformed error object from the peer (says so in the message).
    static RpcError from_json(const nlohmann::json& error);

  private:
    std::string code_;
    std::string field_;
    nlohmann::json details_;
};

struct Request {
    std::uint64_t id = 0;
    std::string method;
    nlohmann::json params = nlohmann::json::object();
    std::string body;
    std::stop_token stop;  // requested when the server closes; long handlers may give up early
};

struct Reply {
    nlohmann::json result = nlohmann::json::object();
    std::string body;
};

// One piece of a multiplexed byte stream (kind=stream): {"stream":N,"eof"?:true} + data.
struct StreamChunk {
    std::uint64_t stream = 0;
    std::string data;
    bool eof = false;
};
Message stream_message(std::uint64_t stream, std::string data, bool eof = false);
// Throws ProtocolError naming the bad field.
StreamChunk parse_stream_message(Message&& message);

using EventCallback = std::function<void(Message&&)>;
using StreamCallback = std::function<void(StreamChunk&&)>;
using CloseCallback = std::function<void(const std::string& reason)>;

// Host side. Owns the channel and a reader thread; calls are thread-safe from any thread.
// Callbacks run on the reader thread, must be set before start(), and must not destroy the
// client. A callback that throws closes the channel (the reason names the exception).
class RpcClient {
  public:
    static constexpr std::chrono::milliseconds kDefaultTimeout{30'000};

    explicit RpcClient(std::unique_ptr<Channel> channel);
    ~RpcClient();  // closes the channel, fails pending calls, joins its threads
    RpcClient(const RpcClient&) = delete;
    RpcClient& operator=(const RpcClient&) = delete;

    // A consumer done with a large event body (a damage rectangle copied into the mirror) may
    // hand it back with channel().recycle(std::move(event.body)) to save fresh allocations.
    void on_event(EventCallback callback);
    void on_stream(StreamCallback callback);
    void on_close(CloseCallback callback);  // once, with why the channel closed
    void start();

    // Throws RpcError (the agent answered with an error), ProtocolError (the channel died or
    // is closed; the message says why) or TimeoutError (no answer within `timeout`, which
    // covers sending too). `params` must be an object (null counts as {}).
    Reply call(std::string_view method, nlohmann::json params = nlohmann::json::object(),
               std::string body = {}, std::chrono::milliseconds timeout = kDefaultTimeout);
    // The same errors arrive through the future. Sends on the calling thread before returning.
    std::future<Reply> call_async(std::string_view method,
                                  nlohmann::json params = nlohmann::json::object(),
                                  std::string body = {},
                                  std::chrono::milliseconds timeout = kDefaultTimeout);

    void send_stream(std::uint64_t stream, std::string data, bool eof = false);
    void close();
    Channel& channel() { return *channel_; }

  private:
    struct Pending {
        std::promise<Reply> promise;
        Channel::Clock::time_point deadline;
        std::chrono::milliseconds timeout;
        std::string method;
    };
    void read_loop();
    void timer_loop();
    void dispatch(Message&& message);
    std::optional<Pending> take_pending(std::uint64_t id);
    void fail_all(const std::string& reason);

    std::unique_ptr<Channel> channel_;
    EventCallback on_event_;
    StreamCallback on_stream_;
    CloseCallback on_close_;

    std::mutex mutex_;
    std::condition_variable timer_wake_;
    std::map<std::uint64_t, Pending> pending_;
    std::uint64_t next_id_ = 1;
    std::optional<std::string> dead_;  // why the channel died, once it has
    bool stopping_ = false;
    bool started_ = false;
    std::thread reader_;
    std::thread timer_;
};

enum class Dispatch {
    concurrent,  // on a worker from a small pool: a long handler does not hold up others
    serial,      // in arrival order on one dedicated thread, shared by every serial method
};

struct RpcServerOptions {
    std::size_t max_workers = 8;  // concurrent handlers at once; more requests wait in a queue
    // A worker idle this long ends (one stays): in a sandbox every thread holds one of its
    // limits.pids slots, so a burst must not keep dozens of them for the agent's lifetime.
    std::chrono::milliseconds idle_timeout{10000};
};

// Agent side: dispatches requests to handlers and sends events. Unknown methods get error
// "unknown_method"; a handler's RpcError becomes the error response; any other exception
// becomes "internal". Handlers, the stream and close callbacks are set before start().
class RpcServer {
  public:
    using Handler = std::function<Reply(const Request&)>;

    explicit RpcServer(std::unique_ptr<Channel> channel, RpcServerOptions options = {});
    // Closes the channel, drops queued requests and waits for running handlers (their
    // Request::stop is requested first).
    ~RpcServer();
    RpcServer(const RpcServer&) = delete;
    RpcServer& operator=(const RpcServer&) = delete;

    void handle(std::string method, Handler handler, Dispatch dispatch = Dispatch::concurrent);
    void on_stream(StreamCallback callback);  // runs on the reader thread
    void on_close(CloseCallback callback);
    void start();
    // Blocks until the channel closes; returns why.
    std::string wait();

    // Thread-safe. Throw ProtocolError if the channel is closed or the message breaks limits.
    void send_event(nlohmann::json header, std::string body = {});
    void send_stream(std::uint64_t stream, std::string data, bool eof = false);
    void close();
    Channel& channel() { return *channel_; }
    // Concurrent workers alive now (the serial one and the reader not counted).
    std::size_t worker_count();

  private:
    struct Route {
        Handler handler;
        Dispatch dispatch;
    };
    struct Job {
        Request request;
        const Route* route;
    };
    void read_loop();
    void dispatch(Message&& message);
    void enqueue(Job job);
    void worker_loop(bool serial);
    void run(Job& job);
    void send_response(Message&& response);
    void send_error(std::uint64_t id, const RpcError& error);
    void join_exited_locked();  // joins the workers that left on idle

    std::unique_ptr<Channel> channel_;
    RpcServerOptions options_;
    std::map<std::string, Route, std::less<>> routes_;
    StreamCallback on_stream_;
    CloseCallback on_close_;
    std::stop_source stop_;

    std::mutex mutex_;
    std::condition_variable work_ready_;    // concurrent workers wait here
    std::condition_variable serial_ready_;  // the serial worker waits here
    std::condition_variable closed_cv_;
    std::deque<Job> queue_;         // concurrent jobs
    std::deque<Job> serial_queue_;  // serial jobs, in arrival order
    std::size_t idle_workers_ = 0;
    bool stopping_ = false;
    bool started_ = false;
    std::optional<std::string> close_reason_;
    std::list<std::thread> workers_;
    std::vector<std::thread::id> exited_;  // workers that left on idle, to be joined
    std::thread serial_worker_;
    std::thread reader_;
};

}  // namespace deskbox::protocol
