#include "server/templates/registry.hpp"

#include <netdb.h>
#include <openssl/evp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <regex>
#include <stdexcept>

#include "server/network/ip_range.hpp"

namespace deskbox::templates {

using nlohmann::json;

namespace {

#if defined(__aarch64__)
constexpr const char* kArchitecture = "arm64";
#else
constexpr const char* kArchitecture = "amd64";
#endif

std::string lower(std::string_view s) {
    std::string out(s);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// host[:port]: DNS labels or an IPv4 address, then an optional port 1..65535.
bool valid_registry(std::string_view registry) {
    static const std::regex host(
        R"(([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*(:[0-9]{1,5})?)");
    const std::string text = lower(registry);
    if (text.size() > 253 + 6 || !std::regex_match(text, host)) return false;
    if (auto colon = text.find(':'); colon != std::string::npos) {
        const long port = std::stol(text.substr(colon + 1));
        if (port < 1 || port > 65535) return false;
    }
    return true;
}

bool entry_matches(const std::vector<std::string>& entries, const std::string& registry) {
    const std::string wanted = lower(registry);
    return std::any_of(entries.begin(), entries.end(),
                       [&](const std::string& e) { return lower(e) == wanted; });
}

}  // namespace

std::string ImageReference::str() const {
    std::string s = registry + "/" + repository;
    if (!tag.empty()) s += ":" + tag;
    if (!digest.empty()) s += "@" + digest;
    if (tag.empty() && digest.empty()) s += ":latest";
    return s;
}

std::string ImageReference::pinned(const std::string& d) const {
    return registry + "/" + repository + "@" + d;
}

bool names_registry(std::string_view text) {
    const auto slash = text.find('/');
    if (slash == std::string_view::npos) return false;
    const auto first = text.substr(0, slash);
    return first != "localhost" &&
           (first.find('.') != std::string_view::npos || first.find(':') != std::string_view::npos);
}

std::optional<ImageReference> parse_image_reference(std::string_view text, std::string* why) {
    auto fail = [&](const std::string& reason) -> std::optional<ImageReference> {
        if (why) *why = reason;
        return std::nullopt;
    };
    if (text.size() > 512) return fail("longer than 512 characters");
    if (!names_registry(text))
        return fail(
            "'" + std::string(text) +
            "' names no registry: write it in full, "
            "HOST[:PORT]/REPOSITORY[:TAG|@sha256:DIGEST] (e.g. registry.example:5000/app:1)");
    ImageReference ref;
    std::string rest(text.substr(text.find('/') + 1));
    ref.registry = lower(text.substr(0, text.find('/')));
    if (!valid_registry(ref.registry)) return fail("'" + ref.registry + "' is not a registry host");
    if (auto at = rest.find('@'); at != std::string::npos) {
        ref.digest = rest.substr(at + 1);
        rest.resize(at);
        static const std::regex digest("sha256:[0-9a-f]{64}");
        if (!std::regex_match(ref.digest, digest))
            return fail("the digest must be sha256: and 64 lower-case hex digits");
    }
    if (auto colon = rest.rfind(':'); colon != std::string::npos) {
        ref.tag = rest.substr(colon + 1);
        rest.resize(colon);
        static const std::regex tag(R"([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})");
        if (!std::regex_match(ref.tag, tag))
            return fail("the tag '" + ref.tag + "' is not [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}");
    }
    static const std::regex repository(
        R"([a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*)");
    if (rest.empty() || rest.size() > 255 || !std::regex_match(rest, repository))
        return fail("the repository '" + rest +
                    "' must be lower-case path parts of [a-z0-9] joined by . _ __ or -");
    ref.repository = rest;
    return ref;
}

bool registry_allowed(const RegistryOptions& options, const std::string& registry) {
    return entry_matches(options.allowed, registry) || entry_matches(options.insecure, registry);
}

bool registry_insecure(const RegistryOptions& options, const std::string& registry) {
    return entry_matches(options.insecure, registry);
}

std::string registry_refusal(const RegistryOptions& options, const std::string& registry) {
    std::string allowed;
    for (const auto& list : {options.allowed, options.insecure})
        for (const auto& e : list) allowed += (allowed.empty() ? "" : ", ") + e;
    return "registry '" + registry +
           "' is not allowed: deskboxd pulls only from registries its operator names with "
           "--template-registry HOST[:PORT] (allowed here: " +
           (allowed.empty() ? std::string("none") : allowed) + ")";
}

std::optional<std::string> registry_entry_problem(std::string_view entry) {
    if (entry.find("://") != std::string_view::npos || entry.find('/') != std::string_view::npos)
        return "expected HOST[:PORT] (no scheme, no path), got '" + std::string(entry) + "'";
    if (!valid_registry(entry))
        return "'" + std::string(entry) +
               "' is not a host name or IPv4 address with an optional port";
    return std::nullopt;
}

ManifestReading read_manifest(const std::string& raw) {
    json m;
    try {
        m = json::parse(raw);
    } catch (const json::exception&) {
        throw std::runtime_error("the registry's manifest is not JSON");
    }
    if (!m.is_object()) throw std::runtime_error("the registry's manifest is not a JSON object");
    ManifestReading reading;
    const std::string media = m.value("mediaType", "");
    if (m.contains("manifests")) {
        // A manifest list (Docker) or an image index (OCI): this host's platform's image.
        reading.is_index = true;
        for (const auto& entry : m["manifests"]) {
            if (!entry.is_object() || !entry.contains("platform")) continue;
            const auto& platform = entry["platform"];
            if (platform.value("os", "") == "linux" &&
                platform.value("architecture", "") == kArchitecture && entry.contains("digest")) {
                reading.child = entry["digest"].get<std::string>();
                return reading;
            }
        }
        throw std::runtime_error(std::string("the image has no linux/") + kArchitecture +
                                 " variant");
    }
    if (m.value("schemaVersion", 0) != 2 || !m.contains("layers") || !m["layers"].is_array())
        throw std::runtime_error("unsupported manifest (" +
                                 (media.empty() ? std::string("schema 1?") : media) +
                                 "): deskbox pulls Docker v2 schema 2 and OCI images");
    auto size_of = [](const json& descriptor) -> std::uint64_t {
        if (!descriptor.is_object() || !descriptor.contains("size") ||
            !descriptor["size"].is_number_unsigned())
            throw std::runtime_error("the manifest names a blob without its size");
        return descriptor["size"].get<std::uint64_t>();
    };
    if (m.contains("config")) reading.layer_bytes += size_of(m["config"]);
    for (const auto& layer : m["layers"]) {
        reading.layer_bytes += size_of(layer);
        ++reading.layers;
    }
    return reading;
}

std::string sha256_digest(std::string_view bytes) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) != 1)
        throw std::runtime_error("SHA-256 failed");
    static const char* hex = "0123456789abcdef";
    std::string out = "sha256:";
    for (unsigned int i = 0; i < length; ++i) {
        out += hex[digest[i] >> 4];
        out += hex[digest[i] & 15];
    }
    return out;
}

