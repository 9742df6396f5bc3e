// The desktop session of a sandbox: Xvfb, a window manager and autostart apps, kept alive.
//
// start() brings up Xvfb (screen saver and DPMS off: a sandbox desktop must never blank), the
// window manager (DISPLAY set) and waits until it manages the screen (it takes in a probe
// window: holding SubstructureRedirect alone is not enough, see wm_takes_windows), then the
// autostart apps. A monitor thread watches the processes: a dead WM is restarted (within the
// restart policy), a dead Xvfb is restarted on the same display number so clients can
// reconnect, followed by the WM and the apps. Every state change goes to the callback:
//   starting → ready; ready → degraded (WM or X server died, restarting; or the WM gave up)
//   → ready again, or → failed (the X server could not be brought back; reason given).
// Every wait has a timeout. Destruction stops the apps, the WM and Xvfb, in that order.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deskbox::session {

enum class SessionState { starting, ready, degraded, failed };
const char* to_string(SessionState state);

struct RestartPolicy {
    int max_restarts = 5;  // per process kind (X server, WM) within `window`
    std::chrono::seconds window{60};
};

struct SessionOptions {
    int width = 1280;
    int height = 800;
    int depth = 24;
    int dpi = 96;
    bool glx = true;  // false: Xvfb without GLX (Mesa is not loaded)
    // nullopt: "openbox" if it is on PATH, else none; empty vector: no window manager.
    std::optional<std::vector<std::string>> window_manager;
    std::vector<std::vector<std::string>> autostart;  // argv of each app
    std::map<std::string, std::string> app_env;       // for the WM and apps, over ours
    RestartPolicy restart;
    std::chrono::milliseconds xvfb_start_timeout{10'000};
    std::chrono::milliseconds wm_ready_timeout{10'000};
    std::chrono::milliseconds monitor_interval{100};
    std::string log_dir;  // where wm.log and app-N.log go; empty: their output is discarded
};

using StateCallback = std::function<void(SessionState state, const std::string& reason)>;

class SessionSupervisor {
  public:
    // The callback runs on start()'s thread, then on the monitor thread; never concurrently.
    explicit SessionSupervisor(SessionOptions options, StateCallback on_state = {});
    ~SessionSupervisor();
    SessionSupervisor(const SessionSupervisor&) = delete;
    SessionSupervisor& operator=(const SessionSupervisor&) = delete;

    // Brings the session up (blocking, bounded by the timeouts) and starts monitoring.
    // Throws std::runtime_error (after reporting failed) if Xvfb cannot be started.
    void start();

    // {"display","screen":{"width","height"},"dpi","ready","wm","state","reason"?}
    nlohmann::json info() const;
    SessionState state() const;
    std::string display_name() const;  // ":N", stable across X server restarts
    // What clients need to reach the desktop: {"DISPLAY": ":N"}.
    std::map<std::string, std::string> client_env() const;

    // For diagnostics and tests; -1 when not running.
    pid_t xvfb_pid() const;
    pid_t wm_pid() const;
    std::vector<pid_t> app_pids() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace deskbox::session
