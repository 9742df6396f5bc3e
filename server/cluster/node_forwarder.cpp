#include "server/cluster/node_forwarder.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>

#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/client/api_client.hpp"
#include "server/network/splice_relay.hpp"

namespace deskbox::cluster {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

// Hop-by-hop headers (RFC 9110 7.6.1), the ones the client library sets itself, and Origin.
bool passes_through(http::field field, beast::string_view name) {
    switch (field) {
        case http::field::connection:
        case http::field::keep_alive:
        case http::field::proxy_connection:
        case http::field::te:
        case http::field::trailer:
        case http::field::transfer_encoding:
        case http::field::upgrade:
        case http::field::host:
        case http::field::content_length:
        case http::field::content_type:
        case http::field::accept:
        // Checked by the node the client reached, against the Host the client used; the owner
        // sees this node's Host and would take the client's own origin for a foreign one.
        case http::field::origin:
            return false;
        default:
            break;
    }
    // Ours: only this node sets them.
    return !beast::iequals(name, kForwardedByHeader) && !beast::iequals(name, kClusterSecretHeader);
}

ForwardResponse unreachable(const std::string& owner, const std::string& why, unsigned version) {
    ForwardResponse res{http::status::service_unavailable, version};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::retry_after, "2");
    res.body() = nlohmann::json{
        {"error",
         {{"code", "node_unreachable"},
          {"message", "node " + owner + " that runs this sandbox cannot be reached: " + why},
          {"node",
           owner}}}}.dump();
    res.prepare_payload();
    return res;
}

std::optional<client::Method> pooled_method(http::verb verb) {
    switch (verb) {
        case http::verb::get:
            return client::Method::get;
        case http::verb::post:
            return client::Method::post;
        case http::verb::put:
            return client::Method::put;
        case http::verb::delete_:
            return client::Method::del;
        default:
            return std::nullopt;
    }
}

}  // namespace

bool secret_matches(const std::string& expected, std::string_view given) {
    if (expected.empty() || given.size() != expected.size()) return false;
    unsigned char difference = 0;
    for (std::size_t i = 0; i < expected.size(); ++i)
        difference |= static_cast<unsigned char>(expected[i] ^ given[i]);
    return difference == 0;
}

struct NodeForwarder::Impl {
    ForwarderOptions options;
    std::mutex mutex;
    std::map<std::string, std::vector<std::unique_ptr<client::ApiClient>>> idle;
    std::atomic<std::uint64_t> forwarded{0}, relayed{0};

    std::unique_ptr<client::ApiClient> take(const std::string& base_url) {
        {
            std::lock_guard lock(mutex);
            auto& pool = idle[base_url];
            if (!pool.empty()) {
                auto connection = std::move(pool.back());
                pool.pop_back();
                return connection;
            }
        }
        client::ClientOptions o;
        o.server = base_url;
        o.connect_timeout = options.connect_timeout;
        o.request_timeout = options.request_timeout;
        o.user_agent = "deskboxd-forwarder";
        return std::make_unique<client::ApiClient>(o);
    }

    void give_back(const std::string& base_url, std::unique_ptr<client::ApiClient> connection) {
        std::lock_guard lock(mutex);
        auto& pool = idle[base_url];
        if (pool.size() < 32) pool.push_back(std::move(connection));
    }
};

// ---- relays ----

namespace {

class Relay : public std::enable_shared_from_this<Relay> {
  public:
    Relay(beast::tcp_stream stream, ForwardRequest request, client::ServerUrl url,
          std::string owner, std::chrono::milliseconds connect_timeout)
        : client_(stream.release_socket()),
          upstream_(client_.get_executor()),
          resolver_(client_.get_executor()),
          timer_(client_.get_executor()),
          request_(std::move(request)),
          url_(std::move(url)),
          owner_(std::move(owner)),
          connect_timeout_(connect_timeout) {}

    // Called on a request handler's thread: the relay runs on the client stream's strand.
    void start() {
        net::dispatch(client_.get_executor(), [self = shared_from_this()] { self->connect(); });
    }

  private:
    void connect() {
        auto self = shared_from_this();
        timer_.expires_after(connect_timeout_);
        timer_.async_wait([self](beast::error_code ec) {
            if (ec) return;
            self->resolver_.cancel();
            beast::error_code ignored;
            self->upstream_.close(ignored);
        });
        resolver_.async_resolve(
            url_.host, url_.port, [self](beast::error_code ec, tcp::resolver::results_type found) {
                if (ec) return self->fail(ec.message());
                net::async_connect(self->upstream_, found,
                                   [self](beast::error_code ec, const tcp::endpoint&) {
                                       self->timer_.cancel();
                                       if (ec) return self->fail(ec.message());
                                       self->write_request();
                                   });
            });
    }

