// wait_until_ready on a scripted sandbox with a clock of its own: which rounds look at what,
// when the wait ends, and what an unmet condition's message says. No agent, no real time.
#include <gtest/gtest.h>

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "server/sandbox/readiness.hpp"
#include "server/sandbox/sandbox_error.hpp"

namespace deskbox::server {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

// A sandbox whose windows, ports and command outcome change at given times after the start;
// looks take no time unless `look_cost` says so.
class ScriptedSandbox : public ReadinessProbe {
  public:
    struct TimedWindow {
        milliseconds from, until;
        Window window;
    };
    std::vector<TimedWindow> windows;
    std::optional<milliseconds> port_from;  // port 8000 listens from then on
    std::optional<milliseconds> command_ok_from;
    int command_exit = 1;
    milliseconds quiet_from{0};  // the last damage happens then
    std::optional<milliseconds> windows_fail_until;
    bool windows_break = false;  // the agent is gone
    milliseconds look_cost{0};

    int looks = 0, runs = 0, settles = 0, port_looks = 0;
    std::vector<milliseconds> run_limits;

    Clock::time_point now() override { return now_; }
    void sleep_until(Clock::time_point when) override { now_ = std::max(now_, when); }
    milliseconds elapsed() const { return std::chrono::duration_cast<milliseconds>(now_ - start_); }

    std::vector<Window> mapped_windows() override {
        ++looks;
        now_ += look_cost;
        if (windows_break) throw std::runtime_error("agent gone");
        if (windows_fail_until && elapsed() < *windows_fail_until)
            throw ProbeError("windows.list: timed out");
        std::vector<Window> out;
        for (const auto& w : windows)
            if (w.from <= elapsed() && elapsed() < w.until) out.push_back(w.window);
        return out;
    }
    std::vector<int> listening_ports() override {
        ++port_looks;
        if (port_from && *port_from <= elapsed()) return {22, 8000};
        return {22};
    }
    CommandResult run(const std::vector<std::string>&, milliseconds limit) override {
        ++runs;
        run_limits.push_back(limit);
        now_ += look_cost;
        if (command_ok_from && *command_ok_from <= elapsed()) return {0, false, ""};
        return {command_exit, false, "xclock: not running\n"};
    }
    bool settle(milliseconds quiet, milliseconds limit) override {
        ++settles;
        const auto quiet_enough = start_ + quiet_from + quiet;
        if (quiet_enough <= now_) return true;
        if (quiet_enough <= now_ + limit) {
            now_ = quiet_enough;
            return true;
        }
        now_ += limit;
        return false;
    }

