// "Ready means ready": POST /v1/sandboxes answers once the template's `ready` condition holds
// (docs/ARCHITECTURE.md, "Ready"), not merely once the agent sent its first frame.
//
// A condition is read from template.json's optional `ready` object or a create request's
// override (parse_ready_condition); wait_until_ready polls a ReadinessProbe until every named
// condition holds at once and then lets the screen settle. The probe is the only way the wait
// sees the sandbox or the time: AgentReadinessProbe asks a real agent (windows.list,
// net.listening, exec.run, screen.sync: the methods the /windows, /ports, /commands and
// screenshot routes use), tests give a fake with a clock of their own.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deskbox::server {

class AgentClient;

// What "ready" means for one sandbox.
struct ReadyCondition {
    bool wait = true;  // false: the request said "ready": false (answer after the first frame)
    std::optional<int> windows;           // at least this many mapped top-level windows
    bool windows_from_autostart = false;  // `windows` was "autostart" (said so in messages)
    std::string window_title;             // non-empty: a mapped window's title contains it
    std::optional<int> port;              // a TCP socket listens on this port in the sandbox
    std::vector<std::string> command;     // non-empty: run as the desktop user, exits 0
    std::chrono::milliseconds timeout{60'000};
    std::chrono::milliseconds settle{300};  // then no damage (nor input) for this long
    bool settle_named = false;              // settle_ms was given: settle even with nothing else

    // Whether anything is waited for beyond the first frame (windows 0 and nothing else named
    // with no settle_ms: nothing).
    bool waits() const;
    // The condition as resolved ("autostart" as its number), for the audit log and tests.
    nlohmann::json to_json() const;
};

// Limits of the `ready` fields (images/template_ready.py has the same).
inline constexpr int kMaxReadyWindows = 64;
inline constexpr int kMaxReadyTimeoutS = 600;
inline constexpr int kMaxReadySettleMs = 5000;

// A template without `ready`: {"windows": "autostart"}, i.e. as many mapped windows as the
// template's session.autostart has entries (none: nothing to wait for beyond the first frame).
ReadyCondition default_ready_condition(std::size_t autostart_entries);

// Reads a `ready` object strictly: unknown fields, wrong types and values out of range are
// SandboxError (invalid) naming `field` + ".name" (`field`: "ready" in a request; the caller
// re-labels a template's). `autostart_entries` resolves "windows": "autostart".
ReadyCondition parse_ready_condition(const nlohmann::json& ready, const std::string& field,
                                     std::size_t autostart_entries);

// A look that failed but may succeed later (the agent refused or timed out): the wait goes on
// and names it if it ends unmet. Any other exception a probe throws ends the wait at once (the
// agent is gone, the sandbox died).
class ProbeError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// What wait_until_ready asks of the sandbox and of the time.
class ReadinessProbe {
  public:
    using Clock = std::chrono::steady_clock;
    struct Window {
        std::string title;
        std::string window_class;
    };
    struct CommandResult {
        int exit_code = 0;
        bool timed_out = false;
        std::string stderr_text;
    };
    virtual ~ReadinessProbe() = default;
    virtual Clock::time_point now() = 0;
    virtual void sleep_until(Clock::time_point when) = 0;
    // The desktop's mapped top-level windows (windows.list entries that are visible).
    virtual std::vector<Window> mapped_windows() = 0;
    // TCP ports something listens on in the sandbox.
    virtual std::vector<int> listening_ports() = 0;
    // Runs argv in the sandbox as the desktop user, for at most `limit`.
    virtual CommandResult run(const std::vector<std::string>& argv,
                              std::chrono::milliseconds limit) = 0;
    // True once neither damage nor input happened on the screen for `quiet`; false if that
    // did not happen within `limit`.
    virtual bool settle(std::chrono::milliseconds quiet, std::chrono::milliseconds limit) = 0;
};

struct ReadyOutcome {
    bool ready = false;
    std::chrono::milliseconds waited{0};
    // Unmet: each condition that did not hold, e.g. `2 autostart windows expected, 1 mapped
    // after 60 s: ["xterm"]` or `command ["pgrep","xclock"] still exits 1 after 60 s`.
    std::string unmet;
};

// Polls `probe` every 100 ms (200 ms when a command is named) until every named condition
// holds in one round, then waits for the screen to settle, all within condition.timeout.
ReadyOutcome wait_until_ready(const ReadyCondition& condition, ReadinessProbe& probe);

// A probe on a real agent. An agent error or a late answer may change (ProbeError); an agent
// that is gone (SandboxError, unavailable), or a sandbox `running` says is no longer running, never
// will: those SandboxErrors end the wait. Time is the steady clock.
class AgentReadinessProbe : public ReadinessProbe {
  public:
    explicit AgentReadinessProbe(AgentClient& agent, std::function<bool()> running = {})
        : agent_(agent), running_(std::move(running)) {}
    Clock::time_point now() override { return Clock::now(); }
    void sleep_until(Clock::time_point when) override;
    std::vector<Window> mapped_windows() override;
    std::vector<int> listening_ports() override;
    CommandResult run(const std::vector<std::string>& argv,
                      std::chrono::milliseconds limit) override;
    bool settle(std::chrono::milliseconds quiet, std::chrono::milliseconds limit) override;

  private:
    // `ask`'s answer; its SandboxError as ProbeError unless the wait must end.
    template <typename Ask>
    auto asked(Ask ask);

    AgentClient& agent_;
    std::function<bool()> running_;
};

}  // namespace deskbox::server
