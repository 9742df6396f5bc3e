// Commands that stream, by a real deskboxd with real container sandboxes: `stream: true`
// answers server-sent events while the command runs (its first line is read before it can
// end), stdin to a running command and killing it by its pid over REST, the errors for an
// unknown or finished pid; a directory made with /files/mkdir and read with /files/list; an MCP
// session from before a restart refused with the words that tell a client to initialize again.
#include <gtest/gtest.h>

#include "tests/server/deskboxd_fixture.hpp"
#include "tests/server/sse_post_client.hpp"

namespace deskbox {
namespace {

using namespace test;

std::string create_sandbox(Server& s) {
    auto created = s.post("/v1/sandboxes", json::object());
    EXPECT_EQ(created.status, 201u) << created.body << s.log();
    return created.js().value("id", "");
}

// Events until `name` (inclusive); fails the test when the stream ends first.
std::vector<SseEvent> events_until(SsePostClient& client, const std::string& name) {
    std::vector<SseEvent> seen;
    while (auto event = client.next()) {
        seen.push_back(*event);
        if (event->name == name) return seen;
    }
    ADD_FAILURE() << "the stream ended before a " << name << " event; unread: " << client.unread();
    return seen;
}

std::string output_of(const std::vector<SseEvent>& events, const std::string& stream) {
    std::string text;
    for (const auto& e : events)
        if (e.name == stream) text += e.data.value("data", "");
    return text;
}

TEST(CommandStreamApi, StreamDeliversOutputWhileTheCommandRuns) {
    REQUIRE_TEMPLATE();
    Server s;
    const std::string id = create_sandbox(s);
    ASSERT_FALSE(id.empty());
    // The command cannot end before the test makes /tmp/go, which it does only after it has
    // read the first line: an answer that waits for the end never shows that line.
    SsePostClient client(s.port(), "/v1/sandboxes/" + id + "/commands",
                         json{{"cmd",
                               "echo first line; echo to stderr >&2; "
                               "while [ ! -e /tmp/go ]; do sleep 0.05; done; echo second line"},
                              {"stream", true},
                              {"timeout_s", 60}}
                             .dump());
    const std::string head = client.header();
    EXPECT_NE(head.find(" 200 "), std::string::npos) << head;
    EXPECT_NE(head.find("Content-Type: text/event-stream"), std::string::npos) << head;
    auto start = client.next();
    ASSERT_TRUE(start);
    EXPECT_EQ(start->name, "start");
    const long long pid = start->data.value("pid", 0LL);
    EXPECT_GT(pid, 0);
    std::string out;
    while (out.find("first line\n") == std::string::npos) {
        auto event = client.next();
        ASSERT_TRUE(event) << "no first line while the command runs; so far: " << out;
        ASSERT_NE(event->name, "exit") << event->data;
        if (event->name != "stdout") continue;
        out += event->data.value("data", "");
        EXPECT_EQ(event->data.value("pid", 0LL), pid);
    }
    // It still runs: the first line came before its end.
    auto running = s.get("/v1/sandboxes/" + id + "/commands");
    ASSERT_EQ(running.status, 200u) << running.body;
    const json processes = running.js()["processes"];
    bool listed = false;
    for (const auto& p : processes) listed = listed || p["pid"] == pid;
    EXPECT_TRUE(listed) << running.body;

    EXPECT_EQ(s.call(http::verb::put, "/v1/sandboxes/" + id + "/files?path=/tmp/go", "x").status,
              200u);
    auto rest = events_until(client, "exit");
    ASSERT_FALSE(rest.empty());
    EXPECT_EQ(rest.back().data.value("exit_code", -1), 0) << rest.back().data;
    EXPECT_EQ(output_of(rest, "stdout"), "second line\n");
    EXPECT_TRUE(client.ended()) << "the stream ends after exit";
    EXPECT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
}

TEST(CommandStreamApi, StdinToARunningCommandAndKillItById) {
    REQUIRE_TEMPLATE();
    Server s;
    const std::string id = create_sandbox(s);
    ASSERT_FALSE(id.empty());
    const std::string commands = "/v1/sandboxes/" + id + "/commands";
    SsePostClient client(s.port(), commands,
                         json{{"cmd", "cat"}, {"stream", true}, {"stdin_open", true}}.dump());
    client.header();
    auto start = client.next();
    ASSERT_TRUE(start);
    const std::string pid = std::to_string(start->data.value("pid", 0LL));

    auto wrote = s.call(http::verb::post, commands + "/" + pid + "/stdin", "hello cat\n",
                        {{"Content-Type", "application/octet-stream"}});
    EXPECT_EQ(wrote.status, 200u) << wrote.body;
    std::string echoed;
    while (echoed.find("hello cat\n") == std::string::npos) {
        auto event = client.next();
        ASSERT_TRUE(event) << "cat did not echo its stdin; so far: " << echoed;
        if (event->name == "stdout") echoed += event->data.value("data", "");
    }
    auto killed = s.post(commands + "/" + pid + "/kill", json{{"signal", "TERM"}});
    EXPECT_EQ(killed.status, 200u) << killed.body;
    auto rest = events_until(client, "exit");
    ASSERT_FALSE(rest.empty());
    EXPECT_EQ(rest.back().data.value("signal", 0), 15) << rest.back().data;
    EXPECT_TRUE(client.ended());

    // It is gone: stdin and kill by its pid are 404, saying so.
    auto late = s.call(http::verb::post, commands + "/" + pid + "/stdin", "more\n",
                       {{"Content-Type", "application/octet-stream"}});
    EXPECT_EQ(late.status, 404u) << late.body;
    EXPECT_NE(late.body.find("no running"), std::string::npos) << late.body;
    EXPECT_EQ(s.post(commands + "/" + pid + "/kill", json::object()).status, 404u);
    auto unknown = s.post(commands + "/999999/kill", json::object());
    EXPECT_EQ(unknown.status, 404u) << unknown.body;
    EXPECT_EQ(unknown.js()["error"].value("field", ""), "pid") << unknown.body;
    auto bad = s.post(commands + "/abc/kill", json::object());
    EXPECT_EQ(bad.status, 400u) << bad.body;
    EXPECT_EQ(bad.js()["error"].value("field", ""), "pid") << bad.body;
    auto bad_signal = s.post(commands + "/1/kill", json{{"signal", true}});
    EXPECT_EQ(bad_signal.status, 400u) << bad_signal.body;
    // A stream command is answered as it runs; a background one is not followed.
    auto both = s.post(commands, json{{"cmd", "true"}, {"stream", true}, {"background", true}});
    EXPECT_EQ(both.status, 400u) << both.body;
    EXPECT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
}

TEST(CommandStreamApi, AClientThatLeavesTakesItsCommandWithIt) {
    REQUIRE_TEMPLATE();
    Server s;
    const std::string id = create_sandbox(s);
    ASSERT_FALSE(id.empty());
    long long pid = 0;
    {
        SsePostClient client(s.port(), "/v1/sandboxes/" + id + "/commands",
                             json{{"cmd", "sleep 1000"}, {"stream", true}}.dump());
        client.header();
        auto start = client.next();
        ASSERT_TRUE(start);
        pid = start->data.value("pid", 0LL);
    }  // the connection closes
    auto running = [&] {
        const json processes = s.get("/v1/sandboxes/" + id + "/commands").js()["processes"];
        for (const auto& p : processes)
            if (p["pid"] == pid) return true;
        return false;
    };
    EXPECT_TRUE(eventually([&] { return !running(); })) << "the command outlived its client";
    EXPECT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
}

TEST(CommandStreamApi, MkdirAndListADirectory) {
    REQUIRE_TEMPLATE();
    Server s;
    const std::string id = create_sandbox(s);
    ASSERT_FALSE(id.empty());
    const std::string files = "/v1/sandboxes/" + id + "/files";
    auto made = s.post(files + "/mkdir?path=/tmp/made/deeper&parents=true", json::object());
    EXPECT_EQ(made.status, 201u) << made.body;
    EXPECT_EQ(s.call(http::verb::put, files + "?path=/tmp/made/deeper/note.txt", "hi").status,
              200u);
    auto listed = s.get(files + "/list?path=/tmp/made/deeper");
    ASSERT_EQ(listed.status, 200u) << listed.body;
    ASSERT_EQ(listed.js()["entries"].size(), 1u) << listed.body;
    EXPECT_EQ(listed.js()["entries"][0].value("name", ""), "note.txt");
    auto parent = s.get(files + "/list?path=/tmp/made");
    ASSERT_EQ(parent.status, 200u) << parent.body;
    EXPECT_EQ(parent.js()["entries"][0].value("type", ""), "dir") << parent.body;
    // The older form still lists a directory.
    EXPECT_EQ(s.get(files + "?path=/tmp/made/deeper").js()["entries"].size(), 1u);

    auto file_listed = s.get(files + "/list?path=/tmp/made/deeper/note.txt");
    EXPECT_EQ(file_listed.status, 409u) << file_listed.body;
    auto again = s.post(files + "/mkdir?path=/tmp/made", json::object());
    EXPECT_EQ(again.status, 409u) << again.body;
    auto no_parent = s.post(files + "/mkdir?path=/tmp/none/here", json::object());
    EXPECT_EQ(no_parent.status, 404u) << no_parent.body;
    EXPECT_EQ(s.post(files + "/mkdir", json::object()).status, 400u);
    EXPECT_EQ(s.post(files + "/mkdir?path=/tmp/x", json{{"mode", "0700"}}).status, 400u);
    EXPECT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
}

TEST(McpSessions, ARestartedServerRefusesAnOldSessionAskingToInitializeAgain) {
    TempDir state("deskboxd-mcp-restart");
    const std::map<std::string, std::string> mcp_headers = {
        {"Content-Type", "application/json"}, {"Accept", "application/json, text/event-stream"}};
    const std::string initialize = json{{"jsonrpc", "2.0"},
                                        {"id", 1},
                                        {"method", "initialize"},
                                        {"params",
                                         {{"protocolVersion", "2025-11-25"},
                                          {"capabilities", json::object()},
                                          {"clientInfo", {{"name", "t"}, {"version", "1"}}}}}}
                                       .dump();
    const std::string ping = R"({"jsonrpc":"2.0","id":2,"method":"ping"})";
    std::string session;
    {
        Server s({}, state.path() / "state");
        auto opened = s.call(http::verb::post, "/mcp", initialize, mcp_headers);
        ASSERT_EQ(opened.status, 200u) << opened.body;
        session = opened.headers["Mcp-Session-Id"];
        ASSERT_FALSE(session.empty());
        auto headers = mcp_headers;
        headers["Mcp-Session-Id"] = session;
        EXPECT_EQ(s.call(http::verb::post, "/mcp", ping, headers).status, 200u);
        s.kill_hard();
    }
    Server s({}, state.path() / "state");
    auto headers = mcp_headers;
    headers["Mcp-Session-Id"] = session;
    auto refused = s.call(http::verb::post, "/mcp", ping, headers);
    EXPECT_EQ(refused.status, 404u) << refused.body;  // the spec's answer: initialize again
    EXPECT_NE(refused.js()["error"].value("message", "").find("initialize again"),
              std::string::npos)
        << refused.body;
    auto again = s.call(http::verb::post, "/mcp", initialize, mcp_headers);
    EXPECT_EQ(again.status, 200u) << again.body;
    EXPECT_NE(again.headers["Mcp-Session-Id"], session);
}

}  // namespace
}  // namespace deskbox
