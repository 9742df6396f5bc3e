// Secrets and credential rules through deskboxd: the write-only store (POST/GET/DELETE
// /v1/secrets: durable, 0600, never showing a value) and, with real runc containers of the
// `minimal` template and a test internet of the test's own (tests/support/test_internet.hpp),
// headers the egress proxy puts into a sandbox's requests without the sandbox ever holding
// the value.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include "tests/server/internet_fixture.hpp"

namespace deskbox {
namespace {

using namespace test;

constexpr const char* kValue = "s3cr3t-Value-7f1c9a";

std::string rot13_of(std::string text) {
    for (char& c : text)
        if (std::isalpha(static_cast<unsigned char>(c)))
            c = static_cast<char>((std::islower(static_cast<unsigned char>(c)) ? 'a' : 'A') +
                                  (std::tolower(static_cast<unsigned char>(c)) - 'a' + 13) % 26);
    return text;
}

// Every file under `dir` whose bytes hold `needle`, but `except`.
std::vector<std::string> files_holding(const std::filesystem::path& dir, const std::string& needle,
                                       const std::filesystem::path& except) {
    std::vector<std::string> found;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
         it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) break;
        if (!it->is_regular_file(ec) || it->path() == except || it->file_size(ec) > (64u << 20))
            continue;
        if (file_text(it->path()).find(needle) != std::string::npos)
            found.push_back(it->path().string());
    }
    return found;
}

