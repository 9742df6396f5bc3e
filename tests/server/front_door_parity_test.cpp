// REST and MCP share every rule: the same bad input gets the same code, field and words from
// POST /commands and the run_command tool, and both leave the same audit line. In-process on
// fake sandboxes (the fake agent refuses exec.run, which is after the audit).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api/api_router.hpp"
#include "tests/support/fake_sandbox_manager.hpp"

namespace deskbox::server {
namespace {

using nlohmann::json;

class FrontDoorParity : public ::testing::Test {
  protected:
    void SetUp() override {
        manager_ = test::make_fake_sandbox_manager(images_);
        router_ = std::make_unique<ApiRouter>(*manager_, ApiOptions{{kKey}, {}});
        auto created = call(http::verb::post, "/v1/sandboxes", "{}");
        ASSERT_EQ(created.result_int(), 201u) << created.body();
        id_ = json::parse(created.body())["id"];
        auto opened = call(http::verb::post, "/mcp",
                           rpc("initialize", {{"protocolVersion", "2025-06-18"},
                                              {"capabilities", json::object()},
                                              {"clientInfo", {{"name", "t"}, {"version", "1"}}}}));
        ASSERT_EQ(opened.result_int(), 200u) << opened.body();
        session_ = std::string(opened["Mcp-Session-Id"]);
    }

    HttpResponse call(http::verb method, const std::string& target, const std::string& body) {
        HttpRequest request{method, target, 11};
        request.set("Authorization", std::string("Bearer ") + kKey);
        request.set("Content-Type", "application/json");
        request.set("Accept", "application/json, text/event-stream");
        if (!session_.empty()) request.set("Mcp-Session-Id", session_);
        request.body() = body;
        request.prepare_payload();
        HttpExchange exchange{request, nullptr};
        return router_->handle(exchange);
    }
    static std::string rpc(const std::string& method, const json& params) {
        return json{{"jsonrpc", "2.0"}, {"id", 1}, {"method", method}, {"params", params}}.dump();
    }
    // POST /commands: the error object.
    json rest_error(const json& body) {
        auto res = call(http::verb::post, "/v1/sandboxes/" + id_ + "/commands", body.dump());
        return json::parse(res.body()).value("error", json::object());
    }
    // The run_command tool: its result (an isError result carries the error's words).
    json tool(const std::string& name, json arguments) {
        arguments["sandbox_id"] = id_;
        auto res = call(http::verb::post, "/mcp",
                        rpc("tools/call", {{"name", name}, {"arguments", arguments}}));
        EXPECT_EQ(res.result_int(), 200u) << res.body();
        return json::parse(res.body()).value("result", json::object());
    }
    std::vector<json> audit_lines(const std::string& kind) const {
        std::ifstream in(images_.scratch() / "state" / "audit" / (id_ + ".jsonl"));
        std::vector<json> lines;
        for (std::string line; std::getline(in, line);) {
            json entry = json::parse(line);
            if (entry.value("kind", "") == kind) lines.push_back(entry["detail"]);
        }
        return lines;
    }

    static constexpr const char* kKey = "k-parity";
    runtime::FakeTemplate images_;
    std::unique_ptr<SandboxManager> manager_;
    std::unique_ptr<ApiRouter> router_;
    std::string id_, session_;
};

TEST_F(FrontDoorParity, ABadCommandIsRefusedInTheSameWordsByBoth) {
    const std::vector<std::pair<std::string, json>> cases = {
        {"timeout_s", -1},   {"timeout_s", 0},      {"timeout_s", 86401}, {"timeout_s", 1e12},
        {"timeout_s", "60"}, {"background", "yes"}, {"shell", true},  // an unknown field
    };
    for (const auto& [field, value] : cases) {
        SCOPED_TRACE(field + "=" + value.dump());
        json rest = rest_error({{"cmd", "true"}, {field, value}});
        EXPECT_EQ(rest["code"], "bad_request");
        EXPECT_EQ(rest["field"], field);
        json mcp = tool("run_command", {{"command", "true"}, {field, value}});
        EXPECT_EQ(mcp["isError"], true) << mcp;
        EXPECT_EQ(mcp["content"][0]["text"], rest["message"].get<std::string>() + " (" +
                                                 rest["code"].get<std::string>() + ")");
    }
    EXPECT_TRUE(audit_lines("command").empty()) << "a refused command is not run";
}

TEST_F(FrontDoorParity, BothRunACommandUnderOneAuditKind) {
    // The fake agent refuses exec.run: the command was audited and sent, then answered 502.
    json rest = rest_error({{"cmd", "echo hi"}, {"timeout_s", 5}});
    EXPECT_EQ(rest["code"], "unknown_method") << rest;
    json mcp = tool("run_command", {{"command", "echo hi"}, {"timeout_s", 5}});
    EXPECT_EQ(mcp["isError"], true) << mcp;
    auto lines = audit_lines("command");
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[0], json({{"cmd", "echo hi"}, {"timeout_s", 5}}));
    // MCP runs it as a stream command it follows (progress, cancellation), and says so.
    EXPECT_EQ(lines[1],
              json({{"cmd", "echo hi"}, {"timeout_s", 5}, {"stream", true}, {"via", "mcp"}}));
    EXPECT_TRUE(audit_lines("mcp.run_command").empty());
}

TEST_F(FrontDoorParity, ToolArgumentsAreReadByTheSameStrictReader) {
    for (const auto& [name, arguments] :
         std::vector<std::pair<std::string, json>>{{"read_file", {{"path", "/x"}, {"mode", 1}}},
                                                   {"write_file", {{"path", 5}, {"content", ""}}},
                                                   {"screenshot", {{"scale", 2}}},
                                                   {"kill_sandbox", {{"force", true}}}}) {
        json result = tool(name, arguments);
        const std::string text = result["content"][0].value("text", "");
        EXPECT_EQ(result["isError"], true) << name;
        EXPECT_TRUE(text.ends_with("(bad_request)")) << name << ": " << text;
    }
}

}  // namespace
}  // namespace deskbox::server
