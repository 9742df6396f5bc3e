#include "server/client/api_client.hpp"

#include <poll.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <limits>
#include <optional>

#include "common/ascii.hpp"

namespace deskbox::client {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;

namespace {

std::string describe_api_error(unsigned status, const std::string& code, const std::string& message,
                               const std::string& field) {
    std::string text = message.empty() ? "request failed" : message;
    text += " (HTTP " + std::to_string(status);
    if (!code.empty()) text += " " + code;
    if (!field.empty()) text += ", field " + field;
    text += ")";
    return text;
}

std::string format_duration(std::chrono::milliseconds duration) {
    if (duration.count() % 1000 == 0) return std::to_string(duration.count() / 1000) + " s";
    return std::to_string(duration.count()) + " ms";
}

bool starts_with_icase(std::string_view text, std::string_view prefix) {
    return text.size() >= prefix.size() && ascii_iequals(text.substr(0, prefix.size()), prefix);
}

http::verb to_verb(Method method) {
    switch (method) {
        case Method::get:
            return http::verb::get;
        case Method::post:
            return http::verb::post;
        case Method::put:
            return http::verb::put;
        case Method::patch:
            return http::verb::patch;
        case Method::del:
            return http::verb::delete_;
    }
    return http::verb::get;
}

// Safe to send twice: the server cannot have acted differently on a repeat.
bool is_idempotent(Method method) {
    return method != Method::post;
}

std::string trim(std::string_view text) {
    auto first = text.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos) return {};
    auto last = text.find_last_not_of(" \t\r\n");
    return std::string(text.substr(first, last - first + 1));
}

std::string json_string_or_empty(const json& object, const char* key) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return {};
    return it->is_string() ? it->get<std::string>() : it->dump();
}

}  // namespace

ApiError::ApiError(unsigned status, std::string code, std::string message, std::string field)
    : std::runtime_error(describe_api_error(status, code, message, field)),
      status_(status),
      code_(std::move(code)),
      message_(std::move(message)),
      field_(std::move(field)) {}

std::string ServerUrl::to_string() const {
    bool ipv6 = host.find(':') != std::string::npos;
    return "http://" + (ipv6 ? "[" + host + "]" : host) + ":" + port + base_path;
}

std::string ServerUrl::host_header() const {
    bool ipv6 = host.find(':') != std::string::npos;
    std::string name = ipv6 ? "[" + host + "]" : host;
    return port == "80" ? name : name + ":" + port;
}

ServerUrl parse_server_url(std::string_view url) {
    const std::string original(url);
    auto fail = [&](const std::string& reason) {
        return std::invalid_argument("server URL \"" + original + "\": " + reason);
    };
    if (starts_with_icase(url, "https://")) {
        throw fail("https is not supported (deskboxd serves plain HTTP; use http://)");
    }
    if (starts_with_icase(url, "http://")) {
        url.remove_prefix(7);
    } else if (url.find("://") != std::string_view::npos) {
        throw fail("only http:// URLs are supported");
    }
    auto authority_end = url.find_first_of("/?#");
    std::string_view authority = url.substr(0, authority_end);
    std::string_view rest =
        authority_end == std::string_view::npos ? "" : url.substr(authority_end);
    if (authority.find('@') != std::string_view::npos)
        throw fail("user information is not supported");
    if (!rest.empty() && rest.front() != '/') throw fail("a query or fragment is not allowed");

    ServerUrl result;
    std::string_view port_text;
    if (!authority.empty() && authority.front() == '[') {
        auto close = authority.find(']');
        if (close == std::string_view::npos) throw fail("unterminated IPv6 address");
        result.host = std::string(authority.substr(1, close - 1));
        std::string_view after = authority.substr(close + 1);
        if (!after.empty()) {
            if (after.front() != ':') throw fail("unexpected text after the IPv6 address");
            port_text = after.substr(1);
            if (port_text.empty()) throw fail("empty port");
        }
    } else {
        auto colon = authority.rfind(':');
        if (colon != std::string_view::npos) {
            if (authority.find(':') != colon) throw fail("IPv6 addresses must be in brackets");
            port_text = authority.substr(colon + 1);
            if (port_text.empty()) throw fail("empty port");
            authority = authority.substr(0, colon);
        }
        result.host = std::string(authority);
    }
    if (result.host.empty()) throw fail("no host");
    if (!port_text.empty()) {
        unsigned port = 0;
        auto [end, ec] =
            std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
        if (ec != std::errc{} || end != port_text.data() + port_text.size() || port == 0 ||
            port > 65535) {
            throw fail("port must be a number from 1 to 65535, got \"" + std::string(port_text) +
                       "\"");
        }
        result.port = std::to_string(port);
    }
    std::string_view path = rest;
    while (!path.empty() && path.back() == '/') path.remove_suffix(1);
    result.base_path = std::string(path);
    return result;
}

