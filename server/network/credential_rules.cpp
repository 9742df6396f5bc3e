#include "server/network/credential_rules.hpp"

#include <algorithm>

#include "common/ascii.hpp"
#include "server/network/network_policy.hpp"

namespace deskbox::network {

using nlohmann::json;

namespace {

constexpr std::string_view kSecretPrefix = "secret:";
constexpr std::size_t kMaxHeaderValue = 8192;
constexpr std::size_t kMaxPath = 1024;

bool is_token(std::string_view s) {
    if (s.empty() || s.size() > 64) return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    });
}

// Fields that frame or route the message: a rule that set them would desynchronize the proxy
// and the server, or send the request elsewhere.
bool is_framing_header(std::string_view name) {
    for (std::string_view f : {"host", "content-length", "transfer-encoding", "connection",
                               "upgrade", "te", "trailer", "keep-alive", "proxy-connection"})
        if (ascii_iequals(name, f)) return true;
    return false;
}

RuleHeader parse_header(const std::string& name, const json& value, const std::string& field) {
    if (!is_token(name)) throw PolicyError(field, "not an HTTP header name (1..64 token chars)");
    if (is_framing_header(name))
        throw PolicyError(field, "a rule may not set " + name + " (it frames or routes requests)");
    if (!value.is_string()) throw PolicyError(field, "expected a string (a value or secret:NAME)");
    const std::string text = value.get<std::string>();
    RuleHeader h{name, text, std::nullopt};
    if (text.rfind(kSecretPrefix, 0) == 0) {
        std::string secret = text.substr(kSecretPrefix.size());
        bool ok = !secret.empty() && secret.size() <= 64 &&
                  std::all_of(secret.begin(), secret.end(), [](char c) {
                      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
                             c == '-';
                  });
        if (!ok) throw PolicyError(field, "secret:NAME needs a secret name ([A-Za-z0-9_.-]{1,64})");
        h.value.clear();
        h.secret = std::move(secret);
        return h;
    }
    if (text.size() > kMaxHeaderValue)
        throw PolicyError(field, "at most " + std::to_string(kMaxHeaderValue) + " bytes");
    for (unsigned char c : text)
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            throw PolicyError(field, "a header value holds no control characters");
    return h;
}

CredentialRule parse_rule(const json& value, const std::string& field) {
    if (!value.is_object())
        throw PolicyError(field, "expected {\"domain\", \"path\", \"headers\"}");
    CredentialRule rule;
    if (!value.contains("domain")) throw PolicyError(field + ".domain", "required");
    if (!value.contains("headers")) throw PolicyError(field + ".headers", "required");
    for (const auto& [key, item] : value.items()) {
        const std::string at = field + "." + key;
        if (key == "domain") {
            PolicyEntry e = parse_policy_entry(item, at);
            if (e.kind == PolicyEntry::Kind::range)
                throw PolicyError(at, "a rule is for a domain or *.domain, not an address");
            rule.domain = e.domain;
            rule.wildcard = e.kind == PolicyEntry::Kind::wildcard;
        } else if (key == "path") {
            if (!item.is_string() || item.get<std::string>().empty() ||
                item.get<std::string>()[0] != '/' || item.get<std::string>().size() > kMaxPath)
                throw PolicyError(at, "expected a path prefix starting with '/'");
            rule.path = item.get<std::string>();
            for (unsigned char c : rule.path)
                if (c <= 0x20 || c >= 0x7f) throw PolicyError(at, "visible ASCII only");
        } else if (key == "headers") {
            if (!item.is_object() || item.empty() || item.size() > kMaxRuleHeaders)
                throw PolicyError(
                    at, "expected an object of 1.." + std::to_string(kMaxRuleHeaders) + " headers");
            for (const auto& [name, v] : item.items())
                rule.headers.push_back(parse_header(name, v, at + "." + name));
        } else {
            throw PolicyError(at, "unknown field (domain, path, headers)");
        }
    }
    return rule;
}

}  // namespace

bool CredentialRule::matches(std::string_view name, std::string_view request_path) const {
    const bool name_ok = wildcard ? name.size() > domain.size() + 1 &&
                                        name.substr(name.size() - domain.size()) == domain &&
                                        name[name.size() - domain.size() - 1] == '.'
                                  : name == domain;
    return name_ok && request_path.substr(0, path.size()) == path;
}

std::string CredentialRule::domain_text() const {
    return (wildcard ? "*." : "") + domain;
}

CredentialRules CredentialRules::parse(const json& value, const std::string& field) {
    if (!value.is_array()) throw PolicyError(field, "expected an array of rules");
    if (value.size() > kMaxCredentialRules)
        throw PolicyError(field, "at most " + std::to_string(kMaxCredentialRules) + " rules");
    CredentialRules out;
    for (std::size_t i = 0; i < value.size(); ++i)
        out.rules_.push_back(parse_rule(value[i], field + "[" + std::to_string(i) + "]"));
    return out;
}

bool CredentialRules::names(std::string_view name) const {
    return std::any_of(rules_.begin(), rules_.end(),
                       [&](const CredentialRule& r) { return r.matches(name, r.path); });
}

std::vector<const CredentialRule*> CredentialRules::matching(std::string_view name,
                                                             std::string_view path) const {
    std::vector<const CredentialRule*> out;
    for (const auto& r : rules_)
        if (r.matches(name, path)) out.push_back(&r);
    return out;
}

std::vector<std::string> CredentialRules::secret_names() const {
    std::vector<std::string> out;
    for (const auto& r : rules_)
        for (const auto& h : r.headers)
            if (h.secret && std::find(out.begin(), out.end(), *h.secret) == out.end())
                out.push_back(*h.secret);
    return out;
}

json CredentialRules::to_json() const {
    json out = json::array();
    for (const auto& r : rules_) {
        json headers = json::object();
        for (const auto& h : r.headers)
            headers[h.name] = h.secret ? std::string(kSecretPrefix) + *h.secret : h.value;
        json rule = {{"domain", r.domain_text()}, {"headers", headers}};
        if (!r.path.empty()) rule["path"] = r.path;
        out.push_back(std::move(rule));
    }
    return out;
}

json CredentialRules::describe() const {
    json out = to_json();
    for (std::size_t i = 0; i < rules_.size(); ++i)
        for (const auto& h : rules_[i].headers)
            if (!h.secret) out[i]["headers"][h.name] = "(inline value)";
    return out;
}

std::string_view request_path(std::string_view target) {
    if (target.empty() || target[0] != '/') {
        auto scheme = target.find("://");
        if (scheme == std::string_view::npos) return "/";
        auto slash = target.find_first_of("/?#", scheme + 3);
        if (slash == std::string_view::npos || target[slash] != '/') return "/";
        target.remove_prefix(slash);
    }
    return target.substr(0, target.find_first_of("?#"));
}

}  // namespace deskbox::network
