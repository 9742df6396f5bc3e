#include "server/events/webhook.hpp"

#include <ifaddrs.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/x509_vfy.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "server/client/api_client.hpp"
#include "server/events/event.hpp"
#include "server/network/ip_range.hpp"

namespace deskbox::server::events {

using nlohmann::json;
namespace ip = boost::asio::ip;

namespace {

std::invalid_argument field_error(std::size_t i, const std::string& field,
                                  const std::string& message) {
    return std::invalid_argument("webhooks[" + std::to_string(i) + "]" +
                                 (field.empty() ? "" : "." + field) + ": " + message);
}

std::chrono::milliseconds milliseconds_field(const json& hook, std::size_t i, const char* field,
                                             std::chrono::milliseconds fallback) {
    if (!hook.contains(field)) return fallback;
    const auto& v = hook[field];
    if (!v.is_number_integer() || v.get<long long>() < 1 || v.get<long long>() > 3'600'000)
        throw field_error(i, field, "expected an integer from 1 to 3600000 (milliseconds)");
    return std::chrono::milliseconds(v.get<long long>());
}

std::string read_secret(const json& hook, std::size_t i, const std::filesystem::path& dir) {
    const bool inline_secret = hook.contains("secret"), file = hook.contains("secret_file");
    if (inline_secret == file) throw field_error(i, "secret", "give one of secret, secret_file");
    if (inline_secret) {
        if (!hook["secret"].is_string() || hook["secret"].get<std::string>().empty())
            throw field_error(i, "secret", "expected a non-empty string");
        return hook["secret"].get<std::string>();
    }
    if (!hook["secret_file"].is_string())
        throw field_error(i, "secret_file", "expected a file name");
    std::filesystem::path path = hook["secret_file"].get<std::string>();
    if (path.is_relative()) path = dir / path;
    std::ifstream in(path, std::ios::binary);
    std::string secret((std::istreambuf_iterator<char>(in)), {});
    if (!in.good() && !in.eof())
        throw field_error(i, "secret_file", "cannot read " + path.string());
    while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
    if (secret.empty()) throw field_error(i, "secret_file", path.string() + " is empty or missing");
    return secret;
}

// A webhook's own CA file: read now, so a missing or unreadable file (or one with no
// certificate) stops the server at start naming the field, not each delivery later.
std::filesystem::path read_ca_file(const json& hook, std::size_t i,
                                   const std::filesystem::path& dir, bool tls) {
    if (!hook.contains("ca_file")) return {};
    if (!tls) throw field_error(i, "ca_file", "only for https:// URLs");
    if (!hook["ca_file"].is_string() || hook["ca_file"].get<std::string>().empty())
        throw field_error(i, "ca_file", "expected a file name");
    std::filesystem::path path = hook["ca_file"].get<std::string>();
    if (path.is_relative()) path = dir / path;
    const std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(),
                                                                        X509_STORE_free);
    if (!store || X509_STORE_load_file(store.get(), path.c_str()) != 1) {
        ERR_clear_error();
        throw field_error(i, "ca_file", "cannot read certificates (PEM) from " + path.string());
    }
    return path;
}

WebhookConfig parse_one(const json& hook, std::size_t i, const std::filesystem::path& dir) {
    static const std::set<std::string> kKnown = {
        "url",        "secret",           "secret_file",  "events", "allow_private",
        "timeout_ms", "retry_initial_ms", "retry_max_ms", "ca_file"};
    if (!hook.is_object()) throw field_error(i, "", "expected an object");
    for (const auto& [key, value] : hook.items())
        if (!kKnown.count(key)) throw field_error(i, key, "unknown field");
    WebhookConfig w;
    if (!hook.contains("url") || !hook["url"].is_string())
        throw field_error(i, "url", "expected an http:// or https:// URL");
    w.url = hook["url"].get<std::string>();
    WebhookTarget target;
    try {
        target = webhook_target(w.url);
    } catch (const std::invalid_argument& e) {
        throw field_error(i, "url", e.what());
    }
    if (hook.contains("allow_private")) {
        if (!hook["allow_private"].is_boolean())
            throw field_error(i, "allow_private", "expected true or false");
        w.allow_private = hook["allow_private"].get<bool>();
    }
    // An address written in the URL is checked here; a name once resolved (check_webhook_url).
    if (const auto literal = network::parse_ip_address(target.host)) {
        const auto why = refusal_of(*literal, 0, SelfAddress{}, w.allow_private);
        if (!why.empty()) throw field_error(i, "url", why);
    }
    w.secret = read_secret(hook, i, dir);
    w.ca_file = read_ca_file(hook, i, dir, target.tls);
    if (hook.contains("events")) {
        if (!hook["events"].is_array()) throw field_error(i, "events", "expected a list of types");
        std::string joined;
        for (const auto& type : hook["events"]) {
            if (!type.is_string()) throw field_error(i, "events", "expected a list of types");
            joined += (joined.empty() ? "" : ",") + type.get<std::string>();
        }
        try {
            w.types = parse_event_types(joined);
        } catch (const std::invalid_argument& e) {
            throw field_error(i, "events", e.what());
        }
    }
    w.timeout = milliseconds_field(hook, i, "timeout_ms", w.timeout);
    w.retry_initial = milliseconds_field(hook, i, "retry_initial_ms", w.retry_initial);
    w.retry_max = milliseconds_field(hook, i, "retry_max_ms", w.retry_max);
    return w;
}

std::string hex_of(const unsigned char* bytes, unsigned int length) {
    static const char* kHex = "0123456789abcdef";
    std::string hex;
    for (unsigned int i = 0; i < length; ++i) {
        hex += kHex[bytes[i] >> 4];
        hex += kHex[bytes[i] & 15];
    }
    return hex;
}

bool is_local_address(const ip::address& address) {
    if (address.is_loopback()) return true;
    ifaddrs* all = nullptr;
    if (::getifaddrs(&all) != 0) return false;
    bool found = false;
    for (auto* a = all; a && !found; a = a->ifa_next) {
        if (!a->ifa_addr) continue;
        if (a->ifa_addr->sa_family == AF_INET) {
            const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
            found = ip::address_v4(ntohl(in->sin_addr.s_addr)) == address;
        } else if (a->ifa_addr->sa_family == AF_INET6) {
            const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
            ip::address_v6::bytes_type bytes;
            std::copy(std::begin(in6->sin6_addr.s6_addr), std::end(in6->sin6_addr.s6_addr),
                      bytes.begin());
            found = ip::address_v6(bytes) == address;
        }
    }
    ::freeifaddrs(all);
    return found;
}

}  // namespace

