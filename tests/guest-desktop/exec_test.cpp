// ExecService with real processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/temp_dir.hpp"
#include "guest-desktop/services/exec_service.hpp"
#include "tests/support/processes.hpp"

namespace deskbox::services {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

using deskbox::testing::children_of_self;
using deskbox::testing::process_alive;

template <typename Fn>
ServiceError error_of(Fn fn) {
    try {
        fn();
    } catch (const ServiceError& e) {
        return e;
    }
    ADD_FAILURE() << "no ServiceError thrown";
    return ServiceError("none", "none");
}

// Collects the events of async commands.
struct Events {
    std::mutex mutex;
    std::condition_variable changed;
    std::map<pid_t, std::string> out, err;
    std::map<pid_t, std::pair<int, int>> exits;
    std::map<pid_t, bool> output_after_exit;

    ExecCallbacks callbacks() {
        return {[this](pid_t pid, std::string_view stream, std::string_view bytes) {
                    std::lock_guard lock(mutex);
                    (stream == "stdout" ? out : err)[pid].append(bytes);
                    if (exits.count(pid)) output_after_exit[pid] = true;
                    changed.notify_all();
                },
                [this](pid_t pid, int code, int sig) {
                    std::lock_guard lock(mutex);
                    exits[pid] = {code, sig};
                    changed.notify_all();
                }};
    }
    // Bounded wait: a broken service fails the test instead of hanging it.
    bool wait_exit(pid_t pid, std::chrono::seconds limit = 30s) {
        std::unique_lock lock(mutex);
        return changed.wait_for(lock, limit, [&] { return exits.count(pid) > 0; });
    }
    template <typename Pred>
    bool wait_for(Pred pred, std::chrono::seconds limit = 30s) {
        std::unique_lock lock(mutex);
        return changed.wait_for(lock, limit, pred);
    }
};

TEST(Exec, ExitCodeStdoutAndStderr) {
    ExecService exec;
    json r = exec.run({{"argv", {"sh", "-c", "echo out; echo err >&2; exit 3"}}});
    EXPECT_EQ(r["exit_code"], 3);
    EXPECT_EQ(r["stdout"], "out\n");
    EXPECT_EQ(r["stderr"], "err\n");
    EXPECT_EQ(r["timed_out"], false);
    EXPECT_FALSE(r.contains("signal"));
    EXPECT_TRUE(r["duration_ms"].is_number_integer());

    json shell = exec.run({{"cmd", "printf 'a|b' | tr '|' '-'"}});
    EXPECT_EQ(shell["stdout"], "a-b");
    EXPECT_EQ(shell["exit_code"], 0);
}

TEST(Exec, ShellHostileArgvArrivesExactly) {
    ExecService exec;
    std::vector<std::string> hostile = {"a b",         "$(touch /tmp/deskbox-pwned)",
                                        "'\"",         "`id`",
                                        ";|&>",        "\\",
                                        "*",           "",
                                        "line\nbreak", "日本語 😀"};
    json argv = {"printf", "[%s]\\n"};
    std::string expected;
    for (auto& h : hostile) {
        argv.push_back(h);
        expected += "[" + h + "]\n";
    }
    json r = exec.run({{"argv", argv}});
    EXPECT_EQ(r["stdout"], expected);
    EXPECT_FALSE(std::filesystem::exists("/tmp/deskbox-pwned"));
}

TEST(Exec, EnvIsMergedOverTheAgentsAndCwdIsUsed) {
    TempDir dir("deskbox-exec-test");
    ExecService exec({}, {}, {{"DESKBOX_BASE", "base"}, {"DESKBOX_OVER", "base"}});
    json r = exec.run(
        {{"argv", {"sh", "-c", "echo $DESKBOX_BASE $DESKBOX_OVER $X; pwd; echo ${PATH:+has-path}"}},
         {"env", {{"X", "a b=c"}, {"DESKBOX_OVER", "request"}}},
         {"cwd", dir.path().string()}});
    EXPECT_EQ(r["stdout"], "base request a b=c\n" + dir.path().string() + "\nhas-path\n");
}

TEST(Exec, StdinIsTheBody) {
    ExecService exec;
    EXPECT_EQ(exec.run({{"argv", {"cat"}}}, "hello\n")["stdout"], "hello\n");
    EXPECT_EQ(exec.run({{"argv", {"cat"}}, {"stdin", "param"}})["stdout"], "param");
    // Bigger than any pipe buffer in both directions at once: no deadlock.
    std::string big(4 * 1024 * 1024, 'x');
    for (std::size_t i = 0; i < big.size(); i += 4096) big[i] = '\n';
    json r = exec.run({{"argv", {"cat"}}}, big);
    EXPECT_EQ(r["stdout"].get<std::string>().size(), big.size());
    EXPECT_TRUE(r["stdout"] == big);
    // No body: stdin is /dev/null, so a reader gets EOF at once.
    EXPECT_EQ(exec.run({{"argv", {"wc", "-c"}}})["stdout"], "0\n");
}

TEST(Exec, TimeoutKillsTheCommandAndItsGrandchildren) {
    ExecService exec;
    json r = exec.run({{"argv", {"sleep", "100"}}, {"timeout_s", 0.3}});
    EXPECT_EQ(r["timed_out"], true);
    EXPECT_EQ(r["signal"], SIGKILL);
    EXPECT_LT(r["duration_ms"].get<int>(), 90'000);

    json g = exec.run({{"cmd", "sleep 100 & echo $!; wait"}, {"timeout_s", 0.5}});
    EXPECT_EQ(g["timed_out"], true);
    pid_t grandchild = std::stoi(g["stdout"].get<std::string>());
    // The kill is synchronous; the reparented grandchild may take a moment to be reaped by
    // init, so only "not running" is asserted, with a bounded wait.
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (process_alive(grandchild) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(10ms);
    EXPECT_FALSE(process_alive(grandchild));
}

TEST(Exec, CommandExitingReturnsThoughADaemonHoldsItsOutput) {
    ExecService exec;
    // The backgrounded sleep keeps stdout open; run must still return when sh exits, not wait
    // for the pipe's EOF (or the timeout). (That it lives on is exec_io_test's business.)
    json r = exec.run({{"cmd", "sleep 30 & echo $!"}, {"timeout_s", 20}});
    EXPECT_EQ(r["exit_code"], 0);
    EXPECT_EQ(r["timed_out"], false);
    EXPECT_LT(r["duration_ms"].get<int>(), 15000);
    pid_t daemon = std::stoi(r["stdout"].get<std::string>());
    EXPECT_GT(daemon, 0);
    ::kill(daemon, SIGKILL);
}

TEST(Exec, OutputIsCappedAndNonUtf8IsAlsoGivenAsBase64) {
    ExecService exec({}, ExecLimits{.max_output_bytes = 1000});
    json r = exec.run({{"cmd", "head -c 5000 /dev/zero | tr '\\0' a; echo done >&2"}});
    EXPECT_EQ(r["stdout"].get<std::string>(), std::string(1000, 'a'));
    EXPECT_EQ(r["stdout_truncated"], true);
    EXPECT_EQ(r["stderr"], "done\n");
    EXPECT_FALSE(r.contains("stderr_truncated"));
    EXPECT_EQ(r["exit_code"], 0);

    json bin = exec.run({{"argv", {"printf", "\\377\\376A"}}});
    EXPECT_EQ(bin["stdout_b64"], "//5B");
    EXPECT_EQ(bin["stdout"],
              "\xEF\xBF\xBD\xEF\xBF\xBD"
              "A");
    EXPECT_FALSE(bin.contains("stderr_b64"));
    EXPECT_NO_THROW(bin.dump());
}

TEST(Exec, StreamDeliversOutputThenExit) {
    Events events;
    ExecService exec(events.callbacks());
    json r =
        exec.run({{"cmd", "echo hi; echo err >&2; sleep 0.2; echo bye; exit 7"}, {"stream", true}});
    ASSERT_TRUE(r.contains("pid"));
    pid_t pid = r["pid"];
    ASSERT_TRUE(events.wait_exit(pid));
    std::lock_guard lock(events.mutex);
    EXPECT_EQ(events.out[pid], "hi\nbye\n");
    EXPECT_EQ(events.err[pid], "err\n");
    EXPECT_EQ(events.exits[pid], std::make_pair(7, 0));
    EXPECT_FALSE(events.output_after_exit[pid]);
}

TEST(Exec, StdinOfAStreamedCommand) {
    Events events;
    ExecService exec(events.callbacks());
    pid_t pid =
        exec.run({{"argv", {"cat"}}, {"stream", true}, {"stdin_open", true}}, "first ")["pid"];
    exec.write_stdin({{"pid", pid}}, "second ");
    ASSERT_TRUE(events.wait_for([&] { return events.out[pid] == "first second "; }));
    exec.write_stdin({{"pid", pid}, {"eof", true}}, "last");
    ASSERT_TRUE(events.wait_exit(pid));
    std::lock_guard lock(events.mutex);
    EXPECT_EQ(events.out[pid], "first second last");
    EXPECT_EQ(events.exits[pid].first, 0);
}

TEST(Exec, StreamedCommandGetsTheBodyThenEof) {
    Events events;
    ExecService exec(events.callbacks());
    pid_t pid = exec.run({{"argv", {"cat"}}, {"stream", true}}, "body bytes")["pid"];
    ASSERT_TRUE(events.wait_exit(pid));  // cat ends: its stdin was closed after the body
    std::lock_guard lock(events.mutex);
    EXPECT_EQ(events.out[pid], "body bytes");
    EXPECT_EQ(events.exits[pid].first, 0);
}

TEST(Exec, BackgroundKillAndList) {
    Events events;
    ExecService exec(events.callbacks());
    pid_t pid = exec.run({{"argv", {"sleep", "100"}}, {"background", true}})["pid"];
    json listed = exec.list()["processes"];
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(listed[0]["pid"], pid);
    EXPECT_EQ(listed[0]["command"], json({"sleep", "100"}));
    EXPECT_EQ(listed[0]["background"], true);
    exec.kill({{"pid", pid}, {"signal", "TERM"}});
    ASSERT_TRUE(events.wait_exit(pid));
    {
        std::lock_guard lock(events.mutex);
        EXPECT_EQ(events.exits[pid], std::make_pair(128 + SIGTERM, SIGTERM));
    }
    EXPECT_TRUE(exec.list()["processes"].empty());
    ServiceError e = error_of([&] { exec.kill({{"pid", pid}}); });
    EXPECT_EQ(e.code(), "not_found");
    EXPECT_EQ(e.field(), "pid");

    pid_t second = exec.run({{"argv", {"sleep", "100"}}, {"background", true}})["pid"];
    exec.kill({{"pid", second}, {"signal", 9}});
    ASSERT_TRUE(events.wait_exit(second));
    std::lock_guard lock(events.mutex);
    EXPECT_EQ(events.exits[second].second, SIGKILL);
}

TEST(Exec, BackgroundTimeoutAndDiscardedOutput) {
    Events events;
    ExecService exec(events.callbacks());
    pid_t pid = exec.run(
        {{"cmd", "echo unseen; sleep 100"}, {"background", true}, {"timeout_s", 0.3}})["pid"];
    ASSERT_TRUE(events.wait_exit(pid));
    std::lock_guard lock(events.mutex);
    EXPECT_EQ(events.exits[pid].second, SIGKILL);
    EXPECT_EQ(events.out.count(pid), 0u);  // background without stream: output discarded
}

TEST(Exec, KillReachesARunningForegroundCommand) {
    ExecService exec;
    json result;
    std::thread runner([&] { result = exec.run({{"argv", {"sleep", "100"}}, {"timeout_s", 60}}); });
    pid_t pid = 0;
    for (int i = 0; i < 3000 && pid == 0; ++i) {
        json l = exec.list()["processes"];
        if (!l.empty())
            pid = l[0]["pid"];
        else
            std::this_thread::sleep_for(10ms);
    }
    ASSERT_NE(pid, 0);
    exec.kill(pid, SIGTERM);
    runner.join();
    EXPECT_EQ(result["signal"], SIGTERM);
    EXPECT_EQ(result["timed_out"], false);
}

TEST(Exec, BadInputNamesTheField) {
    ExecService exec;
    auto field_of = [&](const json& params) {
        ServiceError e = error_of([&] { exec.run(params); });
        return e.code() + " " + e.field();
    };
    EXPECT_EQ(field_of(json::object()), "bad_request argv");
    EXPECT_EQ(field_of({{"argv", "ls"}}), "bad_request argv");
    EXPECT_EQ(field_of({{"argv", json::array()}}), "bad_request argv");
    EXPECT_EQ(field_of({{"argv", {"ls", 5}}}), "bad_request argv[1]");
    EXPECT_EQ(field_of({{"argv", {""}}}), "bad_request argv[0]");
    EXPECT_EQ(field_of({{"argv", {"ls"}}, {"cmd", "ls"}}), "bad_request cmd");
    EXPECT_EQ(field_of({{"cmd", 1}}), "bad_request cmd");
    EXPECT_EQ(field_of({{"cmd", "ls"}, {"env", {{"A", 1}}}}), "bad_request env.A");
    EXPECT_EQ(field_of({{"cmd", "ls"}, {"env", {{"A=B", "x"}}}}), "bad_request env.A=B");
    EXPECT_EQ(field_of({{"cmd", "ls"}, {"env", "A=B"}}), "bad_request env");
    EXPECT_EQ(field_of({{"cmd", "ls"}, {"cwd", "/nonexistent-deskbox"}}), "not_found cwd");
    EXPECT_EQ(field_of({{"cmd", "ls"}, {"cwd", "/etc/passwd"}}), "not_a_directory cwd");
    EXPECT_EQ(field_of({{"cmd", "ls"}, {"cwd", "relative"}}), "bad_request cwd");
    EXPECT_EQ(field_of({{"cmd", "ls"}, {"timeout_s", -1}}), "bad_request timeout_s");
    EXPECT_EQ(field_of({{"cmd", "ls"}, {"timeout_s", 0}}), "bad_request timeout_s");
    EXPECT_EQ(field_of({{"cmd", "ls"}, {"timeout_s", 1e9}}), "bad_request timeout_s");
    EXPECT_EQ(field_of({{"cmd", "ls"}, {"timeout_s", "5"}}), "bad_request timeout_s");
    EXPECT_EQ(field_of({{"cmd", "ls"}, {"timeout", 5}}), "bad_request timeout");
    EXPECT_EQ(field_of({{"cmd", "ls"}, {"background", "yes"}}), "bad_request background");
    EXPECT_EQ(field_of({{"cmd", "ls"}, {"stdin_open", true}}), "bad_request stdin_open");
    EXPECT_EQ(field_of({{"argv", {"/nonexistent/program"}}}), "not_found argv[0]");
    EXPECT_EQ(field_of(json::array()), "bad_request params");

    ServiceError e = error_of([&] { exec.kill({{"pid", "12"}}); });
    EXPECT_EQ(e.field(), "pid");
    e = error_of([&] { exec.kill({{"pid", 1}, {"signal", "NOPE"}}); });
    EXPECT_EQ(e.field(), "signal");
    e = error_of([&] { exec.write_stdin({{"pid", 1}}, "x"); });
    EXPECT_EQ(e.code(), "not_found");

    // stdin of a background command started without stdin_open is closed.
    pid_t pid = exec.run({{"argv", {"sleep", "100"}}, {"background", true}})["pid"];
    e = error_of([&] { exec.write_stdin({{"pid", pid}}, "x"); });
    EXPECT_EQ(e.code(), "bad_request");
    EXPECT_EQ(e.field(), "pid");
}

TEST(Exec, ManyConcurrentCommands) {
    Events events;
    ExecService exec(events.callbacks());
    std::vector<pid_t> background;
    for (int i = 0; i < 8; ++i)
        background.push_back(
            exec.run({{"cmd", "sleep 0.2; echo bg" + std::to_string(i)}, {"stream", true}})["pid"]);
    std::vector<std::thread> threads;
    std::vector<json> results(16);
    for (int i = 0; i < 16; ++i)
        threads.emplace_back([&, i] {
            results[i] =
                exec.run({{"argv", {"sh", "-c", "sleep 0.1; echo $0", std::to_string(i)}}});
        });
    for (auto& t : threads) t.join();
    for (int i = 0; i < 16; ++i) EXPECT_EQ(results[i]["stdout"], std::to_string(i) + "\n");
    for (int i = 0; i < 8; ++i) {
        ASSERT_TRUE(events.wait_exit(background[i]));
        std::lock_guard lock(events.mutex);
        EXPECT_EQ(events.out[background[i]], "bg" + std::to_string(i) + "\n");
    }
}

std::size_t open_fds() {
    std::size_t n = 0;
    for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
    return n;
}

TEST(Exec, DestructionKillsEverythingAndLeavesNoZombie) {
    std::size_t fds_before = open_fds();
    std::vector<pid_t> pids;
    json foreground;
    std::thread runner;
    {
        ExecService exec;
        for (int i = 0; i < 3; ++i)
            pids.push_back(exec.run({{"cmd", "sleep 100"}, {"background", true}})["pid"]);
        pids.push_back(exec.run({{"cmd", "sleep 100"}, {"stream", true}})["pid"]);
        runner = std::thread([&] { foreground = exec.run({{"argv", {"sleep", "100"}}}); });
        while (exec.list()["processes"].size() < 5) std::this_thread::sleep_for(5ms);
        exec.run({{"cmd", "exit 0"}});
    }
    runner.join();
    EXPECT_EQ(foreground["signal"], SIGKILL);
    for (pid_t pid : pids) EXPECT_FALSE(process_alive(pid)) << pid;
    EXPECT_TRUE(children_of_self().empty());
    EXPECT_EQ(open_fds(), fds_before);  // pipes, pidfds and the eventfd are all closed
}

TEST(Exec, WhatACommandLeftRunningOutlivesItAndCanStillWrite) {
    TempDir dir("deskbox-exec-test");
    Events events;
    ExecService exec(events.callbacks());
    // Each survivor writes to the stdout and stderr it inherited once its command is gone,
    // then leaves a mark: SIGPIPE on those writes would end it before the mark.
    auto leaves_running = [&](const std::string& mark) {
        return "sh -c 'sleep 0.3; echo late; echo late >&2; touch " + (dir.path() / mark).string() +
               "; exec sleep 100' & echo $!";
    };
    json foreground = exec.run({{"cmd", leaves_running("foreground")}, {"timeout_s", 20}});
    ASSERT_EQ(foreground["exit_code"], 0);
    pid_t from_foreground = std::stoi(foreground["stdout"].get<std::string>());
    pid_t streamed = exec.run({{"cmd", leaves_running("stream")}, {"stream", true}})["pid"];
    std::string pid_file = (dir.path() / "background.pid").string();
    pid_t background =
        exec.run({{"cmd", "sleep 100 & echo $! > " + pid_file}, {"background", true}})["pid"];
    ASSERT_TRUE(events.wait_exit(streamed));
    ASSERT_TRUE(events.wait_exit(background));
    pid_t from_stream = 0;
    {
        std::lock_guard lock(events.mutex);
        from_stream = std::stoi(events.out[streamed]);
    }
    std::ifstream pid_in(pid_file);
    pid_t from_background = 0;
    pid_in >> from_background;
    std::vector<pid_t> survivors = {from_foreground, from_stream, from_background};

    for (const char* mark : {"foreground", "stream"}) {
        auto deadline = std::chrono::steady_clock::now() + 10s;
        while (!std::filesystem::exists(dir.path() / mark) &&
               std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(10ms);
        EXPECT_TRUE(std::filesystem::exists(dir.path() / mark)) << mark;
    }
    for (pid_t pid : survivors) EXPECT_TRUE(process_alive(pid)) << pid;
    // The command's pid is not ours any more: exec.kill cannot reach what it left behind.
    EXPECT_EQ(error_of([&] { exec.kill({{"pid", streamed}}); }).code(), "not_found");
    EXPECT_TRUE(process_alive(from_stream));
    {
        std::lock_guard lock(events.mutex);
        EXPECT_FALSE(events.output_after_exit[streamed]);  // the late lines were dropped
    }
    for (pid_t pid : survivors) ::kill(pid, SIGKILL);
}

TEST(Exec, AStreamedCommandsTimeoutEndsItAndWhatItStarted) {
    Events events;
    ExecService exec(events.callbacks());
    // Still running at its deadline: the command and its children go together.
    pid_t pid = exec.run(
        {{"cmd", "sleep 100 & echo $!; sleep 100"}, {"stream", true}, {"timeout_s", 0.5}})["pid"];
    ASSERT_TRUE(events.wait_exit(pid));
    pid_t child = 0;
    {
        std::lock_guard lock(events.mutex);
        EXPECT_EQ(events.exits[pid], std::make_pair(128 + SIGKILL, SIGKILL));
        child = std::stoi(events.out[pid]);
    }
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (process_alive(child) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(10ms);
    EXPECT_FALSE(process_alive(child));
}

TEST(Exec, OnlyTheNewestLeftBehindPipesAreKeptOpen) {
    TempDir dir("deskbox-exec-test");
    std::size_t fds_before = open_fds();
    std::vector<pid_t> survivors;
    auto outcome = [&](const std::string& name) -> std::string {
        auto deadline = std::chrono::steady_clock::now() + 10s;
        while (std::chrono::steady_clock::now() < deadline) {
            for (const char* result : {"wrote", "failed"})
                if (std::filesystem::exists(dir.path() / (name + "." + result))) return result;
            std::this_thread::sleep_for(10ms);
        }
        return "nothing";
    };
    {
        ExecService exec({}, ExecLimits{.max_draining_pipes = 2});
        // Each survivor writes once its command is gone and notes whether the write worked
        // (SIGPIPE ignored, so a closed pipe is an error it can see).
        for (std::string name : {"oldest", "newest"}) {
            std::string mark = (dir.path() / name).string();
            json r = exec.run({{"cmd", "sh -c \"trap '' PIPE; sleep 0.5; if echo x; then touch " +
                                           mark + ".wrote; else touch " + mark +
                                           ".failed; fi; exec sleep 100\" & echo $!"},
                               {"timeout_s", 20}});
            survivors.push_back(std::stoi(r["stdout"].get<std::string>()));
        }
        // stdout and stderr of each: four pipes, two kept, the oldest two closed.
        EXPECT_EQ(outcome("oldest"), "failed");
        EXPECT_EQ(outcome("newest"), "wrote");
    }
    for (pid_t pid : survivors) ::kill(pid, SIGKILL);
    EXPECT_EQ(open_fds(), fds_before);  // the drained pipes went with the service
}

// SIGUSR1 at every other thread of this process, over and over, while it lives: each blocking
// call of the service (poll, read, write, waitpid) keeps being interrupted with EINTR.
class SignalStorm {
  public:
    SignalStorm() {
        struct sigaction action {};
        action.sa_handler = [](int) { delivered.fetch_add(1, std::memory_order_relaxed); };
        sigemptyset(&action.sa_mask);
        action.sa_flags = 0;  // no SA_RESTART
        ::sigaction(SIGUSR1, &action, nullptr);
        thread_ = std::thread([this] { blow(); });
    }
    ~SignalStorm() {
        stop_ = true;
        thread_.join();
        ::signal(SIGUSR1, SIG_IGN);  // drops the ones still pending (the default would kill)
    }
    static inline std::atomic<long> delivered{0};

  private:
    void blow() {
        const pid_t self = ::gettid();
        while (!stop_) {
            for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
                pid_t tid = std::stoi(task.path().filename());
                if (tid != self) ::tgkill(::getpid(), tid, SIGUSR1);
            }
            std::this_thread::sleep_for(100us);
        }
    }
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

TEST(Exec, ASignalStormLosesNothingOnEitherPath) {
    std::string numbers;
    for (int i = 1; i <= 100000; ++i) numbers += std::to_string(i) + "\n";  // ~590 KB
    std::string input(900'000, 'x');
    for (std::size_t i = 0; i < input.size(); i += 1000) input[i] = '\n';
    Events events;
    ExecService exec(events.callbacks(), ExecLimits{.max_output_bytes = 1 << 20});
    SignalStorm storm;

    // Foreground: a big output, a big stdin, and the cap.
    json counted = exec.run({{"argv", {"seq", "1", "100000"}}});
    EXPECT_TRUE(counted["stdout"] == numbers);
    EXPECT_FALSE(counted.contains("stdout_truncated"));
    json echoed = exec.run({{"argv", {"cat"}}}, input);
    EXPECT_TRUE(echoed["stdout"] == input);
    json capped = exec.run({{"cmd", "head -c 3000000 /dev/zero | tr '\\0' a"}});
    EXPECT_EQ(capped["stdout"].get<std::string>(), std::string(1 << 20, 'a'));
    EXPECT_EQ(capped["stdout_truncated"], true);
    EXPECT_EQ(capped["exit_code"], 0);

    // Streamed: the same output, and stdin fed in pieces.
    pid_t streamed = exec.run({{"argv", {"seq", "1", "100000"}}, {"stream", true}})["pid"];
    pid_t fed = exec.run({{"argv", {"cat"}}, {"stream", true}, {"stdin_open", true}})["pid"];
    for (std::size_t at = 0; at < input.size(); at += 100'000)
        exec.write_stdin(fed, std::string_view(input).substr(at, 100'000), false);
    exec.write_stdin(fed, "", true);
    ASSERT_TRUE(events.wait_exit(streamed));
    ASSERT_TRUE(events.wait_exit(fed));
    std::lock_guard lock(events.mutex);
    EXPECT_TRUE(events.out[streamed] == numbers) << events.out[streamed].size() << " bytes";
    EXPECT_TRUE(events.out[fed] == input) << events.out[fed].size() << " bytes";
    EXPECT_EQ(events.exits[streamed].first, 0);
    EXPECT_EQ(events.exits[fed].first, 0);
    EXPECT_GT(SignalStorm::delivered.load(), 100) << "the storm never reached the service";
}

}  // namespace
}  // namespace deskbox::services