  private:
    Clock::time_point start_ = Clock::time_point{} + 24h;
    Clock::time_point now_ = start_;
};

constexpr milliseconds kForever{24h};

ReadinessProbe::Window window(std::string title) {
    return {std::move(title), "XTerm"};
}

TEST(Readiness, ATemplateWithoutAutostartIsReadyAtItsFirstFrame) {
    ScriptedSandbox sandbox;
    sandbox.quiet_from = 10s;  // would hold up a settle: there is none
    auto outcome = wait_until_ready(default_ready_condition(0), sandbox);
    EXPECT_TRUE(outcome.ready);
    EXPECT_EQ(outcome.waited, 0ms);
    EXPECT_EQ(sandbox.looks + sandbox.settles + sandbox.runs, 0);
}

TEST(Readiness, ReadyFalseWaitsForNothing) {
    ScriptedSandbox sandbox;
    ReadyCondition c = default_ready_condition(3);
    c.wait = false;
    EXPECT_TRUE(wait_until_ready(c, sandbox).ready);
    EXPECT_EQ(sandbox.looks, 0);
}

TEST(Readiness, AutostartWindowsAreAwaitedThenTheScreenSettles) {
    ScriptedSandbox sandbox;
    sandbox.windows = {{300ms, kForever, window("xterm")}, {900ms, kForever, window("xclock")}};
    sandbox.quiet_from = 1000ms;
    auto outcome = wait_until_ready(default_ready_condition(2), sandbox);
    EXPECT_TRUE(outcome.ready) << outcome.unmet;
    // Looks every 100 ms: the second window at the look of 900 ms, then 300 ms of quiet after
    // the last damage at 1000 ms.
    EXPECT_EQ(sandbox.looks, 10);
    EXPECT_EQ(outcome.waited, 1300ms);
    EXPECT_EQ(sandbox.settles, 1);
}

TEST(Readiness, AScreenQuietSinceLongAgoSettlesAtOnce) {
    ScriptedSandbox sandbox;  // a pooled or restored desktop: its windows drew long ago
    sandbox.windows = {{0ms, kForever, window("xterm")}};
    auto outcome = wait_until_ready(default_ready_condition(1), sandbox);
    EXPECT_TRUE(outcome.ready);
    EXPECT_EQ(outcome.waited, 300ms) << "the quiet counts from the last damage, at 0";
    sandbox = ScriptedSandbox();
    sandbox.windows = {{0ms, kForever, window("xterm")}};
    sandbox.quiet_from = -5s;
    EXPECT_EQ(wait_until_ready(default_ready_condition(1), sandbox).waited, 0ms);
}

TEST(Readiness, TooFewWindowsIsUnmetAfterTheTimeoutNamingTheMappedOnes) {
    ScriptedSandbox sandbox;
    sandbox.windows = {{200ms, kForever, window("xterm")}};
    auto outcome = wait_until_ready(default_ready_condition(2), sandbox);
    EXPECT_FALSE(outcome.ready);
    EXPECT_EQ(outcome.waited, 60s);
    EXPECT_EQ(outcome.unmet, "2 autostart windows expected, 1 mapped after 60 s: [\"xterm\"]");
    EXPECT_EQ(sandbox.settles, 0);
    // A splash screen and the terminal were both up at 200..499 ms: that was enough.
    sandbox = ScriptedSandbox();
    sandbox.windows = {{200ms, kForever, window("xterm")}, {0ms, 500ms, window("splash")}};
    EXPECT_TRUE(wait_until_ready(default_ready_condition(2), sandbox).ready);
}

TEST(Readiness, AnExplicitCountAndAWindowWithoutTitleAreNamedSo) {
    ScriptedSandbox sandbox;
    sandbox.windows = {{0ms, kForever, {"", "Xclock"}}};
    ReadyCondition c;
    c.windows = 1;
    c.window_title = "Firefox";
    c.timeout = 1500ms;
    auto outcome = wait_until_ready(c, sandbox);
    EXPECT_FALSE(outcome.ready);
    EXPECT_EQ(outcome.unmet,
              "no mapped window's title contains \"Firefox\" after 1.5 s: [\"Xclock\"]");
    c.windows = 2;
    c.window_title.clear();
    EXPECT_EQ(wait_until_ready(c, sandbox).unmet,
              "2 windows expected, 1 mapped after 1.5 s: [\"Xclock\"]");
}

TEST(Readiness, ACommandIsRunEvery200msUntilItExits0) {
    ScriptedSandbox sandbox;
    sandbox.command_ok_from = 1000ms;
    ReadyCondition c;
    c.command = {"pgrep", "xclock"};
    auto outcome = wait_until_ready(c, sandbox);
    EXPECT_TRUE(outcome.ready) << outcome.unmet;
    EXPECT_EQ(sandbox.runs, 6);  // at 0, 200, ..., 1000 ms
    EXPECT_EQ(outcome.waited, 1000ms) << "the screen was quiet since 0";
    EXPECT_EQ(sandbox.run_limits.front(), 30s) << "a run may take at most 30 s";
    EXPECT_EQ(sandbox.looks, 0) << "windows were not asked for";
}

TEST(Readiness, ACommandThatNeverSucceedsIsNamedWithItsExitCodeAndStderr) {
    ScriptedSandbox sandbox;
    sandbox.look_cost = 10ms;
    ReadyCondition c;
    c.command = {"pgrep", "xclock"};
    c.timeout = 3s;
    auto outcome = wait_until_ready(c, sandbox);
    EXPECT_FALSE(outcome.ready);
    EXPECT_EQ(outcome.unmet,
              "command [\"pgrep\",\"xclock\"] still exits 1 after 3 s (stderr: xclock: not "
              "running)");
    EXPECT_EQ(sandbox.runs, 16);  // rounds start every 200 ms: 0 .. 3000
    EXPECT_EQ(outcome.waited, 3010ms) << "the last run started at the deadline";
    EXPECT_EQ(sandbox.run_limits.back(), 1s) << "a run gets at least a second";
}

TEST(Readiness, EveryNamedConditionMustHoldInTheSameRound) {
    ScriptedSandbox sandbox;
    sandbox.windows = {{400ms, kForever, window("user@sb-1: ~")}};
    sandbox.port_from = 1200ms;
    sandbox.command_ok_from = 800ms;
    ReadyCondition c = default_ready_condition(1);
    c.window_title = "user@";
    c.port = 8000;
    c.command = {"true"};
    c.settle = 0ms;
    auto outcome = wait_until_ready(c, sandbox);
    EXPECT_TRUE(outcome.ready) << outcome.unmet;
    EXPECT_EQ(outcome.waited, 1200ms);
    EXPECT_EQ(sandbox.settles, 0) << "settle_ms 0: no settling";

    sandbox = ScriptedSandbox();
    sandbox.windows = {{0ms, kForever, window("xterm")}};
    sandbox.command_ok_from = 0ms;
    c.timeout = 2s;
    outcome = wait_until_ready(c, sandbox);
    EXPECT_FALSE(outcome.ready);
    EXPECT_EQ(outcome.unmet,
              "no mapped window's title contains \"user@\" after 2 s: [\"xterm\"]; nothing "
              "listens on TCP port 8000 after 2 s");
}

TEST(Readiness, LooksThatFailAreRetriedAndNamedIfTheyNeverSucceed) {
    ScriptedSandbox sandbox;
    sandbox.windows = {{0ms, kForever, window("xterm")}};
    sandbox.windows_fail_until = 500ms;
    auto outcome = wait_until_ready(default_ready_condition(1), sandbox);
    EXPECT_TRUE(outcome.ready) << outcome.unmet;
    EXPECT_EQ(sandbox.looks, 6);

    sandbox = ScriptedSandbox();
    sandbox.windows_fail_until = kForever;
    ReadyCondition c = default_ready_condition(1);
    c.timeout = 1s;
    outcome = wait_until_ready(c, sandbox);
    EXPECT_FALSE(outcome.ready);
    EXPECT_EQ(outcome.unmet, "the windows could not be listed after 1 s: windows.list: timed out");
}

TEST(Readiness, AnAgentThatIsGoneEndsTheWaitAtOnce) {
    ScriptedSandbox sandbox;
    sandbox.windows_break = true;
    EXPECT_THROW(wait_until_ready(default_ready_condition(1), sandbox), std::runtime_error);
    EXPECT_EQ(sandbox.looks, 1);
}

TEST(Readiness, AScreenThatNeverSettlesIsUnmet) {
    ScriptedSandbox sandbox;
    sandbox.windows = {{0ms, kForever, window("xterm")}};
    sandbox.quiet_from = kForever;  // an animation
    ReadyCondition c = default_ready_condition(1);
    c.timeout = 5s;
    auto outcome = wait_until_ready(c, sandbox);
    EXPECT_FALSE(outcome.ready);
    EXPECT_EQ(outcome.unmet, "the screen did not stay still for 300 ms within 5 s");
    EXPECT_EQ(outcome.waited, 5s);
}

TEST(Readiness, SettleMsAloneStillSettles) {
    ScriptedSandbox sandbox;
    sandbox.quiet_from = 250ms;
    ReadyCondition c = default_ready_condition(0);
    c.settle = 500ms;
    c.settle_named = true;
    auto outcome = wait_until_ready(c, sandbox);
    EXPECT_TRUE(outcome.ready);
    EXPECT_EQ(outcome.waited, 750ms);
}

TEST(Readiness, ConditionsAreReadStrictlyNamingTheField) {
    auto c = parse_ready_condition({{"windows", "autostart"}, {"timeout_s", 5}}, "ready", 3);
    EXPECT_EQ(c.windows, 3);
    EXPECT_TRUE(c.windows_from_autostart);
    EXPECT_EQ(c.timeout, 5s);
    EXPECT_EQ(c.settle, 300ms);
    EXPECT_FALSE(c.settle_named);
    c = parse_ready_condition({{"windows", 0},
                               {"window_title", "Mousepad"},
                               {"port", 8000},
                               {"command", {"pgrep", "-x", "mousepad"}},
                               {"settle_ms", 0}},
                              "ready", 3);
    EXPECT_EQ(c.windows, 0);
    EXPECT_FALSE(c.windows_from_autostart);
    EXPECT_EQ(c.port, 8000);
    EXPECT_EQ(c.command.size(), 3u);
    EXPECT_TRUE(c.settle_named);
    EXPECT_EQ(c.to_json(), nlohmann::json({{"windows", 0},
                                           {"window_title", "Mousepad"},
                                           {"port", 8000},
                                           {"command", {"pgrep", "-x", "mousepad"}},
                                           {"timeout_s", 60},
                                           {"settle_ms", 0}}));
    EXPECT_FALSE(parse_ready_condition(nlohmann::json::object(), "ready", 2).waits())
        << "{}: nothing named, nothing to wait for";

    const std::vector<std::pair<nlohmann::json, std::string>> bad = {
        {true, "ready"},
        {{{"window", 1}}, "ready.window"},
        {{{"windows", "all"}}, "ready.windows"},
        {{{"windows", true}}, "ready.windows"},
        {{{"windows", 65}}, "ready.windows"},
        {{{"windows", -1}}, "ready.windows"},
        {{{"window_title", " "}}, "ready.window_title"},
        {{{"window_title", 5}}, "ready.window_title"},
        {{{"port", 0}}, "ready.port"},
        {{{"port", 65536}}, "ready.port"},
        {{{"port", 80.5}}, "ready.port"},
        {{{"command", nlohmann::json::array()}}, "ready.command"},
        {{{"command", "pgrep xterm"}}, "ready.command"},
        {{{"command", {"pgrep", 1}}}, "ready.command[1]"},
        {{{"command", {""}}}, "ready.command[0]"},
        {{{"timeout_s", 0}}, "ready.timeout_s"},
        {{{"timeout_s", 601}}, "ready.timeout_s"},
        {{{"timeout_s", 18446744073709551615ull}}, "ready.timeout_s"},
        {{{"settle_ms", 5001}}, "ready.settle_ms"},
        {{{"settle_ms", "300"}}, "ready.settle_ms"},
    };
    for (const auto& [value, field] : bad) {
        try {
            parse_ready_condition(value, "ready", 1);
            ADD_FAILURE() << "accepted " << value.dump();
        } catch (const SandboxError& e) {
            EXPECT_EQ(e.fault(), SandboxFault::invalid);
            EXPECT_EQ(e.field(), field) << value.dump() << ": " << e.what();
        }
    }
}

}  // namespace
}  // namespace deskbox::server