std::string percent_encode(std::string_view text, bool keep_slash) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(text.size());
    for (unsigned char c : text) {
        bool unreserved = std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
        if (unreserved || (keep_slash && c == '/')) {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

Query& Query::add(std::string_view name, std::string_view value) {
    text_ += text_.empty() ? '?' : '&';
    text_ += percent_encode(name);
    text_ += '=';
    text_ += percent_encode(value, true);
    return *this;
}

std::string Query::str() const {
    return text_;
}

std::optional<std::string> Response::header(std::string_view name) const {
    for (const auto& [key, value] : headers) {
        if (ascii_iequals(key, name)) return value;
    }
    return std::nullopt;
}

json Response::json() const {
    if (trim(body).empty()) return nullptr;
    try {
        return json::parse(body);
    } catch (const json::parse_error& error) {
        std::string start = body.substr(0, 80);
        throw ConnectionError("deskboxd's answer (HTTP " + std::to_string(status) +
                                  ") is not JSON: " + error.what() + "; it begins with: " + start,
                              false);
    }
}

ApiError error_from_response(const Response& response) {
    std::string code, message, field;
    try {
        json parsed = json::parse(response.body);
        if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_object()) {
            const json& error = parsed["error"];
            code = json_string_or_empty(error, "code");
            message = json_string_or_empty(error, "message");
            field = json_string_or_empty(error, "field");
        }
    } catch (const json::exception&) {
        // Not our JSON shape (a proxy's page, plain text): the body itself says what happened.
    }
    if (code.empty()) code = "http_" + std::to_string(response.status);
    if (message.empty()) {
        message = trim(response.body);
        if (message.size() > 300) message = message.substr(0, 300) + "...";
        if (message.empty())
            message =
                std::string(http::obsolete_reason(static_cast<http::status>(response.status)));
    }
    return ApiError(response.status, std::move(code), std::move(message), std::move(field));
}

struct ApiClient::Impl {
    ClientOptions options;
    ServerUrl url;
    std::string url_text;
    asio::io_context io;
    std::optional<beast::tcp_stream> stream;
    beast::flat_buffer buffer;
    std::size_t connections = 0;

    // Runs the queued asynchronous operation to completion: async ops are what give Beast's
    // tcp_stream its deadlines.
    void run() {
        io.restart();
        io.run();
    }

    void close_stream() {
        if (stream) {
            beast::error_code ignored;
            stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
            stream->socket().close(ignored);
            stream.reset();
        }
        buffer.consume(buffer.size());
    }

    ConnectionError connection_error(const beast::error_code& ec,
                                     std::chrono::milliseconds timeout) const {
        if (ec == asio::error::connection_refused) {
            return ConnectionError("cannot reach deskboxd at " + url_text +
                                       ": is it running? (scripts/run.sh starts it)",
                                   true);
        }
        if (ec == beast::error::timeout) {
            return ConnectionError(
                "deskboxd at " + url_text + " did not answer within " + format_duration(timeout),
                false);
        }
        return ConnectionError("cannot reach deskboxd at " + url_text + ": " + ec.message(), false);
    }

    void connect() {
        tcp::resolver resolver(io);
        beast::error_code ec;
        auto endpoints = resolver.resolve(url.host, url.port, ec);
        if (ec) {
            throw ConnectionError("cannot reach deskboxd at " + url_text + ": cannot resolve \"" +
                                      url.host + "\": " + ec.message(),
                                  false);
        }
        stream.emplace(io);
        stream->expires_after(options.connect_timeout);
        stream->async_connect(
            endpoints, [&](const beast::error_code& error, const tcp::endpoint&) { ec = error; });
        run();
        if (ec) {
            close_stream();
            throw connection_error(ec, options.connect_timeout);
        }
        ++connections;
        stream->socket().set_option(tcp::no_delay(true), ec);
        buffer.consume(buffer.size());
    }

    // An idle kept-alive connection the server has closed (or sent stray bytes on) is readable;
    // a live one is not. Checking first avoids most failed reuses.
    bool idle_connection_usable() {
        if (buffer.size() != 0) return false;
        pollfd entry{stream->socket().native_handle(), POLLIN, 0};
        return ::poll(&entry, 1, 0) == 0;
    }

    // An answer already sent on a connection the request could not be written to in full.
    std::optional<Response> read_early_answer() {
        http::response_parser<http::string_body> parser;
        parser.body_limit(1 << 20);
        parser.header_limit(64 * 1024);
        beast::error_code ec;
        stream->expires_after(std::chrono::seconds(5));
        http::async_read(*stream, buffer, parser,
                         [&](const beast::error_code& error, std::size_t) { ec = error; });
        run();
        if (ec) return std::nullopt;
        auto message = parser.release();
        Response response;
        response.status = message.result_int();
        for (const auto& field : message)
            response.headers.emplace_back(std::string(field.name_string()),
                                          std::string(field.value()));
        response.body = std::move(message.body());
        close_stream();
        return response;
    }

    Response exchange(Method method, std::string_view target, std::string body,
                      std::string_view content_type, std::string_view accept,
                      const Headers& extra = {}) {
        http::request<http::string_body> request{to_verb(method),
                                                 url.base_path + std::string(target), 11};
        request.set(http::field::host, url.host_header());
        request.set(http::field::user_agent, options.user_agent);
        if (!accept.empty()) request.set(http::field::accept, std::string(accept));
        if (!options.api_key.empty())
            request.set(http::field::authorization, "Bearer " + options.api_key);
        if (!content_type.empty())
            request.set(http::field::content_type, std::string(content_type));
        for (const auto& [name, value] : extra) request.set(name, value);
        request.body() = std::move(body);
        request.keep_alive(true);
        request.prepare_payload();

        for (int attempt = 0;; ++attempt) {
            if (stream && !idle_connection_usable()) close_stream();
            bool reused = stream.has_value();
            if (!stream) connect();

            beast::error_code ec;
            stream->expires_after(options.request_timeout);
            http::async_write(*stream, request,
                              [&](const beast::error_code& error, std::size_t) { ec = error; });
            run();
            if (ec) {
                // A server refusing the request from its header (413: the body is over its
                // limit) answers and closes without reading the body: the write fails, but its
                // answer says why.
                if (ec != beast::error::timeout)
                    if (auto early = read_early_answer()) return std::move(*early);
                close_stream();
                // Nothing reached the server's handler: safe to send again on a fresh connection.
                if (reused && attempt == 0 && ec != beast::error::timeout) continue;
                throw connection_error(ec, options.request_timeout);
            }

            http::response_parser<http::string_body> parser;
            parser.body_limit(options.max_response_bytes);
            parser.header_limit(64 * 1024);
            http::async_read(*stream, buffer, parser,
                             [&](const beast::error_code& error, std::size_t) { ec = error; });
            run();
            if (ec) {
                bool got_nothing = !parser.got_some();
                close_stream();
                // The server dropped a reused connection without answering: the usual race with
                // its idle timeout. Only repeat what is safe to repeat.
                if (reused && attempt == 0 && got_nothing && is_idempotent(method) &&
                    ec != beast::error::timeout) {
                    continue;
                }
                if (ec == http::error::body_limit) {
                    throw ConnectionError("deskboxd's answer is larger than " +
                                              std::to_string(options.max_response_bytes) + " bytes",
                                          false);
                }
                throw connection_error(ec, options.request_timeout);
            }
            stream->expires_never();

            auto message = parser.release();
            Response response;
            response.status = message.result_int();
            for (const auto& field : message) {
                response.headers.emplace_back(std::string(field.name_string()),
                                              std::string(field.value()));
            }
            bool keep_alive = message.keep_alive();
            response.body = std::move(message.body());
            if (!keep_alive) close_stream();
            return response;
        }
    }
};

void ApiClient::stream_get(std::string_view target, std::string_view accept,
                           const std::function<bool(std::string_view)>& on_data) {
    std::string error_body;
    Response head = send_streaming(Method::get, target, {}, {}, accept, {},
                                   [&](const Response& answer, std::string_view piece) {
                                       if (answer.status < 300) return on_data(piece);
                                       if (error_body.size() < (1u << 20)) error_body.append(piece);
                                       return true;
                                   });
    if (head.status >= 300) {
        head.body = std::move(error_body);
        throw error_from_response(head);
    }
}

Response ApiClient::send_streaming(
    Method method, std::string_view target, std::string body, std::string_view content_type,
    std::string_view accept, const Headers& headers,
    const std::function<bool(const Response& head, std::string_view piece)>& on_data) {
    Impl& impl = *impl_;
    impl.close_stream();
    impl.connect();
    struct Closer {
        Impl& impl;
        ~Closer() { impl.close_stream(); }
    } closer{impl};
    http::request<http::string_body> request{to_verb(method),
                                             impl.url.base_path + std::string(target), 11};
    request.set(http::field::host, impl.url.host_header());
    request.set(http::field::user_agent, impl.options.user_agent);
    request.set(http::field::accept, std::string(accept));
    if (!impl.options.api_key.empty())
        request.set(http::field::authorization, "Bearer " + impl.options.api_key);
    for (const auto& [name, value] : headers) request.set(name, value);
    if (!content_type.empty()) request.set(http::field::content_type, std::string(content_type));
    if (!body.empty() || method == Method::post || method == Method::put) {
        request.body() = std::move(body);
        request.prepare_payload();
    }
    beast::error_code ec;
    impl.stream->expires_after(impl.options.request_timeout);
    http::async_write(*impl.stream, request,
                      [&](const beast::error_code& error, std::size_t) { ec = error; });
    impl.run();
    http::response_parser<http::buffer_body> parser;
    parser.header_limit(64 * 1024);
    // Not boost::none: Boost 1.74 compares a Content-Length against an empty limit as over it.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    if (!ec) {
        http::async_read_header(*impl.stream, impl.buffer, parser,
                                [&](const beast::error_code& error, std::size_t) { ec = error; });
        impl.run();
    }
    if (ec) throw impl.connection_error(ec, impl.options.request_timeout);
    impl.stream->expires_never();
    Response head;
    head.status = parser.get().result_int();
    for (const auto& field : parser.get())
        head.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    std::array<char, 16384> piece{};
    while (!parser.is_done()) {
        parser.get().body().data = piece.data();
        parser.get().body().size = piece.size();
        // read_some: back with what came, not once the piece is full (an event is small).
        http::read_some(*impl.stream, impl.buffer, parser, ec);
        if (ec == http::error::need_buffer) ec = {};
        const std::size_t got = piece.size() - parser.get().body().size;
        if (ec && ec != http::error::end_of_stream)
            throw impl.connection_error(ec, impl.options.request_timeout);
        if (got > 0 && !on_data(head, {piece.data(), got})) break;
        if (ec) break;
    }
    return head;
}

