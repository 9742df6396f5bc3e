#include "protocol/rpc.hpp"

#include <algorithm>
#include <exception>
#include <system_error>

namespace deskbox::protocol {
namespace {

using nlohmann::json;

// The request/response id: a JSON unsigned integer (nlohmann parses non-negative integers so).
std::optional<std::uint64_t> message_id(const json& header) {
    const auto id = header.find("id");
    if (id == header.end() || !id->is_number_unsigned()) return std::nullopt;
    return id->get<std::uint64_t>();
}

// Callbacks must not throw out of a thread; there is nobody left to tell at that point.
template <typename Callback, typename... Args>
void call_quietly(const Callback& callback, Args&&... args) {
    if (!callback) return;
    try {
        callback(std::forward<Args>(args)...);
    } catch (...) {
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// RpcError, streams

RpcError::RpcError(std::string code, const std::string& message, std::string field,
                   nlohmann::json details)
    : std::runtime_error(message),
      code_(std::move(code)),
      field_(std::move(field)),
      details_(details.is_object() ? std::move(details) : json::object()) {}

json RpcError::to_json() const {
    json error = details_;
    error["code"] = code_;
    error["message"] = what();
    if (!field_.empty()) error["field"] = field_;
    return error;
}

RpcError RpcError::from_json(const json& error) {
    if (!error.is_object())
        return RpcError("internal", "malformed error response: 'error' must be an object, not " +
                                        std::string(error.type_name()));
    json details = error;
    auto take_string = [&](const char* key) {
        std::string value;
        if (auto it = details.find(key); it != details.end()) {
            if (it->is_string()) value = it->get<std::string>();
            details.erase(it);
        }
        return value;
    };
    std::string code = take_string("code");
    std::string message = take_string("message");
    std::string field = take_string("field");
    if (code.empty()) {
        code = "internal";
        message = "malformed error response without a 'code': " + message;
    }
    return RpcError(std::move(code), message, std::move(field), std::move(details));
}

Message stream_message(std::uint64_t stream, std::string data, bool eof) {
    Message message{Kind::stream, {{"stream", stream}}, std::move(data)};
    if (eof) message.header["eof"] = true;
    return message;
}

StreamChunk parse_stream_message(Message&& message) {
    const json& header = message.header;
    const auto stream = header.find("stream");
    if (stream == header.end() || !stream->is_number_unsigned())
        throw ProtocolError("stream message: field 'stream' must be a non-negative integer");
    bool eof = false;
    if (const auto it = header.find("eof"); it != header.end()) {
        if (!it->is_boolean()) throw ProtocolError("stream message: field 'eof' must be a boolean");
        eof = it->get<bool>();
    }
    return StreamChunk{stream->get<std::uint64_t>(), std::move(message.body), eof};
}

// ---------------------------------------------------------------------------------------------
// RpcClient

RpcClient::RpcClient(std::unique_ptr<Channel> channel) : channel_(std::move(channel)) {
    if (!channel_) throw std::invalid_argument("RpcClient: channel is null");
}

RpcClient::~RpcClient() {
    close();
    if (reader_.joinable()) reader_.join();
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    timer_wake_.notify_all();
    if (timer_.joinable()) timer_.join();
    fail_all("agent channel client destroyed");
}

void RpcClient::on_event(EventCallback callback) {
    if (started_) throw std::logic_error("RpcClient::on_event after start()");
    on_event_ = std::move(callback);
}
void RpcClient::on_stream(StreamCallback callback) {
    if (started_) throw std::logic_error("RpcClient::on_stream after start()");
    on_stream_ = std::move(callback);
}
void RpcClient::on_close(CloseCallback callback) {
    if (started_) throw std::logic_error("RpcClient::on_close after start()");
    on_close_ = std::move(callback);
}

void RpcClient::start() {
    std::lock_guard lock(mutex_);
    if (started_) throw std::logic_error("RpcClient::start called twice");
    started_ = true;
    reader_ = std::thread([this] { read_loop(); });
    timer_ = std::thread([this] { timer_loop(); });
}

void RpcClient::close() {
    channel_->close();
}

Reply RpcClient::call(std::string_view method, nlohmann::json params, std::string body,
                      std::chrono::milliseconds timeout) {
    return call_async(method, std::move(params), std::move(body), timeout).get();
}

std::future<Reply> RpcClient::call_async(std::string_view method, nlohmann::json params,
                                         std::string body, std::chrono::milliseconds timeout) {
    if (params.is_null()) params = json::object();  // what `{}` yields
    if (!params.is_object())
        throw std::invalid_argument("RpcClient::call: params must be a JSON object");
    const auto deadline = Channel::Clock::now() + timeout;
    std::promise<Reply> promise;
    std::future<Reply> future = promise.get_future();
    std::uint64_t id;
    {
        std::lock_guard lock(mutex_);
        if (!started_) throw std::logic_error("RpcClient::call before start()");
        if (dead_) {
            promise.set_exception(std::make_exception_ptr(ProtocolError(*dead_)));
            return future;
        }
        id = next_id_++;
        pending_.emplace(id, Pending{std::move(promise), deadline, timeout, std::string(method)});
    }
    timer_wake_.notify_one();

    // Registered before sending: the answer may arrive before send() returns.
    Message request{Kind::request,
                    {{"id", id}, {"method", method}, {"params", std::move(params)}},
                    std::move(body)};
    std::exception_ptr failure;
    try {
        channel_->send(request, deadline);
    } catch (const TimeoutError&) {
        failure = std::make_exception_ptr(
            TimeoutError("rpc '" + std::string(method) + "' timed out after " +
                         std::to_string(timeout.count()) + " ms (the request could not be sent)"));
    } catch (const ProtocolError&) {
        failure = std::current_exception();  // a dead channel also fails the others via read_loop
    }
    if (failure) {
        if (auto pending = take_pending(id)) pending->promise.set_exception(failure);
    }
    return future;
}

void RpcClient::send_stream(std::uint64_t stream, std::string data, bool eof) {
    channel_->send(stream_message(stream, std::move(data), eof));
}

std::optional<RpcClient::Pending> RpcClient::take_pending(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return std::nullopt;
    std::optional<Pending> pending(std::move(it->second));
    pending_.erase(it);
    return pending;
}

void RpcClient::fail_all(const std::string& reason) {
    std::map<std::uint64_t, Pending> failed;
    std::string cause;
    {
        std::lock_guard lock(mutex_);
        if (!dead_) dead_ = reason;
        cause = *dead_;
        failed.swap(pending_);
    }
    for (auto& [id, pending] : failed)
        pending.promise.set_exception(std::make_exception_ptr(ProtocolError(cause)));
}

void RpcClient::read_loop() {
    std::string reason;
    try {
        while (auto message = channel_->receive()) dispatch(std::move(*message));
        reason = channel_->closed() ? channel_->close_reason()
                                    : "agent channel: the peer closed the connection";
    } catch (const std::exception& e) {
        reason = e.what();
    } catch (...) {
        reason = "agent channel: a callback threw a non-standard exception";
    }
    channel_->close(reason);
    fail_all(reason);
    call_quietly(on_close_, reason);
}

void RpcClient::timer_loop() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
        const auto now = Channel::Clock::now();
        std::optional<Channel::Clock::time_point> earliest;
        std::vector<Pending> expired;
        for (auto it = pending_.begin(); it != pending_.end();) {
            if (it->second.deadline <= now) {
                expired.push_back(std::move(it->second));
                it = pending_.erase(it);
            } else {
                earliest =
                    earliest ? std::min(*earliest, it->second.deadline) : it->second.deadline;
                ++it;
            }
        }
        if (!expired.empty()) {
            lock.unlock();
            for (auto& pending : expired)
                pending.promise.set_exception(std::make_exception_ptr(
                    TimeoutError("rpc '" + pending.method + "' timed out after " +
                                 std::to_string(pending.timeout.count()) + " ms")));
            lock.lock();
            continue;
        }
        if (earliest)
            timer_wake_.wait_until(lock, *earliest);
        else
            timer_wake_.wait(lock);
    }
}

void RpcClient::dispatch(Message&& message) {
    switch (message.kind) {
        case Kind::response: {
            const auto id = message_id(message.header);
            if (!id) throw ProtocolError("agent channel: response without a numeric 'id'");
            auto pending = take_pending(*id);
            if (!pending) return;  // the call already timed out
            json& header = message.header;
            if (const auto error = header.find("error"); error != header.end()) {
                pending->promise.set_exception(
                    std::make_exception_ptr(RpcError::from_json(*error)));
            } else if (const auto result = header.find("result");
                       result != header.end() && result->is_object()) {
                pending->promise.set_value(Reply{std::move(*result), std::move(message.body)});
            } else {
                pending->promise.set_exception(std::make_exception_ptr(
                    ProtocolError("malformed response to '" + pending->method +
                                  "': it needs an object 'result' or an 'error'")));
            }
            return;
        }
        case Kind::event:
            if (!on_event_) return;
            try {
                on_event_(std::move(message));
            } catch (const std::exception& e) {
                throw ProtocolError(std::string("agent channel: event handler failed: ") +
                                    e.what());
            }
            return;
        case Kind::stream: {
            StreamChunk chunk = parse_stream_message(std::move(message));
            if (!on_stream_) return;
            try {
                on_stream_(std::move(chunk));
            } catch (const std::exception& e) {
                throw ProtocolError(std::string("agent channel: stream handler failed: ") +
                                    e.what());
            }
            return;
        }
        case Kind::hello:
        case Kind::request:
            break;
    }
    throw ProtocolError("agent channel: unexpected " + std::string(kind_name(message.kind)) +
                        " message from the agent");
}

// ---------------------------------------------------------------------------------------------
// RpcServer

RpcServer::RpcServer(std::unique_ptr<Channel> channel, RpcServerOptions options)
    : channel_(std::move(channel)), options_(options) {
    if (!channel_) throw std::invalid_argument("RpcServer: channel is null");
    options_.max_workers = std::max<std::size_t>(options_.max_workers, 1);
}

RpcServer::~RpcServer() {
    close();
    if (reader_.joinable()) reader_.join();
    stop_.request_stop();
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
        queue_.clear();
        serial_queue_.clear();
    }
    work_ready_.notify_all();
    serial_ready_.notify_all();
    for (auto& worker : workers_) worker.join();  // no new ones: the reader is gone
    if (serial_worker_.joinable()) serial_worker_.join();
}

void RpcServer::handle(std::string method, Handler handler, Dispatch dispatch) {
    if (started_) throw std::logic_error("RpcServer::handle after start()");
    if (!handler) throw std::invalid_argument("RpcServer::handle: empty handler for " + method);
    routes_[std::move(method)] = Route{std::move(handler), dispatch};
}

void RpcServer::on_stream(StreamCallback callback) {
    if (started_) throw std::logic_error("RpcServer::on_stream after start()");
    on_stream_ = std::move(callback);
}

void RpcServer::on_close(CloseCallback callback) {
    if (started_) throw std::logic_error("RpcServer::on_close after start()");
    on_close_ = std::move(callback);
}

void RpcServer::start() {
    std::lock_guard lock(mutex_);
    if (started_) throw std::logic_error("RpcServer::start called twice");
    started_ = true;
    const bool any_serial = std::any_of(routes_.begin(), routes_.end(), [](const auto& route) {
        return route.second.dispatch == Dispatch::serial;
    });
    if (any_serial) serial_worker_ = std::thread([this] { worker_loop(true); });
    reader_ = std::thread([this] { read_loop(); });
}

std::string RpcServer::wait() {
    std::unique_lock lock(mutex_);
    if (!started_) throw std::logic_error("RpcServer::wait before start()");
    closed_cv_.wait(lock, [&] { return close_reason_.has_value(); });
    return *close_reason_;
}

void RpcServer::close() {
    channel_->close();
}

void RpcServer::send_event(nlohmann::json header, std::string body) {
    channel_->send(Message{Kind::event, std::move(header), std::move(body)});
}

void RpcServer::send_stream(std::uint64_t stream, std::string data, bool eof) {
    channel_->send(stream_message(stream, std::move(data), eof));
}

void RpcServer::read_loop() {
    std::string reason;
    try {
        while (auto message = channel_->receive()) dispatch(std::move(*message));
        reason = channel_->closed() ? channel_->close_reason()
                                    : "agent channel: the host closed the connection";
    } catch (const std::exception& e) {
        reason = e.what();
    } catch (...) {
        reason = "agent channel: a callback threw a non-standard exception";
    }
    channel_->close(reason);
    stop_.request_stop();
    {
        std::lock_guard lock(mutex_);
        queue_.clear();  // their answers could not be sent any more
        serial_queue_.clear();
    }
    call_quietly(on_close_, reason);
    {
        std::lock_guard lock(mutex_);
        close_reason_ = reason;
    }
    closed_cv_.notify_all();
}

void RpcServer::dispatch(Message&& message) {
    if (message.kind == Kind::stream) {
        StreamChunk chunk = parse_stream_message(std::move(message));
        if (!on_stream_) return;
        try {
            on_stream_(std::move(chunk));
        } catch (const std::exception& e) {
            throw ProtocolError(std::string("agent channel: stream handler failed: ") + e.what());
        }
        return;
    }
    if (message.kind != Kind::request)
        throw ProtocolError("agent channel: unexpected " + std::string(kind_name(message.kind)) +
                            " message from the host");

    json& header = message.header;
    const auto id = message_id(header);
    if (!id) throw ProtocolError("agent channel: request without a numeric 'id'");
    const auto method = header.find("method");
    if (method == header.end() || !method->is_string())
        return send_error(*id, RpcError("bad_request", "'method' must be a string", "method"));
    json params = json::object();
    if (const auto it = header.find("params"); it != header.end()) {
        if (!it->is_object())
            return send_error(*id, RpcError("bad_request", "'params' must be an object", "params"));
        params = std::move(*it);
    }
    const auto route = routes_.find(method->get_ref<const std::string&>());
    if (route == routes_.end())
        return send_error(
            *id, RpcError("unknown_method", "unknown method '" + method->get<std::string>() + "'",
                          "method"));
    enqueue(Job{
        Request{*id, route->first, std::move(params), std::move(message.body), stop_.get_token()},
        &route->second});
}

void RpcServer::enqueue(Job job) {
    std::unique_lock lock(mutex_);
    if (stopping_) return;
    if (job.route->dispatch == Dispatch::serial) {
        serial_queue_.push_back(std::move(job));
        serial_ready_.notify_one();
        return;
    }
    queue_.push_back(std::move(job));
    join_exited_locked();
    // Grow the pool only when every worker is busy, so a long handler never holds up the next.
    if (queue_.size() > idle_workers_ && workers_.size() < options_.max_workers) {
        try {
            workers_.emplace_back([this] { worker_loop(false); });
            return;
        } catch (const std::system_error& e) {
            // No thread to be had (a sandbox at its process limit): a busy worker takes the
            // job when it is free; with none at all, the request is answered as refused
            // rather than the channel failing.
            if (workers_.empty()) {
                Job refused = std::move(queue_.back());
                queue_.pop_back();
                lock.unlock();
                send_error(refused.request.id,
                           RpcError("resource_exhausted",
                                    std::string("cannot start a thread to answer '") +
                                        refused.request.method + "': " + e.what()));
                return;
            }
        }
    }
    work_ready_.notify_one();
}

void RpcServer::worker_loop(bool serial) {
    std::deque<Job>& queue = serial ? serial_queue_ : queue_;
    std::condition_variable& ready = serial ? serial_ready_ : work_ready_;
    std::unique_lock lock(mutex_);
    for (;;) {
        if (serial) {
            ready.wait(lock, [&] { return stopping_ || !queue.empty(); });
        } else {
            ++idle_workers_;
            const bool woken = ready.wait_for(lock, options_.idle_timeout,
                                              [&] { return stopping_ || !queue.empty(); });
            --idle_workers_;
            // The last worker stays, so a lone request never waits for a thread.
            if (!woken && workers_.size() - exited_.size() > 1) {
                exited_.push_back(std::this_thread::get_id());
                return;
            }
            if (!woken) continue;
        }
        if (stopping_) return;
        Job job = std::move(queue.front());
        queue.pop_front();
        lock.unlock();
        run(job);
        lock.lock();
    }
}

void RpcServer::join_exited_locked() {
    for (auto id : exited_) {
        auto it = std::find_if(workers_.begin(), workers_.end(),
                               [&](const std::thread& t) { return t.get_id() == id; });
        if (it == workers_.end()) continue;
        it->join();  // it has left its loop: only its return is left
        workers_.erase(it);
    }
    exited_.clear();
}

std::size_t RpcServer::worker_count() {
    std::lock_guard lock(mutex_);
    return workers_.size() - exited_.size();
}

void RpcServer::run(Job& job) {
    const Request& request = job.request;
    Message response{Kind::response, {{"id", request.id}}, {}};
    try {
        Reply reply = job.route->handler(request);
        if (reply.result.is_null()) reply.result = json::object();  // `Reply{{}, body}`
        if (!reply.result.is_object())
            throw RpcError("internal",
                           "handler for '" + request.method + "' returned a non-object result");
        response.header["result"] = std::move(reply.result);
        response.body = std::move(reply.body);
    } catch (const RpcError& e) {
        response.header["error"] = e.to_json();
    } catch (const std::exception& e) {
        response.header["error"] = RpcError("internal", e.what()).to_json();
    } catch (...) {
        response.header["error"] =
            RpcError("internal", "handler threw a non-standard exception").to_json();
    }
    send_response(std::move(response));
}

void RpcServer::send_error(std::uint64_t id, const RpcError& error) {
    send_response(Message{Kind::response, {{"id", id}, {"error", error.to_json()}}, {}});
}

void RpcServer::send_response(Message&& response) {
    try {
        channel_->send(response);
    } catch (const ProtocolError& e) {
        if (channel_->closed()) return;  // nobody left to answer
        // The response broke a limit or held invalid UTF-8: the caller still gets an answer.
        Message fallback{
            Kind::response,
            {{"id", response.header["id"]},
             {"error", RpcError("internal", std::string("response could not be sent: ") + e.what())
                           .to_json()}},
            {}};
        try {
            channel_->send(fallback);
        } catch (const ProtocolError&) {
        }
    }
}

}  // namespace deskbox::protocol
