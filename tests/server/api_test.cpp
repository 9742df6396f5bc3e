// deskboxd end to end: the real server binary, real runc containers of the `minimal`
// template, driven over HTTP like a client. Needs the template built (images/build.py minimal);
// without it the tests are skipped with the command to run.
#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detail/base64.hpp>
#include <boost/beast/http.hpp>
#include <opencv2/imgcodecs.hpp>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "common/unique_fd.hpp"
#include "server/api/api_routes.hpp"
#include "tests/server/deskboxd_fixture.hpp"
#include "tests/support/test_paths.hpp"

namespace deskbox {
namespace {

using namespace test;

TEST(Api, HealthAndBadRequestsNeedNoSandbox) {
    Server s({"--max-body-mb", "1"});
    EXPECT_EQ(s.get("/healthz").status, 200u);
    auto metrics = s.get("/metrics");
    EXPECT_EQ(metrics.status, 200u);
    EXPECT_NE(metrics.body.find("deskbox_sandboxes{state=\"running\"} 0"), std::string::npos);

    auto a = s.call(http::verb::post, "/v1/sandboxes", "{not json");
    EXPECT_EQ(a.status, 400u);
    EXPECT_EQ(a.js()["error"]["code"], "malformed_json");
    a = s.post("/v1/sandboxes", {{"template", "minimal"}, {"colour", "blue"}});
    EXPECT_EQ(a.status, 400u);
    EXPECT_EQ(a.js()["error"]["field"], "colour");
    a = s.post("/v1/sandboxes", {{"resolution", {10, "x"}}});
    EXPECT_EQ(a.status, 400u);
    EXPECT_EQ(a.js()["error"]["field"], "resolution");
    a = s.post("/v1/sandboxes", {{"template", "no-such-template"}});
    EXPECT_EQ(a.status, 400u);
    EXPECT_EQ(a.js()["error"]["field"], "template");
    a = s.post("/v1/sandboxes", {{"timeout_s", 999999999}});
    EXPECT_EQ(a.js()["error"]["field"], "timeout_s");
    a = s.get("/v1/sandboxes/sb-nope/screenshot");
    EXPECT_EQ(a.status, 404u);
    a = s.get("/v1/nothing");
    EXPECT_EQ(a.status, 404u);
    a = s.call(http::verb::post, "/v1/sandboxes", std::string(2 << 20, 'x'));
    EXPECT_EQ(a.status, 413u);
    EXPECT_EQ(a.js()["error"]["code"], "payload_too_large");
    a = s.call(http::verb::get, "/v1/sandboxes", {}, {{"X-Padding", std::string(20 << 10, 'p')}});
    EXPECT_EQ(a.status, 431u);
    EXPECT_EQ(a.js()["error"]["code"], "headers_too_large");
    EXPECT_EQ(s.get("/healthz").status, 200u);  // still serving
}

// Bytes that are not UTF-8 and bodies nested too deep get a 400 that says where, never a 500.
TEST(Api, RefusesBadUtf8AndDeepNestingNamingWhere) {
    Server s({"--max-body-mb", "1"});
    struct Case {
        std::string target, body, code, field;
    };
    const std::vector<Case> cases = {
        {"/v1/sandboxes", "{\"template\":\"min\xffimal\"}", "invalid_utf8", "template"},
        {"/v1/sandboxes", "{\"network\":{\"allow\":[\"a.test\",\"b\xc0\xaf\"]}}", "invalid_utf8",
         "network.allow[1]"},
        {"/v1/sandboxes", "{\"env\":{\"A\":\"1\",\"B\xed\xa0\x80\":\"2\"}}", "invalid_utf8", "env"},
        {"/v1/sandboxes", "\xfe{}", "invalid_utf8", ""},
        {"/v1/sandboxes", std::string(100, '[') + std::string(100, ']'), "too_deep", ""},
        {"/v1/sandboxes", "{\"metadata\":" + std::string(70, '[') + std::string(70, ']') + "}",
         "too_deep", ""},
        {"/v1/sandboxes", "{\"timeout_s\":1e999}", "malformed_json", ""},
        {"/v1/sandboxes?x=%FF", "{}", "invalid_utf8", "x"},
        {"/v1/sandboxes?%E6%97=1", "{}", "invalid_utf8", "query"},
        {"/v1/sandboxes/sb-%FF/screenshot", "", "invalid_utf8", "path"},
    };
    for (const auto& c : cases) {
        auto a = s.call(c.body.empty() ? http::verb::get : http::verb::post, c.target, c.body);
        EXPECT_EQ(a.status, 400u) << c.target << " " << a.body;
        json e = a.js();
        ASSERT_TRUE(e.is_object()) << "answer is not JSON: " << a.body;
        EXPECT_EQ(e["error"]["code"], c.code) << a.body;
        EXPECT_EQ(e["error"].value("field", ""), c.field) << a.body;
    }
    auto h = s.call(http::verb::get, "/v1/sandboxes", {}, {{"X-Client", "caf\xe9"}});
    EXPECT_EQ(h.status, 400u) << h.body;
    EXPECT_EQ(h.js()["error"]["code"], "invalid_utf8") << h.body;
    EXPECT_EQ(h.js()["error"]["field"], "X-Client") << h.body;
    // The key in a member name is named by the object holding it, and the message keeps the
    // bad byte visible as \xHH instead of dropping it.
    auto a = s.call(http::verb::post, "/v1/sandboxes", "{\"env\":{\"K\xff\":\"v\"}}");
    EXPECT_NE(a.js()["error"]["message"].get<std::string>().find("a member name in env"),
              std::string::npos)
        << a.body;
    // A body of nothing but '[' up to the size limit: refused at depth 65, not parsed to the end.
    a = s.call(http::verb::post, "/v1/sandboxes", std::string((1 << 20) - 64, '['));
    EXPECT_EQ(a.js()["error"]["code"], "too_deep") << a.body;
    // Well-formed Unicode is fine: the same field answers with its own error, not invalid_utf8.
    a = s.post("/v1/sandboxes", {{"template", "n\u00e4mlich-\u65e5\u672c"}});
    EXPECT_EQ(a.js()["error"]["code"], "bad_request") << a.body;
    EXPECT_EQ(a.js()["error"]["field"], "template") << a.body;
    EXPECT_EQ(s.get("/healthz").status, 200u);
    EXPECT_EQ(s.log().find("internal"), std::string::npos) << s.log();
}

TEST(Api, ApiKeyIsRequiredWhenConfigured) {
    Server s({"--api-key", "secret-key-123"});
    EXPECT_EQ(s.get("/v1/sandboxes").status, 401u);
    EXPECT_EQ(
        s.call(http::verb::get, "/v1/sandboxes", {}, {{"Authorization", "Bearer wrong-key-000"}})
            .status,
        401u);
    EXPECT_EQ(
        s.call(http::verb::get, "/v1/sandboxes", {}, {{"Authorization", "Bearer secret-key-123"}})
            .status,
        200u);
    EXPECT_EQ(s.get("/healthz").status, 200u);
}

TEST(Api, RefusesPublicListenWithoutKey) {
    auto r = run_process({deskbox::test_paths::kDeskboxd, "--listen", "0.0.0.0:0"}, 10s);
    EXPECT_EQ(r.status.exit_code, 2);
    EXPECT_NE(r.err.find("without an API key"), std::string::npos) << r.err;
}

TEST(Api, SandboxEndToEnd) {
    REQUIRE_TEMPLATE();
    Server s({"--max-sandboxes", "2"});
    auto created = s.post("/v1/sandboxes", {{"template", "minimal"}, {"resolution", {1024, 768}}});
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    json sb = created.js();
    std::string id = sb["id"];
    EXPECT_EQ(sb["state"], "running");
    EXPECT_EQ(sb["resolution"], json({1024, 768}));
    EXPECT_FALSE(sb["view_token"].get<std::string>().empty());
    const std::string base = "/v1/sandboxes/" + id;

    // Screenshot: a valid image of the right size, in each format.
    for (std::string format : {"png", "jpeg", "webp"}) {
        auto shot = s.get(base + "/screenshot?format=" + format);
        ASSERT_EQ(shot.status, 200u) << shot.body;
        EXPECT_EQ(shot.headers["X-Screen-Width"], "1024");
        cv::Mat img =
            cv::imdecode(std::vector<uchar>(shot.body.begin(), shot.body.end()), cv::IMREAD_COLOR);
        ASSERT_FALSE(img.empty()) << format;
        EXPECT_EQ(img.cols, 1024);
        EXPECT_EQ(img.rows, 768);
    }
    auto scaled = s.get(base + "/screenshot?format=jpeg&width=512");
    cv::Mat small =
        cv::imdecode(std::vector<uchar>(scaled.body.begin(), scaled.body.end()), cv::IMREAD_COLOR);
    EXPECT_EQ(small.cols, 512);
    EXPECT_EQ(small.rows, 384);
    EXPECT_EQ(s.get(base + "/screenshot?format=gif").status, 400u);

    // The template autostarts a terminal; type Unicode into it and read it back.
    json terminal;
    ASSERT_TRUE(eventually([&] {
        json windows = s.get(base + "/windows").js();
        for (auto& w : windows["windows"])
            if (w.value("class", "").find("term") != std::string::npos ||
                w.value("class", "").find("Term") != std::string::npos) {
                terminal = w;
                return true;
            }
        return false;
    })) << s.get(base + "/windows").body;
    int cx = terminal["x"].get<int>() + terminal["width"].get<int>() / 2;
    int cy = terminal["y"].get<int>() + terminal["height"].get<int>() / 2;
    const std::string text = "Grêmio naïve 日本語 😀";
    auto act =
        s.post(base + "/actions",
               {{"actions",
                 {{{"type", "click"}, {"x", cx}, {"y", cy}},
                  {{"type", "type"}, {"text", "printf '%s' '" + text + "' > ~/typed.txt\n"}}}}});
    ASSERT_EQ(act.status, 200u) << act.body;
    EXPECT_TRUE(eventually([&] { return run(s, id, "cat ~/typed.txt 2>/dev/null") == text; }));

    // Dialects: Anthropic and OpenAI payloads go through the same path.
    auto ant = s.post(base + "/actions?dialect=anthropic",
                      {{"action", "mouse_move"}, {"coordinate", {10, 20}}});
    EXPECT_EQ(ant.status, 200u) << ant.body;
    auto cursor = s.get(base + "/cursor").js();
    EXPECT_EQ(cursor["x"], 10);
    EXPECT_EQ(cursor["y"], 20);
    auto oai = s.post(base + "/actions?dialect=openai", {{"type", "move"}, {"x", 30}, {"y", 40}});
    EXPECT_EQ(oai.status, 200u) << oai.body;
    EXPECT_EQ(s.get(base + "/cursor").js()["x"], 30);
    auto shot_action = s.post(base + "/actions?dialect=anthropic", {{"action", "screenshot"}});
    EXPECT_FALSE(shot_action.js()["results"][0].value("base64_image", "").empty());

    // Invalid actions: named fields, nothing executed.
    auto bad = s.post(base + "/actions", {{"type", "click"}, {"x", 1024}, {"y", 0}});
    EXPECT_EQ(bad.status, 400u);
    EXPECT_EQ(bad.js()["error"]["field"], "x");
    bad = s.post(base + "/actions?dialect=anthropic",
                 {{"action", "left_click"}, {"coordinate", {5, 99999}}});
    EXPECT_EQ(bad.status, 400u);
    EXPECT_EQ(bad.js()["error"]["field"], "coordinate[1]");
    bad = s.post(base + "/actions",
                 {{"actions", {{{"type", "move"}, {"x", 1}, {"y", 1}}, {{"type", "fly"}}}}});
    EXPECT_EQ(bad.js()["error"]["field"], "actions[1].type");
    EXPECT_EQ(s.post(base + "/actions?dialect=klingon", {{"type", "wait"}}).status, 400u);

    // Commands: exit code, stderr, stdin, env, cwd.
    auto cmd = s.post(base + "/commands", {{"cmd", "cat; echo err >&2; exit 3"}, {"stdin", "in"}});
    EXPECT_EQ(cmd.js()["exit_code"], 3);
    EXPECT_EQ(cmd.js()["stdout"], "in");
    EXPECT_EQ(cmd.js()["stderr"], "err\n");
    cmd = s.post(
        base + "/commands",
        {{"argv", {"sh", "-c", "echo $FOO; pwd"}}, {"env", {{"FOO", "bar"}}}, {"cwd", "/tmp"}});
    EXPECT_EQ(cmd.js()["stdout"], "bar\n/tmp\n");
    EXPECT_EQ(s.post(base + "/commands", {{"cmd", 5}}).status, 400u);
    // What a command leaves running outlives it; processes/kill ends it (init reaps it).
    std::string left = run(s, id, "sleep 1000 & echo $!");
    ASSERT_FALSE(left.empty());
    left.pop_back();
    EXPECT_EQ(run(s, id, "sleep 0.3; kill -0 " + left + " && echo alive"), "alive\n");
    EXPECT_EQ(s.post(base + "/processes/kill", json::object()).status, 200u);
    EXPECT_EQ(run(s, id,
                  "for i in $(seq 100); do kill -0 " + left +
                      " 2>/dev/null || { echo gone; exit; }; sleep 0.05; done; echo alive"),
              "gone\n");

    // Files: binary round trip, listing, removal.
    std::string blob;
    std::mt19937 rng(1);
    for (int i = 0; i < 200000; ++i) blob.push_back(static_cast<char>(rng()));
    EXPECT_EQ(s.call(http::verb::put, base + "/files?path=/home/user/dir/blob.bin", blob).status,
              200u);
    auto back = s.get(base + "/files?path=/home/user/dir/blob.bin");
    EXPECT_EQ(back.body, blob);
    auto listing = s.get(base + "/files?path=/home/user/dir").js();
    EXPECT_EQ(listing["entries"][0]["name"], "blob.bin");
    EXPECT_EQ(s.del(base + "/files?path=/home/user/dir/blob.bin").status, 200u);
    EXPECT_EQ(s.get(base + "/files?path=/home/user/dir/blob.bin").status, 404u);
    EXPECT_EQ(s.get(base + "/files").status, 400u);

    // Clipboard.
    EXPECT_EQ(
        s.call(http::verb::put, base + "/clipboard", json{{"text", "naïve 日本語"}}.dump()).status,
        200u);
    EXPECT_EQ(s.get(base + "/clipboard").js()["text"], "naïve 日本語");

    // Pause keeps a running process frozen, resume continues it (read on the host side).
    s.post(base + "/commands",
           {{"cmd", "i=0; while :; do i=$((i+1)); echo $i > /home/user/count; sleep 0.05; done"},
            {"background", true}});
    auto count_file = s.state() / "sandboxes" / id / "disk" / "upper" / "home" / "user" / "count";
    auto read_count = [&] {
        std::ifstream in(count_file);
        long v = -1;
        in >> v;
        return v;
    };
    ASSERT_TRUE(eventually([&] { return read_count() > 2; }));
    ASSERT_EQ(s.post(base + "/pause", json::object()).status, 200u);
    EXPECT_EQ(s.get(base).js()["state"], "paused");
    EXPECT_EQ(s.post(base + "/commands", {{"cmd", "true"}}).status, 409u);
    long frozen = read_count();
    std::this_thread::sleep_for(500ms);
    EXPECT_EQ(read_count(), frozen);
    ASSERT_EQ(s.post(base + "/resume", json::object()).status, 200u);
    EXPECT_TRUE(eventually([&] { return read_count() > frozen; }));

    // A second sandbox sees none of the first's files or processes; a third is refused.
    auto other = s.post("/v1/sandboxes", {{"template", "minimal"}});
    ASSERT_EQ(other.status, 201u) << other.body;
    std::string other_id = other.js()["id"];
    EXPECT_EQ(s.post("/v1/sandboxes", json::object()).status, 429u);
    run(s, id, "echo mine > /home/user/secret");
    EXPECT_EQ(run(s, other_id, "cat /home/user/secret 2>&1 || echo absent"),
              "cat: /home/user/secret: No such file or directory\nabsent\n");
    EXPECT_EQ(run(s, other_id, "pgrep -f 'echo \\$i' || echo none"), "none\n");
    EXPECT_EQ(s.get("/v1/sandboxes").js()["sandboxes"].size(), 2u);

    // Kill leaves nothing behind.
    EXPECT_EQ(s.del("/v1/sandboxes/" + other_id).status, 200u);
    EXPECT_EQ(s.del(base).status, 200u);
    EXPECT_EQ(s.get(base).status, 404u);
    for (auto& gone : {id, other_id}) {
        EXPECT_FALSE(std::filesystem::exists(s.state() / "sandboxes" / gone));
        std::ifstream mounts("/proc/self/mountinfo");
        std::string all((std::istreambuf_iterator<char>(mounts)), {});
        EXPECT_EQ(all.find(gone), std::string::npos) << "mount left for " << gone;
        EXPECT_FALSE(std::filesystem::exists("/sys/fs/cgroup/memory/deskbox/" + gone));
    }
    auto audit = s.state() / "audit" / (id + ".jsonl");
    std::ifstream audit_in(audit);
    std::string audit_text((std::istreambuf_iterator<char>(audit_in)), {});
    EXPECT_NE(audit_text.find("\"kind\":\"actions\""), std::string::npos);
    EXPECT_NE(audit_text.find("\"kind\":\"command\""), std::string::npos);
}

TEST(Api, TimeoutKillsAndAgentDeathIsReported) {
    REQUIRE_TEMPLATE();
    Server s;
    auto a = s.post("/v1/sandboxes", {{"timeout_s", 2}});
    ASSERT_EQ(a.status, 201u) << a.body << s.log();
    std::string short_lived = a.js()["id"];
    auto b = s.post("/v1/sandboxes", json::object());
    ASSERT_EQ(b.status, 201u) << b.body;
    std::string id = b.js()["id"];
    EXPECT_TRUE(
        eventually([&] { return s.get("/v1/sandboxes/" + short_lived).status == 404; }, 30s));
    EXPECT_TRUE(eventually(
        [&] { return !std::filesystem::exists(s.state() / "sandboxes" / short_lived); }));

    // Extend then kill the agent from inside: the API reports a clear 5xx, then kill works.
    EXPECT_EQ(s.post("/v1/sandboxes/" + id + "/timeout", {{"timeout_s", 600}}).status, 200u);
    s.post("/v1/sandboxes/" + id + "/commands",
           {{"cmd", "kill -9 $(pgrep -x deskbox-agent | tail -1)"}, {"background", true}});
    EXPECT_TRUE(eventually(
        [&] { return s.get("/v1/sandboxes/" + id).js().value("state", "") == "error"; }));
    auto broken = s.get("/v1/sandboxes/" + id + "/screenshot");
    EXPECT_GE(broken.status, 500u);
    EXPECT_FALSE(broken.js()["error"]["message"].get<std::string>().empty());
    EXPECT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
    EXPECT_FALSE(std::filesystem::exists(s.state() / "sandboxes" / id));
}

// Restart safety: a crashed server's sandbox that died with it (its init is gone) is removed by
// its successor on the same state dir, completely, with an audit line saying why; a server with
// another state dir (running meanwhile) is not touched.
TEST(Api, RestartRemovesBrokenLeftoversAndSparesOtherServers) {
    REQUIRE_TEMPLATE();
    Server bystander;
    auto kept = bystander.post("/v1/sandboxes", json::object());
    ASSERT_EQ(kept.status, 201u) << kept.body << bystander.log();
    std::string kept_id = kept.js()["id"];

    TempDir shared_state("deskboxd-restart");
    std::string crashed_id;
    {
        Server crashed({}, shared_state.path() / "state");
        auto a = crashed.post("/v1/sandboxes", json::object());
        ASSERT_EQ(a.status, 201u) << a.body << crashed.log();
        crashed_id = a.js()["id"];
        crashed.kill_hard();
    }
    const auto crashed_dir = shared_state.path() / "state" / "sandboxes" / crashed_id;
    ASSERT_TRUE(std::filesystem::exists(crashed_dir));
    {
        // Broken while no server watched: its init is killed (runc's monitor then ends too).
        std::ifstream pid_file(crashed_dir / "container.pid");
        pid_t init = 0;
        ASSERT_TRUE(pid_file >> init);
        ASSERT_EQ(::kill(init, SIGKILL), 0);
        for (int i = 0; i < 200 && std::filesystem::exists("/proc/" + std::to_string(init)); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    {
        Server successor({}, shared_state.path() / "state");
        EXPECT_NE(successor.log().find("cannot adopt container " + crashed_id), std::string::npos)
            << successor.log();
        EXPECT_NE(successor.log().find("removed leftover sandbox " + crashed_id), std::string::npos)
            << successor.log();
        std::ifstream audit(shared_state.path() / "state" / "audit" / (crashed_id + ".jsonl"));
        std::string audit_text((std::istreambuf_iterator<char>(audit)), {});
        EXPECT_NE(audit_text.find("\"kind\":\"cleanup\""), std::string::npos) << audit_text;
        EXPECT_EQ(successor.get("/v1/sandboxes/" + crashed_id).status, 404u);
        EXPECT_FALSE(
            std::filesystem::exists(shared_state.path() / "state" / "sandboxes" / crashed_id));
        auto runc = run_process(
            {"runc", "--root", (shared_state.path() / "state" / "runc").string(), "list", "-q"});
        EXPECT_EQ(runc.out, "");
        std::ifstream mounts("/proc/self/mountinfo");
        std::string all((std::istreambuf_iterator<char>(mounts)), {});
        EXPECT_EQ(all.find(crashed_id), std::string::npos);
        auto cgroups =
            run_process({"find", "/sys/fs/cgroup", "-maxdepth", "3", "-name", crashed_id});
        EXPECT_EQ(cgroups.out, "");
    }
    // The bystander's sandbox lived through both starts.
    EXPECT_EQ(bystander.get("/v1/sandboxes/" + kept_id).js().value("state", ""), "running");
    EXPECT_EQ(run(bystander, kept_id, "echo alive"), "alive\n");
    EXPECT_EQ(bystander.del("/v1/sandboxes/" + kept_id).status, 200u);
}
// One server per state dir: a second one would take the first one's live sandboxes for
// leftovers. It is refused before it touches anything, and the first one serves on.
TEST(Api, ASecondServerOnTheSameStateDirIsRefused) {
    REQUIRE_TEMPLATE();
    Server first;
    auto created = first.post("/v1/sandboxes", json::object());
    ASSERT_EQ(created.status, 201u) << created.body;
    const std::string id = created.js()["id"];
    auto second = run_process({deskbox::test_paths::kDeskboxd, "--listen", "127.0.0.1:0",
                               "--state-dir", first.state().string(), "--on-exit", "kill"},
                              30s);
    EXPECT_EQ(second.status.exit_code, 1) << second.out << second.err;
    EXPECT_NE(second.err.find("is in use by another deskboxd (pid " + std::to_string(first.pid())),
              std::string::npos)
        << second.err;
    EXPECT_EQ(run(first, id, "echo still"), "still\n");
    EXPECT_EQ(first.get("/v1/sandboxes/" + id).js()["state"], "running");
}

// Adoption: a deskboxd that crashes (SIGKILL) or stops for an upgrade (SIGTERM, --on-exit keep)
// leaves its container sandboxes running, and the next one on the same state dir takes them
// over: ids, tokens, deadlines, files, processes, network, the screen; a paused one stays
// paused until resumed. Its kill then leaves nothing.
TEST(Api, RestartsAdoptRunningAndPausedSandboxes) {
    REQUIRE_TEMPLATE();
    TempDir shared_state("deskboxd-adopt");
    const auto state = shared_state.path() / "state";
    const std::vector<std::string> keep = {"--on-exit", "keep"};
    std::string id, paused_id, xterm, id_map;
    json before;
    {
        Server first(keep, state);
        auto a = first.post("/v1/sandboxes", {{"timeout_s", 900}});
        ASSERT_EQ(a.status, 201u) << a.body << first.log();
        before = a.js();
        id = before["id"];
        EXPECT_EQ(run(first, id, "echo kept > /tmp/mark"), "");
        xterm = run(first, id, "pgrep -x xterm");
        EXPECT_FALSE(xterm.empty());
        id_map = run(first, id, "cat /proc/self/uid_map");
        EXPECT_FALSE(id_map.empty());
        auto b = first.post("/v1/sandboxes", json::object());
        ASSERT_EQ(b.status, 201u) << b.body;
        paused_id = b.js()["id"];
        EXPECT_EQ(run(first, paused_id, "echo mine > /tmp/mark"), "");
        ASSERT_EQ(first.post("/v1/sandboxes/" + paused_id + "/pause", json::object()).status, 200u);
        first.kill_hard();  // a crash: nothing is told
    }
    {
        Server second(keep, state);
        EXPECT_NE(second.log().find("adopted running sandbox " + id), std::string::npos)
            << second.log();
        auto got = second.get("/v1/sandboxes/" + id);
        ASSERT_EQ(got.status, 200u) << got.body << second.log();
        json info = got.js();
        EXPECT_EQ(info["state"], "running") << info;
        EXPECT_EQ(info["view_token"], before["view_token"]);
        EXPECT_EQ(info["expires_at"], before["expires_at"]);
        EXPECT_EQ(run(second, id, "cat /tmp/mark"), "kept\n");
        EXPECT_EQ(run(second, id, "pgrep -x xterm"), xterm);  // the same desktop, not a new one
        // Its host ids too: the range is still its own, and a new sandbox gets another.
        EXPECT_EQ(run(second, id, "cat /proc/self/uid_map"), id_map);
        auto other = second.post("/v1/sandboxes", json::object());
        ASSERT_EQ(other.status, 201u) << other.body << second.log();
        EXPECT_NE(run(second, other.js()["id"], "cat /proc/self/uid_map"), id_map);
        // Its network is back: the link and the default route through the new router.
        EXPECT_EQ(run(second, id, "ls /sys/class/net | grep -c eth0"), "1\n");
        EXPECT_EQ(run(second, id, "grep -c '^eth0\t00000000' /proc/net/route"), "1\n");
        auto shot = second.get("/v1/sandboxes/" + id + "/screenshot");
        EXPECT_EQ(shot.status, 200u);
        EXPECT_EQ(shot.headers["Content-Type"], "image/png");
        EXPECT_TRUE(info.contains("vnc")) << info;
        auto paused = second.get("/v1/sandboxes/" + paused_id).js();
        EXPECT_EQ(paused["state"], "paused") << paused;
        ASSERT_EQ(second.post("/v1/sandboxes/" + paused_id + "/resume", json::object()).status,
                  200u)
            << second.log();
        EXPECT_EQ(run(second, paused_id, "cat /tmp/mark"), "mine\n");
    }  // SIGTERM with --on-exit keep: an upgrade
    {
        Server third({}, state);  // the fixture's --on-exit kill: its exit ends what is left
        EXPECT_NE(third.log().find("adopted running sandbox " + id), std::string::npos)
            << third.log();
        EXPECT_EQ(run(third, id, "pgrep -x xterm"), xterm);
        EXPECT_EQ(run(third, id, "cat /proc/self/uid_map"), id_map);
        EXPECT_EQ(run(third, paused_id, "cat /tmp/mark"), "mine\n");
        EXPECT_EQ(third.del("/v1/sandboxes/" + id).status, 200u);
        EXPECT_FALSE(std::filesystem::exists(state / "sandboxes" / id));
        EXPECT_FALSE(std::filesystem::exists(state / "namespaces" / id));
    }
    // The test server's exit killed the other: nothing of either is left.
    auto runc = run_process({"runc", "--root", (state / "runc").string(), "list", "-q"});
    EXPECT_EQ(runc.out, "");
    EXPECT_FALSE(std::filesystem::exists(state / "sandboxes" / paused_id));
    // Nor their pinned namespaces or any other mount.
    std::ifstream mounts("/proc/self/mountinfo");
    for (std::string line; std::getline(mounts, line);)
        EXPECT_EQ(line.find(state.string()), std::string::npos) << line;
}

// A recording outlives its server's upgrade: the old file is finished (never overwritten) and
// the adopted sandbox goes on recording into a new one; a recording the client stopped stays
// stopped across the next restart.
TEST(Api, ARecordingGoesOnInANewFileAfterARestart) {
    REQUIRE_TEMPLATE();
    TempDir shared_state("deskboxd-adopt-recording");
    ::chmod(shared_state.path().c_str(), 0711);
    const auto state = shared_state.path() / "state";
    const std::vector<std::string> keep = {"--on-exit", "keep"};
    std::string id, first_recording;
    {
        Server first(keep, state);
        auto created = first.post("/v1/sandboxes", {{"record", {{"actions", true}}}});
        ASSERT_EQ(created.status, 201u) << created.body << first.log();
        id = created.js()["id"];
        auto recording = first.get("/v1/sandboxes/" + id + "/recording").js();
        EXPECT_EQ(recording["state"], "recording") << recording;
        first_recording = recording.value("recording", "");
        EXPECT_EQ(first_recording, id + "-1");
        EXPECT_EQ(
            first.post("/v1/sandboxes/" + id + "/actions", {{"type", "type"}, {"text", "before"}})
                .status,
            200u);
        // Frames are in the file before the server stops (not a guess at how long that takes).
        EXPECT_TRUE(eventually([&] {
            return first.get("/v1/sandboxes/" + id + "/recording").js().value("frames", 0) >= 2;
        }));
    }  // SIGTERM with --on-exit keep: the encoder finishes its file
    const auto old_video = state / "recordings" / (first_recording + ".mp4");
    ASSERT_TRUE(std::filesystem::exists(old_video));
    const auto old_size = std::filesystem::file_size(old_video);
    EXPECT_GT(old_size, 0u);
    {
        Server second(keep, state);
        auto recording = second.get("/v1/sandboxes/" + id + "/recording").js();
        EXPECT_EQ(recording["state"], "recording") << recording << second.log();
        EXPECT_EQ(recording["recording"], id + "-2") << "a new file, not the old one's name";
        EXPECT_EQ(recording["actions"], true);
        EXPECT_EQ(std::filesystem::file_size(old_video), old_size) << "the old file was touched";
        auto listed = second.get("/v1/recordings").body;
        EXPECT_NE(listed.find(first_recording), std::string::npos) << listed;
        std::ifstream audit(state / "audit" / (id + ".jsonl"));
        std::string log((std::istreambuf_iterator<char>(audit)), {});
        EXPECT_NE(log.find("\"continued\":\"" + id + "-2\""), std::string::npos) << log;
        std::this_thread::sleep_for(500ms);
        auto stopped = second.call(http::verb::delete_, "/v1/sandboxes/" + id + "/recording");
        EXPECT_EQ(stopped.status, 200u) << stopped.body;
        second.kill_hard();
    }
    Server third({}, state);
    auto recording = third.get("/v1/sandboxes/" + id + "/recording");
    ASSERT_EQ(recording.status, 200u) << recording.body << third.log();
    EXPECT_EQ(recording.js()["state"], "idle") << "stopped by the client, so not continued";
    EXPECT_TRUE(std::filesystem::exists(state / "recordings" / (id + "-2.mp4")));
    EXPECT_EQ(third.del("/v1/sandboxes/" + id).status, 200u);
}

// The `desktop` template: XFCE comes up, Firefox ESR starts and shows its window, and the
// screen is a desktop, not a black frame.
TEST(Api, DesktopTemplateRunsFirefox) {
    if (!template_built("desktop"))
        GTEST_SKIP() << "template 'desktop' not built: run images/build.py desktop";
    Server s;
    auto created =
        s.post("/v1/sandboxes", {{"template", "desktop"}, {"limits", {{"memory_mb", 2048}}}});
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    std::string id = created.js()["id"];
    const std::string base = "/v1/sandboxes/" + id;

    auto has_window = [&](const std::string& needle) {
        json windows = s.get(base + "/windows").js();
        for (auto& w : windows["windows"])
            if ((w.value("title", "") + " " + w.value("class", "")).find(needle) !=
                std::string::npos)
                return true;
        return false;
    };
    EXPECT_TRUE(eventually([&] { return has_window("xfce4-panel"); }, 60s))
        << s.get(base + "/windows").body;
    auto started = s.post(base + "/commands", {{"cmd", "firefox-esr --new-instance about:blank"},
                                               {"background", true}});
    ASSERT_EQ(started.status, 200u) << started.body;
    EXPECT_TRUE(eventually([&] { return has_window("Firefox"); }, 180s))
        << s.get(base + "/windows").body << run(s, id, "ps -eo pid,comm,rss");

    auto shot = s.get(base + "/screenshot?format=png");
    ASSERT_EQ(shot.status, 200u) << shot.body;
    cv::Mat img =
        cv::imdecode(std::vector<uchar>(shot.body.begin(), shot.body.end()), cv::IMREAD_COLOR);
    ASSERT_FALSE(img.empty());
    cv::Scalar mean, stddev;
    cv::meanStdDev(img, mean, stddev);
    EXPECT_GT(stddev[0] + stddev[1] + stddev[2], 10.0) << "the screen is flat: no desktop drawn";
    EXPECT_EQ(s.del(base).status, 200u);
}

// Screenshots of an unchanged screen are served without encoding again (EncodedImageCache):
// a screen that changed must show the change, in each direction, never the image kept.
TEST(Api, ScreenshotsShowEveryChangeThoughUnchangedFramesAreNotEncodedAgain) {
    REQUIRE_TEMPLATE();
    Server s({"--max-sandboxes", "1"});
    auto created = s.post("/v1/sandboxes", {{"template", "minimal"}, {"resolution", {1024, 768}}});
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    const std::string base = "/v1/sandboxes/" + created.js()["id"].get<std::string>();
    const auto screenshot = [&] {
        auto shot = s.get(base + "/screenshot?format=png");
        EXPECT_EQ(shot.status, 200u) << shot.body;
        return cv::imdecode(std::vector<uchar>(shot.body.begin(), shot.body.end()),
                            cv::IMREAD_COLOR);
    };
    const auto same = [](const cv::Mat& a, const cv::Mat& b) {
        return !a.empty() && !b.empty() && cv::norm(a, b, cv::NORM_INF) == 0;
    };

    // A red window at a place the window list tells, open until /tmp/redbox.done exists.
    const auto open_red_window = [&] {
        auto started =
            s.post(base + "/commands",
                   {{"cmd",
                     "rm -f /tmp/redbox.done; xterm -T redbox -bg '#ff0000' -geometry 30x8+200+150 "
                     "-e sh -c 'while [ ! -e /tmp/redbox.done ]; do sleep 0.1; done'"},
                    {"background", true}});
        ASSERT_EQ(started.status, 200u) << started.body;
    };
    open_red_window();
    json box;
    ASSERT_TRUE(eventually([&] {
        const json windows = s.get(base + "/windows").js();
        for (const auto& w : windows["windows"])
            if (w.value("title", "") == "redbox") box = w;
        return !box.is_null();
    })) << s.get(base + "/windows").body;
    const int cx = box["x"].get<int>() + box["width"].get<int>() / 2;
    const int cy = box["y"].get<int>() + box["height"].get<int>() - 4;  // below the text
    const auto red_at_box = [&](const cv::Mat& image) {
        return !image.empty() && image.at<cv::Vec3b>(cy, cx) == cv::Vec3b(0, 0, 255);
    };
    cv::Mat shown;
    ASSERT_TRUE(eventually([&] { return red_at_box(shown = screenshot()); }));

    // Still: the same image again (from the cache).
    ASSERT_TRUE(eventually([&] {
        cv::Mat previous = shown;
        return same(previous, shown = screenshot());
    }));
    EXPECT_TRUE(same(shown, screenshot()));

    // The window goes: the next screenshots must show what is under it, not the kept image.
    ASSERT_EQ(run(s, created.js()["id"], "touch /tmp/redbox.done; echo done"), "done\n");
    EXPECT_TRUE(eventually([&] { return !red_at_box(screenshot()); }));
    // And it comes back: the change the other way shows too.
    open_red_window();
    EXPECT_TRUE(eventually([&] { return red_at_box(screenshot()); }));
    EXPECT_EQ(s.del(base).status, 200u);
}

// The same API on a microVM: boot, screenshot, type Unicode into the terminal and read it back,
// files, then kill leaves no QEMU behind. Boots under TCG here (tens of seconds).
// The router's route table against the OpenAPI document it serves: every route and method is
// documented and nothing else is; then each route is walked with each method, so a table entry
// without a handler (or a handler the table does not list) shows up.
TEST(OpenApi, DocumentsEveryRouteAndEveryRouteAnswers) {
    Server s;
    auto served = s.get("/v1/openapi.json");
    ASSERT_EQ(served.status, 200u);
    json doc = served.js();
    ASSERT_TRUE(doc.is_object()) << served.body.substr(0, 200);
    EXPECT_EQ(doc["openapi"], "3.1.0");
    std::ifstream file(deskbox::test_paths::source("server/api/openapi.json"));
    EXPECT_EQ(json::parse(file), doc) << "/v1/openapi.json is server/api/openapi.json";
    const std::set<std::string> operation_keys = {"get",     "put",  "post",  "delete",
                                                  "options", "head", "patch", "trace"};
    std::set<std::string> documented, routed;
    for (auto& [path, item] : doc["paths"].items())
        for (auto& [method, _] : item.items())
            if (operation_keys.count(method)) documented.insert(method + " " + path);
    for (const auto& route : server::api_routes()) {
        for (const auto& routed_method : route.methods) {
            std::string method(http::to_string(routed_method.verb));
            std::transform(method.begin(), method.end(), method.begin(), ::tolower);
            routed.insert(method + " " + std::string(route.path));
        }
    }
    for (const auto& op : routed) EXPECT_TRUE(documented.count(op)) << "undocumented: " << op;
    for (const auto& op : documented) EXPECT_TRUE(routed.count(op)) << "not routed: " << op;

    const std::vector<http::verb> verbs = {http::verb::get, http::verb::post, http::verb::put,
                                           http::verb::delete_, http::verb::patch};
    for (const auto& route : server::api_routes()) {
        std::string target(route.path);
        for (auto [from, to] : {std::pair{"{id}", "sb-nope"},
                                {"{port}", "8080"},
                                {"{path}", "x"},
                                {"{name}", "viewer.js"}}) {
            if (auto at = target.find(from); at != std::string::npos)
                target.replace(at, std::string_view(from).size(), to);
        }
        // The event stream never ends; a type that does not exist answers 400 at once.
        if (route.path == std::string_view("/v1/events")) target += "?types=deskbox_route_walk";
        for (auto verb : verbs) {
            // A body that no handler accepts, so the walk creates nothing.
            std::string body = verb == http::verb::post || verb == http::verb::put
                                   ? R"({"deskbox_route_walk": true})"
                                   : "";
            auto a = s.call(verb, target, body);
            const bool listed =
                std::any_of(route.methods.begin(), route.methods.end(),
                            [verb](const auto& method) { return method.verb == verb; });
            const json error =
                a.js().is_object() && a.js().contains("error") && a.js()["error"].is_object()
                    ? a.js()["error"]
                    : json::object();
            std::string what = std::string(http::to_string(verb)) + " " + target + ": " +
                               std::to_string(a.status) + " " + a.body.substr(0, 200);
            EXPECT_NE(a.status, 0u) << what;
            EXPECT_EQ(a.body.find("no such endpoint"), std::string::npos) << what;
            if (listed) {
                EXPECT_NE(error.value("code", json()).dump(), "\"method_not_allowed\"") << what;
            } else {
                EXPECT_EQ(a.status, 405u) << what;
                // /mcp answers JSON-RPC errors: the API's code is in error.data.
                const json& code = route.path == std::string_view("/mcp")
                                       ? error.value("data", json::object()).value("code", json())
                                       : error.value("code", json());
                EXPECT_EQ(code, "method_not_allowed") << what;
                EXPECT_TRUE(a.headers.count("Allow")) << what;
            }
        }
    }
    EXPECT_EQ(s.get("/v1/no/such/route").status, 404u);
    EXPECT_EQ(s.get("/v1/sandboxes").status, 200u) << "the walk made no sandbox";
    EXPECT_EQ(s.get("/v1/sandboxes").js()["sandboxes"].size(), 0u);
}

// What current models emit, sent whole: Anthropic tool_use blocks (zoom included) and OpenAI
// computer_call items (one action or the GA batch), answered with what the loop needs next.
TEST(Api, DialectsTakeWholeModelItemsAndAnswerWithTheNextInput) {
    REQUIRE_TEMPLATE();
    Server s;
    auto created = s.post("/v1/sandboxes", {{"network", false}});
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    const std::string base = "/v1/sandboxes/" + created.js()["id"].get<std::string>();
    auto decode = [](const std::string& b64) {
        std::string bytes(beast::detail::base64::decoded_size(b64.size()), '\0');
        bytes.resize(beast::detail::base64::decode(bytes.data(), b64.data(), b64.size()).first);
        return cv::imdecode(std::vector<uchar>(bytes.begin(), bytes.end()), cv::IMREAD_COLOR);
    };

    auto a = s.post(base + "/actions?dialect=anthropic&screenshot=true",
                    {{"type", "tool_use"},
                     {"id", "toolu_01XYZ"},
                     {"name", "computer"},
                     {"input", {{"action", "mouse_move"}, {"coordinate", {200, 100}}}}});
    ASSERT_EQ(a.status, 200u) << a.body;
    json tool_result = a.js()["tool_result"];
    EXPECT_EQ(tool_result["type"], "tool_result");
    EXPECT_EQ(tool_result["tool_use_id"], "toolu_01XYZ");
    EXPECT_EQ(tool_result["content"][0]["source"]["media_type"], "image/png");
    cv::Mat after = decode(tool_result["content"][0]["source"]["data"]);
    EXPECT_EQ(after.cols, 1280);
    EXPECT_EQ(after.rows, 800);
    EXPECT_EQ(a.js()["screenshot"]["width"], 1280);
    auto cursor = s.get(base + "/cursor").js();
    EXPECT_EQ(cursor["x"], 200);
    EXPECT_EQ(cursor["y"], 100);

    a = s.post(base + "/actions?dialect=anthropic",
               {{"action", "zoom"}, {"region", {100, 50, 419, 249}}});
    ASSERT_EQ(a.status, 200u) << a.body;
    json zoom = a.js()["results"][0];
    EXPECT_EQ(zoom["type"], "zoom");
    EXPECT_EQ(zoom["width"], 320);
    EXPECT_EQ(zoom["height"], 200);
    cv::Mat region = decode(zoom["base64_image"]);
    EXPECT_FALSE(a.js().contains("screenshot")) << "no screenshot unless asked";
    auto shot = s.get(base + "/screenshot");
    cv::Mat screen =
        cv::imdecode(std::vector<uchar>(shot.body.begin(), shot.body.end()), cv::IMREAD_COLOR);
    ASSERT_EQ(region.cols, 320);
    EXPECT_EQ(cv::norm(region, screen(cv::Rect(100, 50, 320, 200)), cv::NORM_INF), 0)
        << "the zoom is that region of the screen, pixel for pixel";
    a = s.post(base + "/actions?dialect=anthropic",
               {{"action", "zoom"}, {"region", {100, 50, 1281, 249}}});
    EXPECT_EQ(a.status, 400u);
    EXPECT_EQ(a.js()["error"]["field"], "region[2]") << a.body;

    a = s.post(base + "/actions?dialect=openai&screenshot=true",
               {{"type", "computer_call"},
                {"id", "cu_1"},
                {"call_id", "call_abc"},
                {"status", "completed"},
                {"pending_safety_checks", json::array()},
                {"actions",
                 {{{"type", "move"}, {"x", 300}, {"y", 310}, {"keys", {"SHIFT"}}},
                  {{"type", "wait"}},
                  {{"type", "click"}, {"button", "left"}, {"x", 310}, {"y", 320}}}}});
    ASSERT_EQ(a.status, 200u) << a.body;
    json output = a.js()["computer_call_output"];
    EXPECT_EQ(output["type"], "computer_call_output");
    EXPECT_EQ(output["call_id"], "call_abc");
    EXPECT_EQ(output["output"]["type"], "computer_screenshot");
    EXPECT_EQ(output["output"]["image_url"].get<std::string>().rfind("data:image/png;base64,", 0),
              0u);
    EXPECT_EQ(a.js()["results"].size(), 3u);
    cursor = s.get(base + "/cursor").js();
    EXPECT_EQ(cursor["x"], 310);
    EXPECT_EQ(cursor["y"], 320);
    a = s.post(base + "/actions?dialect=openai",
               {{"type", "computer_call"},
                {"call_id", "c"},
                {"actions", {{{"type", "wait"}}, {{"type", "click"}, {"x", 1}, {"y", 1}}}}});
    EXPECT_EQ(a.status, 400u);
    EXPECT_EQ(a.js()["error"]["field"], "actions[1].button") << a.body;
    a = s.post(base + "/actions?screenshot=maybe", {{"type", "wait"}, {"duration_ms", 0}});
    EXPECT_EQ(a.status, 400u);
    EXPECT_EQ(a.js()["error"]["field"], "screenshot");
    // Flags read the same everywhere: true/1, false/0, anything else named back.
    EXPECT_EQ(s.get(base + "/screenshot?cursor=yes").js()["error"]["field"], "cursor");
    EXPECT_EQ(s.get(base + "/screenshot?cursor=1").status, 200u);
    EXPECT_EQ(s.del(base + "/files?path=/tmp/none&recursive=yes").js()["error"]["field"],
              "recursive");
    EXPECT_EQ(
        s.post(base + "/commands", {{"cmd", "true"}, {"timeout_s", "ten"}}).js()["error"]["field"],
        "timeout_s");
    EXPECT_EQ(s.get(base + "/windows?all=1").js()["error"]["field"], "all");
    EXPECT_EQ(s.get(base + "/cursor?x=1").status, 400u);
    EXPECT_EQ(s.del(base).status, 200u);
}

// Issue 26: what a web page can make a browser send to the default keyless loopback deskboxd
// (DNS rebinding, cross-site simple requests), over a real socket.
// Issue 26 item 2, end to end: the guest owns /run/deskbox, where its agent's socket lives.
// It swaps agent.sock for a symlink to a host socket; deskboxd crashes; the next one, adopting,
// must not connect there (it did, as root, and sent its handshake). The sandbox is not adopted.
TEST(HostileApi, AnAgentSocketSwappedForASymlinkIsNeverFollowedAtAdoption) {
    REQUIRE_TEMPLATE();
    TempDir dir("deskboxd-hostile-adopt");
    const auto state = dir.path() / "state";
    // A host socket the guest would like deskboxd to talk to.
    const std::string bait = (dir.path() / "host.sock").string();
    UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    ASSERT_TRUE(listener);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    ASSERT_LT(bait.size(), sizeof(address.sun_path));
    std::memcpy(address.sun_path, bait.c_str(), bait.size() + 1);
    ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(::listen(listener.get(), 8), 0);
    ::chmod(bait.c_str(), 0777);
    std::string id;
    {
        Server first({"--on-exit", "keep"}, state);
        auto a = first.post("/v1/sandboxes", json::object());
        ASSERT_EQ(a.status, 201u) << a.body << first.log();
        id = a.js()["id"];
        const std::string sock = std::string("/run/deskbox/agent.sock");
        EXPECT_EQ(run(first, id,
                      "rm -f " + sock + " && ln -s " + bait + " " + sock + " && readlink " + sock),
                  bait + "\n");
        first.kill_hard();  // a crash: the guest's symlink stays
    }
    Server second({}, state);
    EXPECT_EQ(second.log().find("adopted running sandbox " + id), std::string::npos)
        << second.log();
    EXPECT_NE(second.get("/v1/sandboxes/" + id).status, 200u) << second.log();
    EXPECT_EQ(second.get("/healthz").status, 200u);
    // Nothing connected to the bait (a connection would wait in its backlog).
    UniqueFd accepted(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    EXPECT_FALSE(accepted) << "deskboxd connected to where the guest's symlink pointed";
}

TEST(HostileApi, ForeignHostsOriginsAndTextBodiesAreRefused) {
    Server s;
    auto a = s.call(http::verb::get, "/v1/sandboxes", {}, {{"Host", "rebound.evil.example:8700"}});
    EXPECT_EQ(a.status, 421u) << a.body;
    EXPECT_EQ(a.js()["error"]["code"], "misdirected_request");
    a = s.call(http::verb::post, "/v1/sandboxes", R"({"template":"no-such-template"})",
               {{"Origin", "http://evil.example"}, {"Content-Type", "application/json"}});
    EXPECT_EQ(a.status, 403u) << a.body;
    EXPECT_EQ(a.js()["error"]["code"], "forbidden_origin");
    a = s.call(http::verb::post, "/v1/sandboxes", R"({"template":"no-such-template"})",
               {{"Content-Type", "text/plain"}});
    EXPECT_EQ(a.status, 415u) << a.body;
    EXPECT_EQ(a.js()["error"]["code"], "unsupported_media_type");
    a = s.call(http::verb::post, "/mcp", R"({"jsonrpc":"2.0","id":1,"method":"ping"})",
               {{"Origin", "http://evil.example"}, {"Content-Type", "application/json"}});
    EXPECT_EQ(a.status, 403u) << a.body;
    EXPECT_EQ(a.js()["error"]["data"]["code"], "forbidden_origin");
    // What curl -d sends (no Origin) is still read as JSON: the README's examples work.
    a = s.call(http::verb::post, "/v1/sandboxes", R"({"template":"no-such-template"})",
               {{"Content-Type", "application/x-www-form-urlencoded"}});
    EXPECT_EQ(a.status, 400u) << a.body;
    EXPECT_EQ(a.js()["error"]["field"], "template");
    // The server's own page (same origin) may.
    a = s.call(http::verb::post, "/v1/sandboxes", R"({"template":"no-such-template"})",
               {{"Origin", "http://127.0.0.1"}, {"Content-Type", "application/json"}});
    EXPECT_EQ(a.status, 400u) << a.body;
    EXPECT_EQ(s.get("/v1/sandboxes").js()["sandboxes"].size(), 0u);
}

// Eight keyless 60 MiB bodies took RSS from 136 to 628 MB: the header alone is refused now.
TEST(HostileApi, UnauthenticatedBodiesAreRefusedOnTheirHeader) {
    const std::string key = "k-hostile-bodies-01";
    Server s({"--api-key", key});
    auto rss_kib = [&] {
        std::ifstream status("/proc/" + std::to_string(s.pid()) + "/status");
        std::string line;
        while (std::getline(status, line))
            if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
        return 0L;
    };
    const long before = rss_kib();
    net::io_context io;  // before the streams: they go first
    std::vector<std::unique_ptr<beast::tcp_stream>> held;
    const std::string megabyte(1 << 20, 'x');
    for (int i = 0; i < 8; ++i) {
        auto stream = std::make_unique<beast::tcp_stream>(io);
        stream->connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), s.port()));
        const std::string header =
            "POST /v1/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\n"
            "Content-Length: " +
            std::to_string(60 << 20) + "\r\n\r\n";
        net::write(stream->socket(), net::buffer(header));
        // The answer comes on the header alone: the 60 MiB are never needed.
        beast::flat_buffer buffer;
        http::response<http::string_body> res;
        beast::error_code ec;
        http::read(*stream, buffer, res, ec);
        ASSERT_FALSE(ec) << "no answer before the body: " << ec.message();
        EXPECT_EQ(res.result_int(), 401u) << res.body();
        // Whatever it sends now is not kept.
        net::write(stream->socket(), net::buffer(megabyte), ec);
        held.push_back(std::move(stream));
    }
    EXPECT_LT(rss_kib() - before, 32 * 1024) << "RSS grew from " << before << " KiB";
    EXPECT_EQ(s.call(http::verb::get, "/healthz").status, 200u);
}

}  // namespace
}  // namespace deskbox