json pull_network_policy(const std::string& registry) {
    std::string host = registry.substr(0, registry.find(':'));
    std::vector<network::IpAddress> addresses;
    if (auto literal = network::parse_ip_address(host)) {
        addresses.push_back(*literal);
    } else {
        addrinfo hints{};
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* found = nullptr;
        if (int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0 || !found)
            throw std::runtime_error("the registry's name '" + host +
                                     "' does not resolve: " + ::gai_strerror(rc));
        for (addrinfo* a = found; a; a = a->ai_next) {
            char text[NI_MAXHOST] = {};
            if (::getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof text, nullptr, 0,
                              NI_NUMERICHOST) == 0)
                if (auto address = network::parse_ip_address(text)) addresses.push_back(*address);
        }
        ::freeaddrinfo(found);
    }
    bool all_public = !addresses.empty();
    json allow = json::array();
    if (!network::parse_ip_address(host)) allow.push_back(host);
    for (const auto& address : addresses) {
        const auto c = network::classify(address);
        if (c.kind == network::AddressKind::never)
            throw std::runtime_error("registry '" + registry + "' is at " + address.to_string() +
                                     " (" + c.what +
                                     "): pulls never reach the host itself; run the registry on "
                                     "another machine or network namespace");
        if (c.kind != network::AddressKind::public_unicast) all_public = false;
        allow.push_back(network::canonical(address).to_string());
    }
    if (all_public) return true;
    return {{"allow", allow}};
}

std::vector<std::string> skopeo_inspect_args(const std::string& image, bool insecure) {
    std::vector<std::string> argv = {"skopeo", "inspect", "--raw", "--no-creds"};
    if (insecure) argv.push_back("--tls-verify=false");
    argv.push_back("docker://" + image);
    return argv;
}

}  // namespace deskbox::templates