WebhookTarget webhook_target(const std::string& url) {
    WebhookTarget target;
    const auto scheme_is = [&](std::string_view scheme) {
        return url.size() >= scheme.size() &&
               std::equal(scheme.begin(), scheme.end(), url.begin(), [](char a, char b) {
                   return a == std::tolower(static_cast<unsigned char>(b));
               });
    };
    std::string plain;
    if (scheme_is("https://")) {
        target.tls = true;
        plain = "http://" + url.substr(8);
    } else if (scheme_is("http://")) {
        plain = url;
    } else {
        throw std::invalid_argument("expected an http:// or https:// URL");
    }
    client::ServerUrl parsed;
    try {
        // The client's parser knows http:// only; the scheme decides TLS and the default port.
        parsed = client::parse_server_url(plain);
    } catch (const std::invalid_argument& e) {
        const std::string why = e.what();
        const auto reason = why.find("\": ");
        throw std::invalid_argument(reason == std::string::npos ? why : why.substr(reason + 3));
    }
    const std::string authority = plain.substr(7, plain.find_first_of("/?#", 7) - 7);
    const auto colon = authority.rfind(':'), bracket = authority.rfind(']');
    const bool port_given =
        colon != std::string::npos && (bracket == std::string::npos || colon > bracket);
    target.host = parsed.host;
    target.port = target.tls && !port_given ? "443" : parsed.port;
    target.path = parsed.base_path.empty() ? "/" : parsed.base_path;
    const bool ipv6 = target.host.find(':') != std::string::npos;
    target.host_header = ipv6 ? "[" + target.host + "]" : target.host;
    if (target.port != (target.tls ? "443" : "80")) target.host_header += ":" + target.port;
    return target;
}

std::vector<WebhookConfig> parse_webhooks(const json& list, const std::filesystem::path& dir) {
    if (!list.is_array()) throw std::invalid_argument("webhooks: expected a list of objects");
    std::vector<WebhookConfig> hooks;
    for (std::size_t i = 0; i < list.size(); ++i) hooks.push_back(parse_one(list[i], i, dir));
    return hooks;
}

std::string refusal_of(const ip::address& raw, unsigned short port, const SelfAddress& self,
                       bool allow_private) {
    const ip::address address = network::canonical(raw);
    const ip::address self_address = network::canonical(self.address);
    if (self.port != 0 && port == self.port &&
        (address == self_address || (self_address.is_unspecified() && is_local_address(address))))
        return address.to_string() + ":" + std::to_string(port) + " is deskboxd itself";
    static const auto v4_link_local = *network::parse_ip_range("169.254.0.0/16");
    static const auto v6_link_local = *network::parse_ip_range("fe80::/10");
    if (!allow_private && (v4_link_local.contains(address) || v6_link_local.contains(address)))
        return address.to_string() +
               " is link-local (cloud metadata lives there); set \"allow_private\": true to "
               "allow it";
    return {};
}

void check_webhook_url(const WebhookConfig& webhook, const SelfAddress& self) {
    const auto url = webhook_target(webhook.url);
    boost::asio::io_context io;
    boost::system::error_code ec;
    const auto found = ip::tcp::resolver(io).resolve(url.host, url.port, ec);
    if (ec)
        throw std::invalid_argument("webhook " + webhook.url + ": cannot resolve " + url.host +
                                    ": " + ec.message());
    for (const auto& entry : found) {
        const auto why = refusal_of(entry.endpoint().address(), entry.endpoint().port(), self,
                                    webhook.allow_private);
        if (!why.empty()) throw std::invalid_argument("webhook " + webhook.url + ": " + why);
    }
}

std::string webhook_signature(const std::string& secret, long long unix_seconds,
                              const std::string& body) {
    const std::string signed_text = std::to_string(unix_seconds) + "." + body;
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
         reinterpret_cast<const unsigned char*>(signed_text.data()), signed_text.size(), mac,
         &length);
    return "t=" + std::to_string(unix_seconds) + ",v1=" + hex_of(mac, length);
}

std::string cursor_file_name(const std::string& url) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    EVP_Digest(url.data(), url.size(), digest, &length, EVP_sha256(), nullptr);
    return hex_of(digest, 8) + ".cursor";
}

}  // namespace deskbox::server::events
