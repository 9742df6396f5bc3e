// Credential rules in a network policy (server/network/credential_rules.hpp): parsing with
// errors that name the field, matching by name and path prefix, and what inspect shows.
#include <gtest/gtest.h>

#include "server/network/network_policy.hpp"

namespace deskbox::network {
namespace {

using nlohmann::json;

json rule(json domain, json headers, std::optional<std::string> path = std::nullopt) {
    json r = {{"domain", std::move(domain)}, {"headers", std::move(headers)}};
    if (path) r["path"] = *path;
    return r;
}

TEST(CredentialRulesTest, ParseKeepsRulesAndRoundTrips) {
    json value = {
        {"allow", {"api.example.com"}},
        {"rules", json::array({rule("API.example.com.", {{"Authorization", "secret:gh"}}, "/v1/"),
                               rule("*.example.org", {{"X-Team", "ml"}})})}};
    auto p = NetworkPolicy::parse(value);
    ASSERT_EQ(p.rules().rules().size(), 2u);
    EXPECT_TRUE(p.inspects_http());
    EXPECT_EQ(p.rules().secret_names(), std::vector<std::string>{"gh"});
    const json round = p.to_json();
    EXPECT_EQ(round["rules"][0]["domain"], "api.example.com");
    EXPECT_EQ(round["rules"][0]["headers"]["Authorization"], "secret:gh");
    EXPECT_EQ(NetworkPolicy::parse(round).to_json(), round);
    // Inspect hides inline values, shows secret references.
    const json shown = p.describe()["rules"];
    EXPECT_EQ(shown[1]["headers"]["X-Team"], "(inline value)");
    EXPECT_EQ(shown[0]["headers"]["Authorization"], "secret:gh");
    // Rules alone: the internet with rules.
    auto open = NetworkPolicy::parse({{"rules", json::array({rule("a.example", {{"X", "1"}})})}});
    EXPECT_TRUE(open.allows_internet());
    EXPECT_TRUE(open.inspects_http());
    EXPECT_FALSE(NetworkPolicy::open().inspects_http());
}

TEST(CredentialRulesTest, MatchByNameAndPathPrefix) {
    auto p =
        NetworkPolicy::parse({{"rules", json::array({rule("api.example.com", {{"A", "1"}}, "/v1/"),
                                                     rule("*.example.org", {{"B", "2"}}),
                                                     rule("api.example.com", {{"C", "3"}})})}});
    const auto& rules = p.rules();
    EXPECT_EQ(rules.matching("api.example.com", "/v1/repos").size(), 2u);
    EXPECT_EQ(rules.matching("api.example.com", "/v2/repos").size(), 1u);
    EXPECT_EQ(rules.matching("x.example.org", "/").size(), 1u);
    EXPECT_EQ(rules.matching("example.org", "/").size(), 0u) << "a wildcard is below the name";
    EXPECT_EQ(rules.matching("evilexample.org", "/").size(), 0u);
    EXPECT_EQ(rules.matching("api.example.com.evil", "/v1/").size(), 0u);
    EXPECT_TRUE(rules.names("api.example.com"));
    EXPECT_FALSE(rules.names("example.com"));
    EXPECT_EQ(request_path("/v1/x?q=1"), "/v1/x");
    EXPECT_EQ(request_path("http://api.example.com/v1/x?q"), "/v1/x");
    EXPECT_EQ(request_path("http://api.example.com"), "/");
    EXPECT_EQ(request_path("*"), "/");
}

TEST(CredentialRulesTest, BadRulesAreRefusedNamingTheField) {
    const json ok_headers = {{"Authorization", "secret:gh"}};
    for (auto [rules, field] : std::vector<std::pair<json, std::string>>{
             {json("x"), "network.rules"},
             {json::array({json::object({{"headers", ok_headers}})}), "network.rules[0].domain"},
             {json::array({json::object({{"domain", "a.example"}})}), "network.rules[0].headers"},
             {json::array({rule("10.0.0.0/8", ok_headers)}), "network.rules[0].domain"},
             {json::array({rule("bad domain", ok_headers)}), "network.rules[0].domain"},
             {json::array({rule("a.example", ok_headers, "v1")}), "network.rules[0].path"},
             {json::array({rule("a.example", json::object())}), "network.rules[0].headers"},
             {json::array({rule("a.example", {{"Bad Name", "v"}})}),
              "network.rules[0].headers.Bad Name"},
             {json::array({rule("a.example", {{"Host", "v"}})}), "network.rules[0].headers.Host"},
             {json::array({rule("a.example", {{"Content-Length", "1"}})}),
              "network.rules[0].headers.Content-Length"},
             {json::array({rule("a.example", {{"X", "a\r\nY: b"}})}), "network.rules[0].headers.X"},
             {json::array({rule("a.example", {{"X", std::string(9000, 'v')}})}),
              "network.rules[0].headers.X"},
             {json::array({rule("a.example", {{"X", "secret:"}})}), "network.rules[0].headers.X"},
             {json::array({rule("a.example", {{"X", "secret:a/b"}})}),
              "network.rules[0].headers.X"},
             {json::array({rule("a.example", {{"X", 5}})}), "network.rules[0].headers.X"},
             {json::array({json{{"domain", "a.example"}, {"headers", ok_headers}, {"when", 1}}}),
              "network.rules[0].when"},
             {json(std::vector<json>(65, rule("a.example", ok_headers))), "network.rules"},
         }) {
        try {
            NetworkPolicy::parse({{"rules", rules}});
            ADD_FAILURE() << rules.dump().substr(0, 200) << " was accepted";
        } catch (const PolicyError& e) {
            EXPECT_EQ(e.field(), field) << e.what();
            EXPECT_EQ(std::string(e.what()).find("\r\n"), std::string::npos);
        }
    }
}

}  // namespace
}  // namespace deskbox::network
