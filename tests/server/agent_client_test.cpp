// The typed agent client against an agent in the test's process: what each function sends,
// what it audits, how long it waits, and the SandboxError each agent failure becomes (read as
// the API answers it).
#include "server/sandbox/agent_client.hpp"

#include <gtest/gtest.h>

#include <future>
#include <string>
#include <utility>
#include <vector>

#include "server/api/sandbox_errors.hpp"
#include "tests/support/in_process_agent.hpp"

namespace deskbox::server {
namespace {

using nlohmann::json;
using protocol::AgentMethod;
using namespace std::chrono_literals;

struct AuditLine {
    std::string kind;
    json detail;
};

class AgentClientTest : public ::testing::Test {
  protected:
    // A client on `agent` whose sandbox works in /work and records its audit lines.
    AgentClient client_on(test::InProcessAgent& agent) {
        AgentLink link;
        auto rpc = agent.client();
        link.connection = [rpc] { return rpc; };
        link.audit = [this](const std::string& kind, const json& detail) {
            audit.push_back({kind, detail});
        };
        link.exhaustion = [this](const std::string& what) -> std::optional<SandboxError> {
            if (!at_limit) return std::nullopt;
            return SandboxError(SandboxFault::conflict, "sandbox_exhausted",
                                "at the process limit: " + what, "limits.pids");
        };
        link.lost = [] { return std::string("the VM exited"); };
        link.way_back = "; kill its processes";
        link.default_cwd = [] { return std::string("/work"); };
        return AgentClient(std::move(link));
    }
    // The SandboxError `fn` throws, as the API answers it (a failure if it throws none).
    template <typename Fn>
    static ApiError error_of(Fn fn) {
        try {
            fn();
        } catch (const SandboxError& e) {
            return to_api_error(e);
        }
        ADD_FAILURE() << "no SandboxError";
        return ApiError(0, "", "");
    }

