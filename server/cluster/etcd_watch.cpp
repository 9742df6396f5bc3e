#include "server/cluster/etcd_watch.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/base64.hpp"
#include "server/client/api_client.hpp"
#include "server/cluster/etcd_json.hpp"

namespace deskbox::cluster {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;

namespace {

// Why a connection ended.
enum class Ended { stopped, broken, resync };

}  // namespace

struct EtcdWatch::Impl {
    std::vector<std::string> endpoints;
    WatchOptions options;
    OnEvents on_events;
    OnResync on_resync;

    std::atomic<std::int64_t> last_revision{0};  // delivered up to here
    std::atomic<std::uint64_t> connection_count{0};
    std::atomic<bool> stopping{false};
    std::atomic<bool> reconnect_asked{false};
    std::size_t endpoint = 0;
    bool watching_from_now = false;  // the connection in use asked for no start revision

    std::mutex io_mutex;  // guards `current` (the io_context of the connection in use)
    net::io_context* current = nullptr;
    std::mutex sleep_mutex;
    std::condition_variable sleep_wake;
    std::thread thread;

    void run() {
        std::size_t failures_in_a_row = 0;
        while (!stopping.load()) {
            Ended ended = Ended::broken;
            try {
                ended = stream_from(endpoints[endpoint]);
            } catch (const std::exception& e) {
                ended = Ended::broken;
            }
            if (ended == Ended::stopped || stopping.load()) break;
            if (ended == Ended::resync) {
                // History is gone: the owner reads everything again, and the watch goes on
                // just after that read (or from now, if the owner did not say).
                last_revision.store(0);
                options.start_revision = 0;
                const std::int64_t read_at = on_resync ? on_resync() : 0;
                if (read_at > 0) last_revision.store(read_at);
                continue;
            }
            if (reconnect_asked.exchange(false)) {
                endpoint = (endpoint + 1) % endpoints.size();
                continue;
            }
            endpoint = (endpoint + 1) % endpoints.size();
            if (++failures_in_a_row % endpoints.size() == 0) {
                std::unique_lock lock(sleep_mutex);
                sleep_wake.wait_for(lock, options.retry_delay, [&] { return stopping.load(); });
            }
        }
    }

    // Runs `ioc` until the operation started on it completes, the stop or a reconnect is asked.
    // Returns false if it was interrupted.
    bool run_one(net::io_context& ioc, const bool& done) {
        ioc.restart();
        while (!done) {
            if (stopping.load() || reconnect_asked.load()) return false;
            if (ioc.run_one() == 0) return done;
        }
        return true;
    }

    // The watch of the prefix, from the revision after the last one seen (or the options'
    // start, or now).
    http::request<http::string_body> watch_request(const client::ServerUrl& url) {
        json create = {{"key", base64_encode(options.prefix)},
                       {"range_end", base64_encode(prefix_end(options.prefix))},
                       {"progress_notify", true}};
        const std::int64_t from =
            last_revision.load() > 0 ? last_revision.load() + 1 : options.start_revision;
        if (from > 0) create["start_revision"] = std::to_string(from);
        watching_from_now = from <= 0;
        http::request<http::string_body> request{http::verb::post, url.base_path + "/v3/watch", 11};
        request.set(http::field::host, url.host_header());
        request.set(http::field::content_type, "application/json");
        request.body() = json{{"create_request", create}}.dump();
        request.prepare_payload();
        return request;
    }

