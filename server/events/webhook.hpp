// Webhooks: what the server's --config file says about them, where their URLs may point, and
// how each POST is signed. Delivery is webhook_sender.hpp.
#pragma once

#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/ip/address.hpp>
#include <nlohmann/json.hpp>

namespace deskbox::server::events {

struct WebhookConfig {
    std::string url;     // http:// or https://host[:port][/path]
    std::string secret;  // from "secret" or "secret_file"; never logged, never in argv
    // https only: a PEM file of CA certificates the receiver's certificate may also chain to,
    // beside the host's trust store (a receiver with a private CA).
    std::filesystem::path ca_file;
    std::set<std::string> types;  // the event types it wants; empty: all
    // May point at link-local and metadata addresses (169.254.0.0/16, fe80::/10).
    bool allow_private = false;
    std::chrono::milliseconds timeout{10'000};       // connect, send and answer, each
    std::chrono::milliseconds retry_initial{1'000};  // the first retry's wait; doubles up to:
    std::chrono::milliseconds retry_max{60'000};
};

// The config file's "webhooks": [{url, secret | secret_file, events?, allow_private?,
// timeout_ms?, retry_initial_ms?, retry_max_ms?, ca_file?}]. A relative secret_file or ca_file
// is read from `config_dir`. Throws std::invalid_argument naming webhooks[i].field.
std::vector<WebhookConfig> parse_webhooks(const nlohmann::json& list,
                                          const std::filesystem::path& config_dir);

// Where a webhook's URL points. https:// is TLS (port 443 unless given), http:// plain (80).
struct WebhookTarget {
    bool tls = false;
    std::string host;  // without IPv6 brackets: what is resolved, and the certificate's name
    std::string port;
    std::string path;         // "/" when the URL has none
    std::string host_header;  // the Host header: the port only when it is not the scheme's
};
// Throws std::invalid_argument saying what is wrong with `url`.
WebhookTarget webhook_target(const std::string& url);

// What a webhook must not reach: deskboxd's own listening address and port.
struct SelfAddress {
    boost::asio::ip::address address;  // may be unspecified (0.0.0.0, ::): every local one
    unsigned short port = 0;
};

// Why a webhook may not connect to `address`:`port` ("" if it may): deskboxd itself, or a
// link-local / metadata address without allow_private.
std::string refusal_of(const boost::asio::ip::address& address, unsigned short port,
                       const SelfAddress& self, bool allow_private);
// Resolves the webhook's host and checks every address it gives (at start; again at each
// connect). Throws std::invalid_argument saying which webhook and why.
void check_webhook_url(const WebhookConfig& webhook, const SelfAddress& self);

// The Deskbox-Signature header's value: "t=<unix_seconds>,v1=<hex HMAC-SHA256(secret,
// "<t>.<body>")>".
std::string webhook_signature(const std::string& secret, long long unix_seconds,
                              const std::string& body);

// The file name of a webhook's cursor: from its URL, so another URL starts afresh.
std::string cursor_file_name(const std::string& url);

}  // namespace deskbox::server::events
