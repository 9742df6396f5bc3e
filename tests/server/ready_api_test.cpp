// "Ready means ready": POST /v1/sandboxes answers once the template's ready condition holds,
// on the real server with real runc containers of the `minimal` template (its ready: its one
// autostart window, the xterm, then a settled screen). No timing is asserted: what is checked
// is what a client sees right after the answer.
#include <gtest/gtest.h>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "tests/server/deskboxd_fixture.hpp"
#include "tests/support/host_state.hpp"

namespace deskbox {
namespace {

using namespace test;

std::string read_text(const std::filesystem::path& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The README's "drive it yourself" lines: create, then type at once. The terminal is mapped
// when the create answers, has the keyboard focus and takes the text; the screen shows it.
TEST(ReadyApi, AMinimalCreateAnswersWithItsTerminalMappedAndTypingLandsInIt) {
    REQUIRE_TEMPLATE();
    Server s;
    auto created = s.post("/v1/sandboxes", {{"template", "minimal"}});
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    const std::string id = created.js()["id"];
    const std::string base = "/v1/sandboxes/" + id;
    EXPECT_TRUE(created.js()["ready_ms"].is_number_integer()) << created.body;

    // Asked once, right away: no polling.
    json windows = s.get(base + "/windows").js();
    int mapped_terminals = 0;
    for (auto& w : windows["windows"])
        if (w.value("visible", false) && w.value("class", "") == "XTerm") ++mapped_terminals;
    EXPECT_EQ(mapped_terminals, 1) << windows.dump();

    // No click first: the autostarted terminal has the focus, as `deskbox type ID ...` expects.
    const std::string text = "hello 日本語";
    auto typed =
        s.post(base + "/actions",
               {{"actions",
                 {{{"type", "type"}, {"text", "printf '%s' '" + text + "' > ~/typed.txt\n"}}}}});
    ASSERT_EQ(typed.status, 200u) << typed.body;
    EXPECT_TRUE(eventually([&] { return run(s, id, "cat ~/typed.txt 2>/dev/null") == text; }))
        << "the text did not reach the terminal's shell";

    auto shot = s.get(base + "/screenshot?format=png");
    ASSERT_EQ(shot.status, 200u);
    cv::Mat img =
        cv::imdecode(std::vector<uchar>(shot.body.begin(), shot.body.end()), cv::IMREAD_GRAYSCALE);
    ASSERT_FALSE(img.empty());
    EXPECT_GT(cv::countNonZero(img), static_cast<int>(img.total() / 100))
        << "the screen is (nearly) black";

    auto inspected = s.get(base).js();
    EXPECT_EQ(inspected["ready_ms"], created.js()["ready_ms"]) << "inspect reports it too";
    const std::string audit = read_text(s.state() / "audit" / (id + ".jsonl"));
    EXPECT_NE(audit.find("\"kind\":\"ready\""), std::string::npos) << audit;
    EXPECT_EQ(s.del(base).status, 200u);
}

// A request's own condition replaces the template's; every named part holds at the answer.
TEST(ReadyApi, ARequestsConditionsAllHoldWhenTheCreateAnswers) {
    REQUIRE_TEMPLATE();
    Server s;
    auto created = s.post(
        "/v1/sandboxes", {{"template", "minimal"},
                          {"ready",
                           {{"windows", "autostart"},
                            {"window_title", "user@"},  // the shell's prompt names the terminal so
                            {"command", {"sh", "-c", "test \"$(id -u)\" = 1000 && pgrep -x xterm"}},
                            {"settle_ms", 100}}}});
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    const std::string base = "/v1/sandboxes/" + created.js()["id"].get<std::string>();
    const std::string windows = s.get(base + "/windows").body;
    EXPECT_NE(windows.find("\"title\":\"user@"), std::string::npos) << windows;
    EXPECT_EQ(s.del(base).status, 200u);

    // ready: false answers after the first frame, without a ready_ms.
    auto quick = s.post("/v1/sandboxes", {{"template", "minimal"}, {"ready", false}});
    ASSERT_EQ(quick.status, 201u) << quick.body;
    EXPECT_FALSE(quick.js().contains("ready_ms")) << quick.body;
    EXPECT_EQ(s.del("/v1/sandboxes/" + quick.js()["id"].get<std::string>()).status, 200u);

    // A bad condition is a 400 naming its field; nothing starts.
    auto bad = s.post("/v1/sandboxes", {{"ready", {{"windows", "all"}}}});
    EXPECT_EQ(bad.status, 400u) << bad.body;
    EXPECT_EQ(bad.js()["error"]["field"], "ready.windows");
    EXPECT_EQ(s.get("/v1/sandboxes").js()["sandboxes"].size(), 0u);
}

// A condition that never holds: 504 not_ready naming it, after its timeout, and the sandbox is
// gone with everything it had on the host.
TEST(ReadyApi, ACreateThatIsNeverReadyIsA504NamingWhatIsMissingAndLeavesNothing) {
    REQUIRE_TEMPLATE();
    Server s;
    auto failed = s.post(
        "/v1/sandboxes",
        {{"template", "minimal"}, {"ready", {{"command", {"pgrep", "xclock"}}, {"timeout_s", 3}}}});
    ASSERT_EQ(failed.status, 504u) << failed.body;
    const json error = failed.js()["error"];
    EXPECT_EQ(error["code"], "not_ready");
    EXPECT_EQ(error["field"], "ready");
    const std::string message = error["message"];
    EXPECT_NE(message.find("command [\"pgrep\",\"xclock\"] still exits 1 after 3 s"),
              std::string::npos)
        << message;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(message, m, std::regex("sandbox (sb-[0-9a-f]{12})"))) << message;
    const std::string id = m[1];

    EXPECT_EQ(s.get("/v1/sandboxes").js()["sandboxes"].size(), 0u);
    EXPECT_EQ(s.get("/v1/sandboxes/" + id).status, 404u);
    EXPECT_FALSE(std::filesystem::exists(s.state() / "sandboxes" / id));
    EXPECT_FALSE(std::filesystem::exists(s.state() / "namespaces" / id));
    EXPECT_EQ(read_text("/proc/self/mountinfo").find(id), std::string::npos) << "a mount is left";
    EXPECT_EQ(
        run_process({"find", "/sys/fs/cgroup", "-maxdepth", "4", "-name", "*" + id + "*"}).out, "")
        << "a cgroup is left";
    EXPECT_TRUE(namespaces_held_by(s.pid(), s.state()).empty()) << "a network namespace is left";
    std::string in_its_cgroup;
    std::error_code ec;
    for (const auto& proc : std::filesystem::directory_iterator("/proc", ec))
        if (read_text(proc.path() / "cgroup").find(id) != std::string::npos)
            in_its_cgroup += proc.path().filename().string() + " ";
    EXPECT_EQ(in_its_cgroup, "") << "processes of the sandbox are left";
    const std::string audit = read_text(s.state() / "audit" / (id + ".jsonl"));
    EXPECT_NE(audit.find("\"unmet\""), std::string::npos) << audit;

    // The other conditions' words: a port nothing listens on.
    auto no_port = s.post("/v1/sandboxes", {{"ready", {{"port", 8000}, {"timeout_s", 1}}}});
    ASSERT_EQ(no_port.status, 504u) << no_port.body;
    EXPECT_NE(no_port.js()["error"]["message"].get<std::string>().find(
                  "nothing listens on TCP port 8000 after 1 s"),
              std::string::npos)
        << no_port.body;

    // The server is none the worse: the next create is ready.
    auto next = s.post("/v1/sandboxes", json::object());
    ASSERT_EQ(next.status, 201u) << next.body;
    EXPECT_EQ(s.del("/v1/sandboxes/" + next.js()["id"].get<std::string>()).status, 200u);
}

}  // namespace
}  // namespace deskbox
