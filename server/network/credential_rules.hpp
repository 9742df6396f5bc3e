// Credential rules: the `rules` of a sandbox's network policy. For a domain (exact or "*.")
// and an optional path prefix, the egress proxy sets request headers (adding them, or replacing
// what the sandbox sent under that name), with values given inline or as "secret:NAME" (a
// secret deskboxd keeps: server/secrets/). Pure parsing and matching; the proxy applies them.
//
//   "rules": [{"domain": "api.example.com", "path": "/v1/",
//              "headers": {"Authorization": "secret:gh", "X-Team": "ml"}}]
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace deskbox::network {

struct RuleHeader {
    std::string name;                   // as given (HTTP field names are case-insensitive)
    std::string value;                  // inline; empty when `secret` is set
    std::optional<std::string> secret;  // "secret:NAME" -> NAME
};

struct CredentialRule {
    std::string domain;  // normalized; a wildcard's is the part after "*."
    bool wildcard = false;
    std::string path;  // a prefix of the request's path ("" : every path)
    std::vector<RuleHeader> headers;

    bool matches(std::string_view normalized_name, std::string_view path) const;
    std::string domain_text() const;  // as written ("*.example.org")
};

constexpr std::size_t kMaxCredentialRules = 64;
constexpr std::size_t kMaxRuleHeaders = 16;

class CredentialRules {
  public:
    // `value`: the array under `field`. Throws PolicyError naming the offending part.
    static CredentialRules parse(const nlohmann::json& value, const std::string& field);

    bool empty() const { return rules_.empty(); }
    const std::vector<CredentialRule>& rules() const { return rules_; }
    // Some rule is for this name (any path).
    bool names(std::string_view normalized_name) const;
    // The rules for a request, in order (later ones win for the same header).
    std::vector<const CredentialRule*> matching(std::string_view normalized_name,
                                                std::string_view path) const;
    // Every secret the rules name.
    std::vector<std::string> secret_names() const;

    nlohmann::json to_json() const;   // as parse() takes it (inline values included)
    nlohmann::json describe() const;  // for inspect: inline values hidden

  private:
    std::vector<CredentialRule> rules_;
};

// The path of a request-target: origin form up to '?', an absolute form's after its authority.
std::string_view request_path(std::string_view target);

}  // namespace deskbox::network