ApiClient::ApiClient(ClientOptions options) : impl_(std::make_unique<Impl>()) {
    impl_->url = parse_server_url(options.server);
    impl_->url_text = impl_->url.to_string();
    impl_->options = std::move(options);
}

ApiClient::~ApiClient() {
    if (impl_) impl_->close_stream();
}
ApiClient::ApiClient(ApiClient&&) noexcept = default;
ApiClient& ApiClient::operator=(ApiClient&&) noexcept = default;

Response ApiClient::send(Method method, std::string_view target, std::string body,
                         std::string_view content_type, std::string_view accept) {
    return impl_->exchange(method, target, std::move(body), content_type, accept);
}

Response ApiClient::send(Method method, std::string_view target, std::string body,
                         std::string_view content_type, std::string_view accept,
                         const Headers& headers) {
    return impl_->exchange(method, target, std::move(body), content_type, accept, headers);
}

Response ApiClient::call(Method method, std::string_view target, std::string body,
                         std::string_view content_type, std::string_view accept) {
    Response response = send(method, target, std::move(body), content_type, accept);
    if (response.status / 100 != 2) throw error_from_response(response);
    return response;
}

json ApiClient::get_json(std::string_view target) {
    return call(Method::get, target).json();
}

json ApiClient::post_json(std::string_view target, const json& body) {
    if (body.is_null()) return call(Method::post, target).json();
    return call(Method::post, target, body.dump(), "application/json").json();
}

json ApiClient::put_json(std::string_view target, const json& body) {
    return call(Method::put, target, body.dump(), "application/json").json();
}

json ApiClient::patch_json(std::string_view target, const json& body) {
    return call(Method::patch, target, body.dump(), "application/json").json();
}

json ApiClient::delete_json(std::string_view target) {
    return call(Method::del, target).json();
}

Response ApiClient::get_bytes(std::string_view target) {
    return call(Method::get, target, {}, {}, "*/*");
}

Response ApiClient::put_bytes(std::string_view target, std::string bytes,
                              std::string_view content_type) {
    return call(Method::put, target, std::move(bytes), content_type);
}

void ApiClient::set_request_timeout(std::chrono::milliseconds timeout) {
    impl_->options.request_timeout = timeout;
}

const ServerUrl& ApiClient::server() const {
    return impl_->url;
}

std::size_t ApiClient::connections_opened() const {
    return impl_->connections;
}

void ApiClient::close() {
    impl_->close_stream();
}

}  // namespace deskbox::client