TEST(Secrets, AreWriteOnlyDurableAndPrivate) {
    TempDir state("deskboxd-secrets");
    {
        Server s({}, state.path());
        auto made = s.post("/v1/secrets", {{"name", "gh"}, {"value", kValue}});
        ASSERT_EQ(made.status, 201u) << made.body;
        EXPECT_EQ(made.js()["name"], "gh");
        EXPECT_TRUE(made.js().contains("created_at")) << made.body;
        auto replaced =
            s.post("/v1/secrets", {{"name", "gh"}, {"value", std::string(kValue) + "2"}});
        EXPECT_EQ(replaced.status, 200u) << replaced.body;
        ASSERT_EQ(s.post("/v1/secrets", {{"name", "other.one"}, {"value", "x"}}).status, 201u);
        auto listed = s.get("/v1/secrets");
        EXPECT_EQ(listed.status, 200u);
        const json list = listed.js()["secrets"];
        ASSERT_EQ(list.size(), 2u) << listed.body;
        EXPECT_EQ(list[0]["name"], "gh");
        for (const auto& answer : {made, replaced, listed})
            EXPECT_EQ(answer.body.find(kValue), std::string::npos) << answer.body;
        EXPECT_EQ(s.log().find(kValue), std::string::npos) << "the value is in deskboxd's log";
    }
    const auto file = state.path() / "secrets" / "secrets.json";
    struct stat st {};
    ASSERT_EQ(::stat(file.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    ASSERT_EQ(::stat(file.parent_path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    EXPECT_NE(file_text(file).find(std::string(kValue) + "2"), std::string::npos);
    EXPECT_EQ(files_holding(state.path(), kValue, file), std::vector<std::string>{});

    Server restarted({}, state.path());
    const json names = restarted.get("/v1/secrets").js()["secrets"];
    ASSERT_EQ(names.size(), 2u) << names.dump();
    EXPECT_EQ(restarted.del("/v1/secrets/gh").status, 200u);
    auto gone = restarted.del("/v1/secrets/gh");
    EXPECT_EQ(gone.status, 404u);
    EXPECT_EQ(gone.js()["error"]["code"], "secret_not_found") << gone.body;
    EXPECT_EQ(restarted.get("/v1/secrets").js()["secrets"].size(), 1u);
    EXPECT_EQ(file_text(file).find(kValue), std::string::npos);
}

TEST(Secrets, BadInputIsA400NamingTheField) {
    Server s;
    for (auto [body, field] : std::vector<std::pair<json, std::string>>{
             {{{"name", "gh"}}, "value"},
             {{{"value", "v"}}, "name"},
             {{{"name", "gh"}, {"value", "v"}, {"scope", "all"}}, "scope"},
             {{{"name", "a/b"}, {"value", "v"}}, "name"},
             {{{"name", std::string(65, 'n')}, {"value", "v"}}, "name"},
             {{{"name", "gh"}, {"value", ""}}, "value"},
             {{{"name", "gh"}, {"value", std::string(8193, 'v')}}, "value"},
             {{{"name", "gh"}, {"value", "line\r\nX-Evil: 1"}}, "value"},
             {{{"name", "gh"}, {"value", 5}}, "value"},
         }) {
        auto a = s.post("/v1/secrets", body);
        EXPECT_EQ(a.status, 400u) << body.dump().substr(0, 200) << ": " << a.body;
        EXPECT_EQ(a.js()["error"]["field"], field) << a.body;
        EXPECT_EQ(a.body.find("X-Evil"), std::string::npos) << "the value is echoed: " << a.body;
    }
    EXPECT_EQ(s.get("/v1/secrets").js()["secrets"].size(), 0u);
    // Secrets stay out of images: a template build takes no credential rules.
    auto build = s.post(
        "/v1/templates/builds",
        {{"name", "with-rules"},
         {"dockerfile", "FROM deskbox/minimal\n"},
         {"network",
          {{"rules", json::array({{{"domain", "a.example"}, {"headers", {{"X", "1"}}}}})}}}});
    EXPECT_EQ(build.status, 400u) << build.body;
    EXPECT_EQ(build.js()["error"]["field"], "network.rules") << build.body;
}

// --------------------------------------------------------------- credential rules end to end

class SecretsInSandbox : public InternetSandboxes {
  protected:
    SecretsInSandbox()
        : InternetSandboxes({{"api.deskbox.test", "web"}, {"other.test", "other"}}) {}
    // The headers the test internet saw on requests for /headers... to `host`.
    std::string seen_by(const std::string& host) {
        std::string all;
        for (const auto& line : internet_->requests_seen())
            if (line.rfind("host=" + host, 0) == 0) all += line + "\n";
        return all;
    }
};

TEST_F(SecretsInSandbox, CurlInsideGetsTheHeaderWithoutEverHoldingTheSecret) {
    Server s(server_flags());
    ASSERT_EQ(
        s.post("/v1/secrets", {{"name", "api"}, {"value", std::string("Bearer ") + kValue}}).status,
        201u);
    const json rules = json::array(
        {{{"domain", "api.deskbox.test"}, {"headers", {{"Authorization", "secret:api"}}}}});
    auto missing = s.post(
        "/v1/sandboxes",
        {{"network",
          {{"rules",
            json::array({{{"domain", "api.deskbox.test"}, {"headers", {{"X", "secret:nope"}}}}})}}},
         {"ready", false}});
    EXPECT_EQ(missing.status, 400u) << missing.body;
    EXPECT_EQ(missing.js()["error"]["code"], "secret_not_found") << missing.body;
    auto created =
        s.post("/v1/sandboxes",
               {{"network", {{"allow", {"api.deskbox.test", "other.test"}}, {"rules", rules}}},
                {"ready", false}});
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    const std::string id = created.js().value("id", "");
    const std::string curl = "curl -sS -o /dev/null -w '%{http_code} ' --max-time 8 ";
    EXPECT_EQ(
        run(s, id, curl + "http://api.deskbox.test/headers; " + curl + "http://other.test/headers"),
        "200 200 ");
    EXPECT_NE(seen_by("api.deskbox.test").find(std::string("Authorization: Bearer ") + kValue),
              std::string::npos)
        << seen_by("api.deskbox.test");
    EXPECT_EQ(seen_by("other.test").find("Authorization"), std::string::npos)
        << "a domain without a rule arrives unmodified: " << seen_by("other.test");
    // Nothing in the sandbox holds it: files, environments, command lines. The value is looked
    // for without being written into the command (its line and audit would hold it): ROT13.
    const std::string rot13 = "tr 'A-Za-z' 'N-ZA-Mn-za-m'";
    const std::string scan =
        run(s, id,
            "echo '" + rot13_of(kValue) + "' | " + rot13 +
                " > /tmp/.pattern; grep -cF -f /tmp/.pattern /tmp/.pattern; "
                "grep -rlsF -f /tmp/.pattern --exclude=.pattern /etc /home /root /tmp /var /run "
                "/opt /usr/local; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | "
                "grep -caF -f /tmp/.pattern; env | grep -c Bearer; rm /tmp/.pattern");
    EXPECT_EQ(scan, "1\n0\n0\n") << scan;  // the pattern finds itself, and nothing else
    // Nor any answer of the API, nor deskboxd's files but the store (the event log, the audit
    // log, the sandbox record included).
    for (const std::string& path : std::vector<std::string>{"/v1/sandboxes/" + id, "/v1/sandboxes",
                                                            "/v1/secrets", "/metrics"}) {
        auto a = s.get(path);
        EXPECT_EQ(a.body.find(kValue), std::string::npos) << path << ": " << a.body;
    }
    auto inspect = s.get("/v1/sandboxes/" + id).js();
    EXPECT_EQ(inspect["network"]["policy"]["rules"][0]["headers"]["Authorization"], "secret:api")
        << inspect.dump();
    EXPECT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
    EXPECT_EQ(files_holding(s.state(), kValue, s.state() / "secrets" / "secrets.json"),
              std::vector<std::string>{});
    EXPECT_EQ(s.log().find(kValue), std::string::npos);
}

}  // namespace
}  // namespace deskbox