    std::vector<AuditLine> audit;
    bool at_limit = false;
};

TEST_F(AgentClientTest, ACommandGoesOutTypedAuditedOnceAndWhereTheSandboxWorks) {
    test::InProcessAgent agent;
    AgentClient client = client_on(agent);
    CommandRequest command;
    command.cmd = "cat";
    command.env = std::map<std::string, std::string>{{"A", "1"}};
    command.timeout_s = 2.5;
    command.stdin_bytes = "hello";
    CommandResult result = client.run_command(command);
    ASSERT_EQ(agent.received().size(), 1u);
    const auto sent = agent.received()[0];
    EXPECT_EQ(sent.method, "exec.run");
    const json expected = {
        {"cmd", "cat"}, {"env", {{"A", "1"}}}, {"timeout_s", 2.5}, {"cwd", "/work"}};
    EXPECT_EQ(sent.params, expected);
    EXPECT_EQ(sent.body, "hello");
    EXPECT_EQ(result.json["method"], "exec.run");  // the agent's whole answer
    ASSERT_EQ(audit.size(), 1u);
    EXPECT_EQ(audit[0].kind, "command");
    EXPECT_EQ(audit[0].detail, expected);

    // MCP's run_command: the same kind, saying where it came from; its own cwd is kept.
    command.cwd = "/tmp";
    client.run_command(command, Caller::mcp);
    ASSERT_EQ(audit.size(), 2u);
    EXPECT_EQ(audit[1].kind, "command");
    EXPECT_EQ(audit[1].detail["via"], "mcp");
    EXPECT_EQ(audit[1].detail["cwd"], "/tmp");

    // The server's own probe (a ready command): not audited, run where the agent starts it.
    CommandRequest probe;
    probe.argv = std::vector<std::string>{"true"};
    client.run_command(probe, Caller::server);
    EXPECT_EQ(audit.size(), 2u);
    EXPECT_EQ(agent.received().back().params, json({{"argv", {"true"}}}));
}

TEST_F(AgentClientTest, ACommandsTimeoutIsOneRule) {
    auto read = [](json body) {
        RequestReader reader(body);
        return CommandRequest::read_timeout(reader);
    };
    EXPECT_EQ(read(json::object()), std::nullopt);
    EXPECT_EQ(read({{"timeout_s", nullptr}}), std::nullopt);
    EXPECT_EQ(read({{"timeout_s", 0.5}}), 0.5);
    EXPECT_EQ(read({{"timeout_s", 86400}}), 86400.0);
    for (const json& bad : {json(0), json(-1), json(86400.5), json(1e12), json("60"), json(true)}) {
        ApiError e = error_of([&] { read({{"timeout_s", bad}}); });
        EXPECT_EQ(e.status(), 400u) << bad;
        EXPECT_EQ(e.code(), "bad_request") << bad;
        EXPECT_EQ(e.field(), "timeout_s") << bad;
    }
    // The agent's answer is awaited 15 s past the command's own deadline (60 s by default).
    CommandRequest command;
    EXPECT_EQ(command.reply_timeout(), 75s);
    command.timeout_s = 2.5;
    EXPECT_EQ(command.reply_timeout(), 17500ms);
}

TEST_F(AgentClientTest, ReadingADirectoryAnswersItsListingAndAFileItsBytesInOneCall) {
    protocol::AgentRoutes routes;
    routes[AgentMethod::files_read] = {[](const protocol::Request& r) -> protocol::Reply {
        if (r.params["path"] == "/d")
            throw protocol::RpcError("is_a_directory", "cannot read /d: Is a directory", "path");
        return {{{"size", 3}}, "abc"};
    }};
    routes[AgentMethod::files_list] = {[](const protocol::Request&) {
        return protocol::Reply{{{"entries", json::array({{{"name", "a"}, {"type", "file"}}})}}, {}};
    }};
    test::InProcessAgent agent(std::move(routes));
    AgentClient client = client_on(agent);

    PathContents file = client.read_path("/f");
    EXPECT_FALSE(file.directory);
    EXPECT_EQ(file.bytes, "abc");
    EXPECT_EQ(agent.received().size(), 1u) << "a file takes one round trip";

    PathContents dir = client.read_path("/d");
    EXPECT_TRUE(dir.directory);
    EXPECT_EQ(dir.listing["entries"][0]["name"], "a");
    EXPECT_EQ(agent.received().back().method, "files.list");
    EXPECT_TRUE(audit.empty()) << "reads are not audited";
}

TEST_F(AgentClientTest, WritesAndRemovesAreAudited) {
    test::InProcessAgent agent;
    AgentClient client = client_on(agent);
    client.write_file("/tmp/a", "12345", std::string("0600"), Caller::mcp);
    EXPECT_EQ(agent.received()[0].params,
              json({{"path", "/tmp/a"}, {"parents", true}, {"mode", "0600"}}));
    EXPECT_EQ(agent.received()[0].body, "12345");
    client.remove_file("/tmp/a", true);
    ASSERT_EQ(audit.size(), 2u);
    EXPECT_EQ(audit[0].kind, "files.write");
    EXPECT_EQ(audit[0].detail, json({{"path", "/tmp/a"}, {"bytes", 5}, {"via", "mcp"}}));
    EXPECT_EQ(audit[1].kind, "files.remove");
    EXPECT_EQ(agent.received()[1].method, "files.remove");
}

TEST_F(AgentClientTest, TheAgentsErrorsBecomeApiErrors) {
    struct Case {
        std::string code;
        unsigned status;
        std::string api_code;
    };
    const std::vector<Case> cases = {{"bad_request", 400, "bad_request"},
                                     {"not_found", 404, "not_found"},
                                     {"permission_denied", 403, "permission_denied"},
                                     {"is_a_directory", 409, "is_a_directory"},
                                     {"too_large", 413, "too_large"},
                                     {"resource_exhausted", 409, "sandbox_exhausted"},
                                     {"something_new", 502, "something_new"}};
    for (const auto& c : cases) {
        protocol::AgentRoutes own;
        own[AgentMethod::clipboard_get] = {
            [code = c.code](const protocol::Request&) -> protocol::Reply {
                throw protocol::RpcError(code, "it failed", "text");
            }};
        test::InProcessAgent failing_agent(std::move(own));
        AgentClient failing_client = client_on(failing_agent);
        ApiError e = error_of([&] { failing_client.clipboard(); });
        EXPECT_EQ(e.status(), c.status) << c.code;
        EXPECT_EQ(e.code(), c.api_code) << c.code;
        if (c.code == "resource_exhausted") {
            EXPECT_EQ(e.field(), "limits");
            EXPECT_NE(std::string(e.what()).find("; kill its processes"), std::string::npos);
        } else {
            EXPECT_EQ(e.field(), "text") << c.code;
        }
    }
}

TEST_F(AgentClientTest, ASandboxAtItsLimitsSaysSo) {
    protocol::AgentRoutes routes;
    routes[AgentMethod::exec_run] = {[](const protocol::Request&) -> protocol::Reply {
        throw protocol::RpcError("io_error", "fork: Resource temporarily unavailable");
    }};
    test::InProcessAgent agent(std::move(routes));
    AgentClient client = client_on(agent);
    CommandRequest command;
    command.cmd = "true";
    EXPECT_EQ(error_of([&] { client.run_command(command); }).code(), "io_error");
    at_limit = true;
    ApiError e = error_of([&] { client.run_command(command); });
    EXPECT_EQ(e.code(), "sandbox_exhausted");
    EXPECT_EQ(e.field(), "limits.pids");
}

TEST_F(AgentClientTest, ASilentAgentIs504AndAGoneOne503WithTheSandboxsReason) {
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    protocol::AgentRoutes routes;
    routes[AgentMethod::net_listening] = {[released](const protocol::Request&) {
        released.wait();
        return protocol::Reply{};
    }};
    test::InProcessAgent agent(std::move(routes));
    AgentClient client = client_on(agent);
    ApiError late = error_of([&] { client.listening_ports(50ms); });
    release.set_value();
    EXPECT_EQ(late.status(), 504u);
    EXPECT_EQ(late.code(), "agent_timeout");
    EXPECT_EQ(std::string(late.what()).rfind("net.listening: ", 0), 0u) << late.what();

    agent.close_server();
    ApiError gone = error_of([&] { client.windows(); });
    EXPECT_EQ(gone.status(), 503u);
    EXPECT_EQ(gone.code(), "agent_unavailable");
    EXPECT_NE(std::string(gone.what()).find(": the VM exited"), std::string::npos) << gone.what();
}

}  // namespace
}  // namespace deskbox::server
