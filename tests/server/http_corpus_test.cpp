// Replays the HTTP fuzzer's seed corpus (server/api/fuzz/corpus) through the fuzz target's own
// checks, so every build exercises them without clang; and checks, on a fake sandbox, the
// answers the fuzzer's invariant cannot name: which field a bad byte is reported in.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "common/utf8.hpp"
#include "server/api/api_router.hpp"
#include "tests/support/corpus_replay.hpp"
#include "tests/support/fake_sandbox_manager.hpp"
#include "tests/support/test_paths.hpp"

namespace deskbox::server {
namespace {

using nlohmann::json;

TEST(HttpCorpus, EverySeedPassesTheFuzzChecks) {
    EXPECT_GE(test::replay_corpus(deskbox::test_paths::source("server/api/fuzz/corpus")), 30u);
}

class FakeSandboxApi : public ::testing::Test {
  protected:
    void SetUp() override {
        // A real container network (root), as runc's sandboxes get: exposed ports reach it.
        manager_ = test::make_fake_sandbox_manager(images_, {}, runtime::NetworkAttach::netns);
        router_ = std::make_unique<ApiRouter>(*manager_, ApiOptions{});
        auto created = call(http::verb::post, "/v1/sandboxes", "{}");
        ASSERT_EQ(created.result_int(), 201u) << created.body();
        json sandbox = json::parse(created.body());
        id_ = sandbox["id"];
        control_token_ = sandbox["control_token"];
    }
    HttpResponse call(http::verb method, const std::string& target, const std::string& body,
                      const std::string& bearer = {}) {
        HttpRequest request{method, target, 11};
        if (!bearer.empty()) request.set(http::field::authorization, "Bearer " + bearer);
        request.body() = body;
        request.prepare_payload();
        HttpExchange exchange{request, nullptr};
        return router_->handle(exchange);
    }
    // The error of an answer that must be a 400.
    json error_of(const HttpResponse& res) {
        EXPECT_EQ(res.result_int(), 400u) << res.body();
        return json::parse(res.body()).value("error", json::object());
    }
    runtime::FakeTemplate images_;
    std::unique_ptr<SandboxManager> manager_;
    std::unique_ptr<ApiRouter> router_;
    std::string id_, control_token_;
};

// What a fuzzing user saw as 500s: invalid UTF-8 in a string of /commands, /actions, /timeout.
TEST_F(FakeSandboxApi, InvalidUtf8InASandboxRouteIsA400NamingTheField) {
    const std::string base = "/v1/sandboxes/" + id_;
    auto e = error_of(call(http::verb::post, base + "/commands", "{\"cmd\":\"echo \xff\"}"));
    EXPECT_EQ(e["code"], "invalid_utf8");
    EXPECT_EQ(e["field"], "cmd");
    e = error_of(call(http::verb::post, base + "/actions",
                      R"({"actions":[{"type":"type","text":"ok"},{"type":"type","text":"a)"
                      "\xc3("
                      R"(b"}]})"));
    EXPECT_EQ(e["code"], "invalid_utf8");
    EXPECT_EQ(e["field"], "actions[1].text");
    e = error_of(call(http::verb::post, base + "/timeout", "{\"timeout_s\":60,\"n\xfe\":1}"));
    EXPECT_EQ(e["code"], "invalid_utf8");
    EXPECT_FALSE(e.contains("field")) << e;  // a member name at the top: no field to name
    EXPECT_NE(e["message"].get<std::string>().find("a member name"), std::string::npos);
    // The fake agent refuses what it is asked: a 502 from the agent, not a 500 of the server.
    auto shot = call(http::verb::get, base + "/screenshot", "");
    EXPECT_EQ(shot.result_int(), 200u) << shot.body();
    auto refused = call(http::verb::post, base + "/commands", R"({"cmd":"true"})");
    EXPECT_EQ(refused.result_int(), 502u) << refused.body();
    EXPECT_EQ(json::parse(refused.body())["error"]["code"], "unknown_method");
}

// The input limits hold through HTTP too, each a 400 naming the field.
TEST_F(FakeSandboxApi, InputLimitsAre400sNamingTheField) {
    const std::string actions = "/v1/sandboxes/" + id_ + "/actions";
    json batch = json::array();
    for (std::size_t i = 0; i <= input::kMaxBatchActions; ++i)
        batch.push_back({{"type", "move"}, {"x", 1}, {"y", 1}});
    auto e = error_of(call(http::verb::post, actions, json{{"actions", batch}}.dump()));
    EXPECT_EQ(e["field"], "actions") << e;
    e = error_of(
        call(http::verb::post, actions,
             json{{"type", "type"}, {"text", std::string(input::kMaxTextBytes + 1, 'a')}}.dump()));
    EXPECT_EQ(e["field"], "text") << e;
    json path = json::array();
    for (std::size_t i = 0; i <= input::kMaxDragPoints; ++i) path.push_back({i % 300, 10});
    e = error_of(call(http::verb::post, actions, json{{"type", "drag"}, {"path", path}}.dump()));
    EXPECT_EQ(e["field"], "path") << e;
    e = error_of(call(http::verb::post, actions,
                      json{{"type", "wait"}, {"duration_ms", input::kMaxWaitMs + 1}}.dump()));
    EXPECT_EQ(e["field"], "duration_ms") << e;
}

TEST_F(FakeSandboxApi, WebSocketsAndPortsNeedAConnection) {
    auto res = call(http::verb::get, "/v1/sandboxes/" + id_ + "/ports/8080/", "", control_token_);
    EXPECT_EQ(json::parse(res.body())["error"]["code"], "no_connection") << res.body();
    res = call(http::verb::get, "/v1/sandboxes/" + id_ + "/stream?token=" + control_token_, "");
    EXPECT_EQ(json::parse(res.body())["error"]["code"], "upgrade_required") << res.body();
}

TEST(AuditLine, KeepsBytesThatAreNotUtf8AsEscapes) {
    runtime::FakeTemplate scratch;
    auto path = scratch.scratch() / "audit.jsonl";
    Sandbox::append_audit(path, "sb-test", "dns", {{"name", "ex\xffmple.test"}, {"k\x80", 1}});
    std::ifstream in(path);
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    ASSERT_TRUE(utf8::is_valid(line)) << line;
    json parsed = json::parse(line);
    EXPECT_EQ(parsed["detail"]["name"], "ex\\xFFmple.test");
    EXPECT_EQ(parsed["detail"]["k\\x80"], 1);
}

}  // namespace
}  // namespace deskbox::server
