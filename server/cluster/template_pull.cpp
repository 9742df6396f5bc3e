#include "server/cluster/template_pull.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <cstdio>
#include <limits>

#include "server/client/api_client.hpp"
#include "server/cluster/node_forwarder.hpp"
#include "server/templates/template_transfer.hpp"

namespace deskbox::cluster {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

constexpr auto kStall = std::chrono::seconds(60);  // a sender silent this long is gone

// What a refusal says: its error's message, as the API client reads one (else its first bytes).
std::string refusal_text(unsigned status, const std::string& body) {
    client::Response response;
    response.status = status;
    response.body = body;
    return "it answered " + std::to_string(status) + ": " +
           client::error_from_response(response).message();
}

}  // namespace

TemplatePuller::TemplatePuller(std::string secret, std::chrono::milliseconds connect_timeout)
    : secret_(std::move(secret)), connect_timeout_(connect_timeout) {}

templates::StoredTemplate TemplatePuller::pull(templates::TemplateStore& store,
                                               const templates::TemplateRef& ref,
                                               const std::string& image_id,
                                               const PullSource& source) {
    const std::string key = ref.str() + "@" + image_id;
    std::promise<templates::StoredTemplate> promise;
    std::shared_future<templates::StoredTemplate> outcome;
    bool mine = false;
    {
        std::lock_guard lock(mutex_);
        auto it = under_way_.find(key);
        if (it != under_way_.end()) {
            outcome = it->second;
            ++figures_.joined;
        } else {
            outcome = promise.get_future().share();
            under_way_[key] = outcome;
            mine = true;
        }
    }
    if (mine) {
        try {
            promise.set_value(fetch(store, ref, image_id, source));
        } catch (...) {
            promise.set_exception(std::current_exception());
        }
        std::lock_guard lock(mutex_);
        under_way_.erase(key);
    }
    return outcome.get();
}

templates::StoredTemplate TemplatePuller::fetch(templates::TemplateStore& store,
                                                const templates::TemplateRef& ref,
                                                const std::string& image_id,
                                                const PullSource& source) {
    const auto started = std::chrono::steady_clock::now();
    std::uint64_t bytes = 0;
    try {
        const auto url = client::parse_server_url(source.base_url);
        net::io_context io;
        beast::tcp_stream stream(io);
        // Each step runs on `io` under the stream's timer (beast's sync calls have none): a
        // frozen sender fails the pull instead of holding the create forever.
        beast::error_code step_error;
        auto done = [&](beast::error_code ec, auto&&...) { step_error = ec; };
        auto wait = [&](std::chrono::steady_clock::duration limit, bool need_buffer_ok = false) {
            stream.expires_after(limit);
            io.restart();
            io.run();
            if (step_error && !(need_buffer_ok && step_error == http::error::need_buffer))
                throw beast::system_error(step_error);
        };
        stream.async_connect(tcp::resolver(io).resolve(url.host, url.port), done);
        wait(connect_timeout_);
        http::request<http::empty_body> request{http::verb::get,
                                                url.base_path + "/v1/cluster/templates/" +
                                                    image_id +
                                                    "?ref=" + client::percent_encode(ref.str()),
                                                11};
        request.set(http::field::host, url.host_header());
        request.set(http::field::user_agent, "deskboxd-template-pull");
        request.set(kClusterSecretHeader, secret_);
        http::async_write(stream, request, done);
        wait(kStall);
        beast::flat_buffer buffer;
        http::response_parser<http::buffer_body> parser;
        // No limit (boost::none would refuse every body with a Content-Length in Beast 1.81).
        parser.body_limit(std::numeric_limits<std::uint64_t>::max());
        http::async_read_header(stream, buffer, parser, done);
        wait(kStall);
        if (parser.get().result() != http::status::ok) {
            http::response_parser<http::string_body> refusal(std::move(parser));
            refusal.body_limit(1 << 20);
            http::async_read(stream, buffer, refusal, done);
            try {
                wait(kStall);
            } catch (const std::exception&) {
            }
            throw std::runtime_error(
                refusal_text(refusal.get().result_int(), refusal.get().body()));
        }
        const auto source_bytes = [&](char* out, std::size_t capacity) -> std::size_t {
            if (parser.is_done()) return 0;
            parser.get().body().data = out;
            parser.get().body().size = capacity;
            http::async_read(stream, buffer, parser, done);
            wait(kStall, true);
            const std::size_t n = capacity - parser.get().body().size;
            bytes += n;
            return n;
        };
        auto stored = templates::install_image_stream(store, ref, image_id, source_bytes);
        pulled(ref, image_id, source, bytes,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
        return stored;
    } catch (const std::exception& e) {
        {
            std::lock_guard lock(mutex_);
            ++figures_.failed;
        }
        throw PullFailed(source.node, e.what());
    }
}

void TemplatePuller::pulled(const templates::TemplateRef& ref, const std::string& image_id,
                            const PullSource& source, std::uint64_t bytes, double seconds) {
    std::lock_guard lock(mutex_);
    ++figures_.pulled;
    figures_.last_bytes = bytes;
    figures_.last_seconds = seconds;
    std::fprintf(stderr, "deskboxd: pulled template %s (image %s, %llu bytes) from %s in %.1f s\n",
                 ref.str().c_str(), image_id.substr(0, 12).c_str(),
                 static_cast<unsigned long long>(bytes), source.node.c_str(), seconds);
}

TemplatePuller::Figures TemplatePuller::figures() const {
    std::lock_guard lock(mutex_);
    return figures_;
}

}  // namespace deskbox::cluster