    Ended stream_from(const std::string& endpoint_url) {
        const auto url = client::parse_server_url(endpoint_url);
        net::io_context ioc;
        {
            std::lock_guard lock(io_mutex);
            if (stopping.load()) return Ended::stopped;
            current = &ioc;
        }
        struct Release {
            Impl& self;
            ~Release() {
                std::lock_guard lock(self.io_mutex);
                self.current = nullptr;
            }
        } release{*this};

        beast::tcp_stream stream(ioc);
        beast::error_code ec;
        // Starts one asynchronous step and runs the io_context until it completes; false if the
        // watch was stopped or asked to reconnect meanwhile, or the step failed.
        auto step = [&](std::chrono::milliseconds deadline, auto&& start) {
            bool done = false;
            ec = {};
            stream.expires_after(deadline);
            start([&](beast::error_code e, auto&&...) {
                ec = e;
                done = true;
            });
            return run_one(ioc, done) && !ec;
        };
        auto interrupted = [&] { return stopping.load() ? Ended::stopped : Ended::broken; };
        tcp::resolver resolver(ioc);
        auto addresses = resolver.resolve(url.host, url.port, ec);
        if (ec) return Ended::broken;
        if (!step(options.connect_timeout,
                  [&](auto&& done) { stream.async_connect(addresses, std::move(done)); }))
            return interrupted();

        auto request = watch_request(url);
        if (!step(options.connect_timeout,
                  [&](auto&& done) { http::async_write(stream, request, std::move(done)); }))
            return interrupted();

        beast::flat_buffer buffer;
        http::response_parser<http::buffer_body> parser;
        parser.body_limit(boost::none);
        if (!step(options.connect_timeout, [&](auto&& done) {
                http::async_read_header(stream, buffer, parser, std::move(done));
            }))
            return interrupted();
        if (parser.get().result() != http::status::ok) return Ended::broken;
        connection_count.fetch_add(1);

        std::string pending;  // bytes of a message not yet complete
        std::array<char, 16384> chunk;
        while (!parser.is_done()) {
            parser.get().body().data = chunk.data();
            parser.get().body().size = chunk.size();
            // need_buffer only says the chunk is full: what it holds is good.
            if (!step(options.max_idle,
                      [&](auto&& done) {
                          http::async_read_some(stream, buffer, parser, std::move(done));
                      }) &&
                ec != http::error::need_buffer)
                return interrupted();
            pending.append(chunk.data(), chunk.size() - parser.get().body().size);
            std::size_t newline;
            while ((newline = pending.find('\n')) != std::string::npos) {
                std::string line = pending.substr(0, newline);
                pending.erase(0, newline + 1);
                if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
                if (auto ended = handle_message(line)) return *ended;
            }
        }
        return Ended::broken;  // etcd ended the stream (a member shutting down)
    }

    // One JSON message of the stream; a value when the connection must end.
    std::optional<Ended> handle_message(const std::string& line) {
        json message = json::parse(line, nullptr, false);
        if (!message.is_object()) return Ended::broken;
        if (message.contains("error")) return Ended::broken;  // the gateway's stream error
        const json& result = message.contains("result") ? message["result"] : message;
        if (etcd_json::number(result, "compact_revision") > 0) return Ended::resync;
        if (result.value("canceled", false)) return Ended::resync;
        std::vector<WatchEvent> events;
        if (auto it = result.find("events"); it != result.end() && it->is_array()) {
            for (const auto& event : *it) {
                WatchEvent out;
                out.type = event.value("type", std::string("PUT")) == "DELETE"
                               ? WatchEvent::Type::erase
                               : WatchEvent::Type::put;
                out.kv = etcd_json::key_value(event.contains("kv") ? event["kv"] : json::object());
                if (out.kv.mod_revision <= last_revision.load()) continue;  // seen before
                events.push_back(std::move(out));
            }
        }
        if (!events.empty()) {
            if (on_events) on_events(events);
            last_revision.store(events.back().kv.mod_revision);
        } else if (!result.value("created", false) || watching_from_now) {
            // A progress notification, or the creation of a watch from "now": every later event
            // is above this revision, so a new connection resumes after it.
            auto header = result.find("header");
            if (header != result.end() && header->is_object()) {
                const std::int64_t progress = etcd_json::number(*header, "revision");
                if (progress > last_revision.load()) last_revision.store(progress);
            }
        }
        return std::nullopt;
    }

    void interrupt() {
        std::lock_guard lock(io_mutex);
        if (current) current->stop();
    }
};

EtcdWatch::EtcdWatch(std::vector<std::string> endpoints, WatchOptions options, OnEvents on_events,
                     OnResync on_resync)
    : impl_(std::make_unique<Impl>()) {
    if (endpoints.empty()) throw std::invalid_argument("no etcd endpoint given");
    impl_->endpoints = std::move(endpoints);
    impl_->options = std::move(options);
    impl_->on_events = std::move(on_events);
    impl_->on_resync = std::move(on_resync);
    impl_->last_revision.store(impl_->options.start_revision > 0 ? impl_->options.start_revision - 1
                                                                 : 0);
    impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

EtcdWatch::~EtcdWatch() {
    impl_->stopping.store(true);
    impl_->interrupt();
    {
        std::lock_guard lock(impl_->sleep_mutex);
        impl_->sleep_wake.notify_all();
    }
    if (impl_->thread.joinable()) impl_->thread.join();
}

std::int64_t EtcdWatch::revision() const {
    return impl_->last_revision.load();
}

std::uint64_t EtcdWatch::connections() const {
    return impl_->connection_count.load();
}

void EtcdWatch::reconnect() {
    impl_->reconnect_asked.store(true);
    impl_->interrupt();
}

}  // namespace deskbox::cluster