    void write_request() {
        auto serializer = std::make_shared<http::request_serializer<http::string_body>>(request_);
        auto self = shared_from_this();
        http::async_write(upstream_, *serializer,
                          [self, serializer](beast::error_code ec, std::size_t) {
                              if (ec) return self->fail("writing the request: " + ec.message());
                              std::error_code relay_error;
                              auto relay = network::SpliceRelay::create(
                                  self->client_, self->upstream_,
                                  [self](const network::SpliceRelay::Result&) {}, relay_error);
                              if (!relay) {
                                  // Out of fds: this connection ends, deskboxd goes on.
                                  network::reset_socket(self->client_);
                                  network::reset_socket(self->upstream_);
                                  return;
                              }
                              relay->start();
                          });
    }

    void fail(const std::string& why) {
        auto response =
            std::make_shared<ForwardResponse>(unreachable(owner_, why, request_.version()));
        response->set(http::field::connection, "close");
        auto self = shared_from_this();
        http::async_write(client_, *response, [self, response](beast::error_code, std::size_t) {
            beast::error_code ignored;
            self->client_.shutdown(tcp::socket::shutdown_send, ignored);
            self->client_.close(ignored);
        });
    }

    tcp::socket client_, upstream_;
    tcp::resolver resolver_;
    net::steady_timer timer_;
    ForwardRequest request_;
    client::ServerUrl url_;
    std::string owner_;
    std::chrono::milliseconds connect_timeout_;
};

}  // namespace

NodeForwarder::NodeForwarder(ForwarderOptions options) : impl_(std::make_unique<Impl>()) {
    impl_->options = std::move(options);
}

NodeForwarder::~NodeForwarder() = default;

bool NodeForwarder::needs_relay(const ForwardRequest& request) {
    // A sandbox's event stream (server-sent events) answers for as long as the client reads:
    // the pooled path would wait for its end before passing anything on.
    const std::string_view target(request.target().data(), request.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    const bool event_stream = path.starts_with("/v1/sandboxes/") && path.ends_with("/events") &&
                              request.method() == http::verb::get;
    return event_stream || request.find(http::field::upgrade) != request.end() ||
           !pooled_method(request.method()).has_value();
}

ForwardResponse NodeForwarder::forward(const ForwardRequest& request, const std::string& base_url,
                                       const std::string& owner,
                                       const std::string& client_address) {
    impl_->forwarded.fetch_add(1);
    client::Headers headers;
    for (const auto& field : request)
        if (passes_through(field.name(), field.name_string()))
            headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    headers.emplace_back(kForwardedByHeader, impl_->options.node_name);
    headers.emplace_back(kClusterSecretHeader, impl_->options.secret);
    if (!client_address.empty()) headers.emplace_back("X-Forwarded-For", client_address);
    const auto method = pooled_method(request.method());
    auto connection = impl_->take(base_url);
    client::Response answer;
    try {
        answer = connection->send(*method, std::string(request.target()), request.body(),
                                  std::string(request[http::field::content_type]),
                                  request.count(http::field::accept)
                                      ? std::string(request[http::field::accept])
                                      : std::string("*/*"),
                                  headers);
    } catch (const client::ConnectionError& e) {
        return unreachable(owner, e.what(), request.version());
    }
    impl_->give_back(base_url, std::move(connection));
    ForwardResponse response{static_cast<http::status>(answer.status), request.version()};
    for (const auto& [name, value] : answer.headers) {
        const http::field field = http::string_to_field(name);
        if (field == http::field::connection || field == http::field::keep_alive ||
            field == http::field::transfer_encoding || field == http::field::content_length)
            continue;
        response.insert(name, value);
    }
    response.body() = std::move(answer.body);
    response.prepare_payload();
    return response;
}

void NodeForwarder::relay(beast::tcp_stream stream, ForwardRequest request,
                          const std::string& base_url, const std::string& owner) {
    impl_->relayed.fetch_add(1);
    beast::error_code ec;
    auto peer = stream.socket().remote_endpoint(ec);
    for (auto it = request.begin(); it != request.end();) {
        if (beast::iequals(it->name_string(), kForwardedByHeader) ||
            beast::iequals(it->name_string(), kClusterSecretHeader))
            it = request.erase(it);
        else
            ++it;
    }
    request.set(kForwardedByHeader, impl_->options.node_name);
    request.set(kClusterSecretHeader, impl_->options.secret);
    if (!ec) request.set("X-Forwarded-For", peer.address().to_string());
    const auto url = client::parse_server_url(base_url);
    request.set(http::field::host, url.host_header());
    request.target(url.base_path + std::string(request.target()));
    request.prepare_payload();
    std::make_shared<Relay>(std::move(stream), std::move(request), url, owner,
                            impl_->options.connect_timeout)
        ->start();
}

std::uint64_t NodeForwarder::forwarded() const {
    return impl_->forwarded.load();
}
std::uint64_t NodeForwarder::relayed() const {
    return impl_->relayed.load();
}

}  // namespace deskbox::cluster
