// SessionSupervisor with real Xvfb and openbox.
#include <gtest/gtest.h>

#include <X11/Xlib.h>
#include <X11/extensions/dpms.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/temp_dir.hpp"
#include "guest-desktop/session/session_supervisor.hpp"
#include "tests/support/processes.hpp"

namespace deskbox::session {
namespace {

using namespace std::chrono_literals;

using deskbox::testing::children_of_self;

std::string comm_of(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
    std::string name;
    std::getline(in, name);
    return name;
}

// Records every reported state; waits are bounded so a hang fails instead of blocking.
struct StateLog {
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<std::pair<SessionState, std::string>> states;

    StateCallback callback() {
        return [this](SessionState s, const std::string& reason) {
            std::lock_guard lock(mutex);
            states.emplace_back(s, reason);
            changed.notify_all();
        };
    }
    // Waits until a state in `wanted` is reported after index `from`; returns its index or -1.
    int wait_for(std::initializer_list<SessionState> wanted, std::size_t from,
                 std::chrono::seconds limit = 60s) {
        std::unique_lock lock(mutex);
        int found = -1;
        changed.wait_for(lock, limit, [&] {
            for (std::size_t i = from; i < states.size(); ++i)
                for (auto w : wanted)
                    if (states[i].first == w) return (found = static_cast<int>(i)) >= 0;
            return false;
        });
        return found;
    }
    std::size_t size() {
        std::lock_guard lock(mutex);
        return states.size();
    }
    std::pair<SessionState, std::string> at(std::size_t i) {
        std::lock_guard lock(mutex);
        return states.at(i);
    }
};

SessionOptions small_screen() {
    SessionOptions o;
    o.width = 800;
    o.height = 600;
    o.dpi = 120;
    return o;
}

TEST(Session, StartsXvfbAndOpenboxAndReportsReady) {
    StateLog log;
    TempDir dir("deskbox-session-test");
    SessionOptions options = small_screen();
    std::string marker = (dir.path() / "display").string();
    options.autostart = {
        {"sh", "-c", "echo \"$DISPLAY $DESKBOX_APP\" > " + marker + "; sleep 100"}};
    options.app_env = {{"DESKBOX_APP", "yes"}};
    SessionSupervisor session(options, log.callback());
    session.start();

    ASSERT_GE(log.size(), 2u);
    EXPECT_EQ(log.at(0).first, SessionState::starting);
    EXPECT_EQ(log.at(log.size() - 1).first, SessionState::ready);
    EXPECT_EQ(session.state(), SessionState::ready);

    nlohmann::json info = session.info();
    EXPECT_EQ(info["display"], session.display_name());
    EXPECT_EQ(info["screen"]["width"], 800);
    EXPECT_EQ(info["screen"]["height"], 600);
    EXPECT_EQ(info["dpi"], 120);
    EXPECT_EQ(info["ready"], true);
    EXPECT_EQ(info["wm"], true);
    EXPECT_EQ(comm_of(session.wm_pid()), "openbox");
    EXPECT_EQ(comm_of(session.xvfb_pid()), "Xvfb");
    EXPECT_EQ(session.client_env().at("DISPLAY"), session.display_name());

    Display* d = XOpenDisplay(session.display_name().c_str());
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(DisplayWidth(d, 0), 800);
    // The desktop never blanks: no screen saver timeout, DPMS off.
    int timeout = -1, interval, blanking, exposures;
    XGetScreenSaver(d, &timeout, &interval, &blanking, &exposures);
    EXPECT_EQ(timeout, 0);
    CARD16 level = 0;
    BOOL dpms_on = True;
    int ev, err;
    if (DPMSQueryExtension(d, &ev, &err)) {
        DPMSInfo(d, &level, &dpms_on);
        EXPECT_FALSE(dpms_on);
    }
    XCloseDisplay(d);

    // The autostart app got DISPLAY and app_env.
    std::string seen;
    for (int i = 0; i < 1000 && seen.empty(); ++i) {
        std::ifstream in(marker);
        std::getline(in, seen);
        if (seen.empty()) std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(seen, session.display_name() + " yes");
    EXPECT_EQ(session.app_pids().size(), 1u);
}

TEST(Session, RestartsACrashedWindowManager) {
    StateLog log;
    SessionOptions options = small_screen();
    options.monitor_interval = 20ms;
    SessionSupervisor session(options, log.callback());
    session.start();
    pid_t first_wm = session.wm_pid();
    ASSERT_GT(first_wm, 0);
    std::size_t mark = log.size();
    ASSERT_EQ(::kill(first_wm, SIGKILL), 0);

    int degraded = log.wait_for({SessionState::degraded}, mark);
    ASSERT_GE(degraded, 0);
    EXPECT_NE(log.at(degraded).second.find("window manager exited"), std::string::npos);
    int ready = log.wait_for({SessionState::ready}, static_cast<std::size_t>(degraded));
    ASSERT_GE(ready, 0);
    EXPECT_NE(session.wm_pid(), first_wm);
    EXPECT_EQ(comm_of(session.wm_pid()), "openbox");
    EXPECT_EQ(session.info()["wm"], true);
}

TEST(Session, RestartsAKilledXServerOnTheSameDisplay) {
    StateLog log;
    TempDir dir("deskbox-session-test");
    SessionOptions options = small_screen();
    options.monitor_interval = 20ms;
    options.autostart = {{"sleep", "100"}};
    SessionSupervisor session(options, log.callback());
    session.start();
    std::string display = session.display_name();
    pid_t first_xvfb = session.xvfb_pid();
    pid_t first_app = session.app_pids().at(0);
    std::size_t mark = log.size();
    ASSERT_EQ(::kill(first_xvfb, SIGKILL), 0);

    int degraded = log.wait_for({SessionState::degraded, SessionState::failed}, mark);
    ASSERT_GE(degraded, 0) << "the crash was not noticed";
    EXPECT_NE(log.at(degraded).second.find("X server exited"), std::string::npos);
    int outcome = log.wait_for({SessionState::ready, SessionState::failed},
                               static_cast<std::size_t>(degraded));
    ASSERT_GE(outcome, 0) << "neither restarted nor failed: hung";
    if (log.at(outcome).first == SessionState::failed) {
        // Someone else grabbed the display number meanwhile: a reported failure is correct.
        EXPECT_FALSE(log.at(outcome).second.empty());
        EXPECT_EQ(session.info()["ready"], false);
        return;
    }
    EXPECT_EQ(session.display_name(), display);
    EXPECT_NE(session.xvfb_pid(), first_xvfb);
    Display* d = XOpenDisplay(display.c_str());
    ASSERT_NE(d, nullptr) << "clients cannot reconnect to " << display;
    XCloseDisplay(d);
    EXPECT_EQ(session.info()["wm"], true);
    ASSERT_EQ(session.app_pids().size(), 1u);
    EXPECT_NE(session.app_pids()[0], first_app);  // autostart ran again
}

TEST(Session, GivesUpOnAnXServerThatKeepsDying) {
    StateLog log;
    SessionOptions options = small_screen();
    options.window_manager = std::vector<std::string>{};
    options.monitor_interval = 20ms;
    options.restart.max_restarts = 1;
    SessionSupervisor session(options, log.callback());
    session.start();
    EXPECT_EQ(session.info()["wm"], false);
    for (int kill_round = 0; kill_round < 2; ++kill_round) {
        std::size_t mark = log.size();
        pid_t xvfb = session.xvfb_pid();
        ASSERT_GT(xvfb, 0);
        ::kill(xvfb, SIGKILL);
        ASSERT_GE(log.wait_for({SessionState::ready, SessionState::failed}, mark), 0);
        if (session.state() == SessionState::failed) break;
    }
    EXPECT_EQ(session.state(), SessionState::failed);
    EXPECT_NE(session.info()["reason"].get<std::string>().find("giving up"), std::string::npos)
        << session.info().dump();
    EXPECT_EQ(session.xvfb_pid(), -1);
}

TEST(Session, WithoutWindowManager) {
    StateLog log;
    SessionOptions options = small_screen();
    options.window_manager = std::vector<std::string>{};
    SessionSupervisor session(options, log.callback());
    session.start();
    EXPECT_EQ(session.state(), SessionState::ready);
    EXPECT_EQ(session.info()["wm"], false);
    EXPECT_EQ(session.wm_pid(), -1);
}

TEST(Session, AWindowManagerThatKeepsCrashingDegradesTheSession) {
    StateLog log;
    SessionOptions options = small_screen();
    options.window_manager = std::vector<std::string>{"sh", "-c", "exit 3"};
    options.restart.max_restarts = 2;
    options.monitor_interval = 20ms;
    SessionSupervisor session(options, log.callback());
    session.start();
    // Bounded: every wait inside is bounded, so the give-up must come.
    for (int i = 0; i < 600; ++i) {
        auto reason = session.info().value("reason", std::string());
        if (reason.find("running without one") != std::string::npos) break;
        std::this_thread::sleep_for(50ms);
    }
    nlohmann::json info = session.info();
    EXPECT_EQ(info["state"], "degraded");
    EXPECT_NE(info["reason"].get<std::string>().find("running without one"), std::string::npos);
    EXPECT_EQ(info["wm"], false);
    // The X server itself still works.
    Display* d = XOpenDisplay(session.display_name().c_str());
    EXPECT_NE(d, nullptr);
    if (d) XCloseDisplay(d);
}

TEST(Session, FailsCleanlyWhenXvfbCannotStart) {
    StateLog log;
    SessionOptions options;
    options.width = 0;  // Xvfb refuses a 0-pixel screen
    SessionSupervisor session(options, log.callback());
    EXPECT_THROW(session.start(), std::runtime_error);
    ASSERT_GE(log.size(), 1u);
    EXPECT_EQ(log.at(log.size() - 1).first, SessionState::failed);
    EXPECT_EQ(session.info()["ready"], false);
}

TEST(Session, DestructionLeavesNoChildProcess) {
    std::vector<pid_t> pids;
    {
        SessionOptions options = small_screen();
        options.autostart = {{"sleep", "100"}, {"sh", "-c", "sleep 100 & sleep 100"}};
        SessionSupervisor session(options);
        session.start();
        pids = session.app_pids();
        pids.push_back(session.wm_pid());
        pids.push_back(session.xvfb_pid());
        EXPECT_EQ(children_of_self().size(), 4u);
    }
    EXPECT_TRUE(children_of_self().empty());
    for (pid_t pid : pids) EXPECT_NE(::kill(pid, 0), 0) << pid;
}

}  // namespace
}  // namespace deskbox::session
