// A synchronous client of deskboxd's HTTP API v1 (Boost.Beast, HTTP/1.1). One connection,
// kept alive across requests and reopened when the server closed it; every step (connect,
// request, answer) has a deadline. Non-2xx answers become ApiError carrying the server's
// {"error":{code,message,field}}; failing to reach the server becomes ConnectionError.
// Not thread-safe: one ApiClient per thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace deskbox::client {

// The server's answer to a failed request.
class ApiError : public std::runtime_error {
  public:
    ApiError(unsigned status, std::string code, std::string message, std::string field);
    unsigned status() const { return status_; }
    const std::string& code() const { return code_; }
    const std::string& message() const { return message_; }
    const std::string& field() const { return field_; }

  private:
    unsigned status_;
    std::string code_;
    std::string message_;
    std::string field_;
};

// The server could not be reached, or the exchange broke off (refused, reset, timed out,
// malformed answer).
class ConnectionError : public std::runtime_error {
  public:
    ConnectionError(const std::string& message, bool refused)
        : std::runtime_error(message), refused_(refused) {}
    bool refused() const { return refused_; }

  private:
    bool refused_;
};

// "http://host:port/prefix". Only plain http: deskboxd speaks no TLS (put a proxy in front).
struct ServerUrl {
    std::string host;         // without IPv6 brackets
    std::string port = "80";  // as text: it goes to the resolver and into URLs as is
    std::string base_path;    // "" or "/prefix", no trailing slash
    // "http://host:port/prefix", normalised (brackets back around IPv6 hosts).
    std::string to_string() const;
    std::string host_header() const;
};
// Throws std::invalid_argument naming what is wrong.
ServerUrl parse_server_url(std::string_view url);

// Percent-encodes all but RFC 3986 unreserved characters (and '/' when keep_slash).
std::string percent_encode(std::string_view text, bool keep_slash = false);

// "?a=1&b=x%20y" from name/value pairs (values encoded; '/' kept, for readable paths).
class Query {
  public:
    Query& add(std::string_view name, std::string_view value);
    std::string str() const;  // "" when empty

  private:
    std::string text_;
};

struct Response {
    unsigned status = 0;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
    // Case-insensitive; the first header of that name.
    std::optional<std::string> header(std::string_view name) const;
    // The body as JSON (null when empty). Throws ConnectionError if it is not JSON.
    nlohmann::json json() const;
};

enum class Method { get, post, put, patch, del };
using Headers = std::vector<std::pair<std::string, std::string>>;

struct ClientOptions {
    std::string server = "http://127.0.0.1:8700";
    std::string api_key;  // sent as "Authorization: Bearer KEY" when not empty
    std::chrono::milliseconds connect_timeout{std::chrono::seconds(10)};
    // For writing the request and reading the whole answer.
    std::chrono::milliseconds request_timeout{std::chrono::seconds(120)};
    std::uint64_t max_response_bytes = std::uint64_t{4} << 30;
    std::string user_agent = "deskbox-client/0.1";
};

class ApiClient {
  public:
    // Throws std::invalid_argument for a malformed server URL. Connects lazily.
    explicit ApiClient(ClientOptions options);
    ~ApiClient();
    ApiClient(ApiClient&&) noexcept;
    ApiClient& operator=(ApiClient&&) noexcept;
    ApiClient(const ApiClient&) = delete;
    ApiClient& operator=(const ApiClient&) = delete;

    // `target` is the path and query ("/v1/sandboxes?x=1"); the URL's base path is prepended.
    // Returns any status; throws ConnectionError only.
    Response send(Method method, std::string_view target, std::string body = {},
                  std::string_view content_type = {}, std::string_view accept = "application/json");
    // As send, with more request headers (e.g. Mcp-Session-Id).
    Response send(Method method, std::string_view target, std::string body,
                  std::string_view content_type, std::string_view accept, const Headers& headers);
    // As send, but a non-2xx answer throws ApiError.
    Response call(Method method, std::string_view target, std::string body = {},
                  std::string_view content_type = {}, std::string_view accept = "application/json");

    // JSON helpers: the answer's JSON (null for an empty body). A body of null sends nothing.
    nlohmann::json get_json(std::string_view target);
    nlohmann::json post_json(std::string_view target,
                             const nlohmann::json& body = nlohmann::json::object());
    nlohmann::json put_json(std::string_view target, const nlohmann::json& body);
    nlohmann::json patch_json(std::string_view target, const nlohmann::json& body);
    nlohmann::json delete_json(std::string_view target);

    // Raw bytes (screenshots, files): the full response, headers included.
    Response get_bytes(std::string_view target);
    Response put_bytes(std::string_view target, std::string bytes,
                       std::string_view content_type = "application/octet-stream");

    // A GET whose answer is read as it arrives (server-sent events): `on_data` gets each piece
    // of the body until it returns false or the server ends the answer. On a connection of its
    // own, with no deadline once the answer began. A non-2xx answer throws ApiError; a lost
    // connection, ConnectionError.
    void stream_get(std::string_view target, std::string_view accept,
                    const std::function<bool(std::string_view)>& on_data);
    // Any request whose answer is read as it arrives (an MCP call answered with events):
    // `on_data` gets the answer's status and headers and each piece of its body, whatever the
    // status, until it returns false or the answer ends. Returns the status and headers (no
    // body). On a connection of its own; a lost connection throws ConnectionError.
    Response send_streaming(
        Method method, std::string_view target, std::string body, std::string_view content_type,
        std::string_view accept, const Headers& headers,
        const std::function<bool(const Response& head, std::string_view piece)>& on_data);

    void set_request_timeout(std::chrono::milliseconds timeout);
    const ServerUrl& server() const;
    // How many TCP connections were opened so far (keep-alive reuse shows as 1).
    std::size_t connections_opened() const;
    void close();

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Builds the ApiError for a failed answer (JSON error body, or the body/reason as message).
ApiError error_from_response(const Response& response);

}  // namespace deskbox::client
