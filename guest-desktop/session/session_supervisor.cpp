#include "guest-desktop/session/session_supervisor.hpp"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/child_process.hpp"
#include "guest-desktop/xvfb_server.hpp"
#include "x11/connection.hpp"
#include "x11/properties.hpp"

namespace deskbox::session {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* to_string(SessionState state) {
    switch (state) {
        case SessionState::starting:
            return "starting";
        case SessionState::ready:
            return "ready";
        case SessionState::degraded:
            return "degraded";
        case SessionState::failed:
            return "failed";
    }
    return "unknown";
}

namespace {

bool on_path(const std::string& program) {
    const char* path = std::getenv("PATH");
    std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
        if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
    }
    return false;
}

std::string describe_exit(const std::optional<ExitStatus>& status) {
    if (!status) return "unknown status";
    if (status->signal) return "killed by signal " + std::to_string(status->signal);
    return "exit code " + std::to_string(status->exit_code);
}

// Whether a window manager handles map requests now. Holding SubstructureRedirect on the root
// is not enough: openbox selects it early in its startup and then drops the MapRequests that
// arrive before its event loop runs, so an app started at that moment never appears. The
// proof is a probe window that the WM actually takes in (reparents or gives WM_STATE); the
// probe is mapped again every round because an early MapRequest may be dropped.
// `conn` must stay open while the session lives: the WM may still be handling the destroyed
// probe when another client would get the same window id if this connection closed.
bool wm_takes_windows(x11::XConnection* conn, const std::function<bool()>& keep_waiting,
                      Clock::time_point deadline) {
    if (!conn) return false;
    Display* d = conn->get();
    Window root = DefaultRootWindow(d);
    Atom wm_state = conn->atoms().intern_one("WM_STATE");
    Window probe = None;
    bool managed = false;
    while (!conn->broken() && keep_waiting()) {
        XWindowAttributes root_attrs{};
        bool redirected = XGetWindowAttributes(d, root, &root_attrs) &&
                          (root_attrs.all_event_masks & SubstructureRedirectMask);
        if (redirected) {
            if (probe == None) {
                probe = XCreateSimpleWindow(d, root, 0, 0, 1, 1, 0, 0, 0);
                XStoreName(d, probe, "deskbox window manager probe");
            }
            Window root_return, parent = None, *children = nullptr;
            unsigned int count = 0;
            if (XQueryTree(d, probe, &root_return, &parent, &children, &count) && children)
                XFree(children);
            managed = (parent != None && parent != root) ||
                      x11::get_property(d, probe, wm_state).has_value();
            if (managed || conn->broken()) break;
            XMapWindow(d, probe);
            XSync(d, False);
        }
        if (Clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(redirected ? 100 : 25));
    }
    if (probe != None && !conn->broken()) {
        XDestroyWindow(d, probe);
        XSync(d, False);
    }
    return managed && !conn->broken();
}

}  // namespace

struct SessionSupervisor::Impl {
    SessionOptions options;
    StateCallback on_state;
    std::vector<std::string> wm_argv;

    // Touched by start() and then only by the monitor thread (and the destructor after it).
    std::unique_ptr<desktop::XvfbServer> xvfb;
    ChildProcess wm;
    bool wm_started = false;
    bool wm_gave_up = false;
    std::vector<ChildProcess> apps;
    std::deque<Clock::time_point> xvfb_restarts, wm_restarts;
    int display_number = -1;
    std::unique_ptr<x11::XConnection> probe_connection;  // see wm_takes_windows

    // What other threads may read.
    mutable std::mutex mutex;
    SessionState state = SessionState::starting;
    std::string reason;
    std::string display;
    bool wm_managing = false;
    pid_t xvfb_pid = -1, wm_pid = -1;
    std::vector<pid_t> app_pids;

    std::thread monitor;
    std::mutex stop_mutex;
    std::condition_variable stop_cv;
    std::atomic<bool> stopping{false};
    bool reported_once = false;

    void set_state(SessionState s, const std::string& why) {
        {
            std::lock_guard lock(mutex);
            if (reported_once && state == s && reason == why) return;
            state = s;
            reason = why;
            reported_once = true;
        }
        if (on_state) on_state(s, why);
    }

    void publish() {
        std::lock_guard lock(mutex);
        xvfb_pid = xvfb ? xvfb->process().pid() : -1;
        wm_pid = wm_started ? wm.pid() : -1;
        app_pids.clear();
        for (auto& a : apps) app_pids.push_back(a.pid());
    }

    void set_wm_managing(bool managing) {
        std::lock_guard lock(mutex);
        wm_managing = managing;
    }

    bool sleep_unless_stopping(std::chrono::milliseconds d) {
        std::unique_lock lock(stop_mutex);
        return !stop_cv.wait_for(lock, d, [&] { return stopping.load(); });
    }

    std::map<std::string, std::string> child_env() const {
        auto env = options.app_env;
        env["DISPLAY"] = ":" + std::to_string(display_number);
        return env;
    }

    SpawnOptions spawn_options(const std::vector<std::string>& argv, const std::string& log) {
        SpawnOptions o;
        o.argv = argv;
        o.env_overrides = child_env();
        if (!options.log_dir.empty()) {
            o.stdout_file = options.log_dir + "/" + log;
            o.stderr_file = o.stdout_file;
        } else {
            o.stdout_to_null = true;
            o.stderr_to_null = true;
        }
        return o;
    }

    // Starts Xvfb; after the first start always on the same display number.
    bool start_xvfb(std::string* error) {
        desktop::XvfbOptions xo;
        xo.width = options.width;
        xo.height = options.height;
        xo.depth = options.depth;
        xo.dpi = options.dpi;
        xo.start_timeout = options.xvfb_start_timeout;
        // Screen saver off (-s 0) and DPMS off: nothing may ever blank the desktop.
        xo.extra_args = {"-s", "0", "-dpms"};
        if (!options.glx) xo.extra_args.insert(xo.extra_args.end(), {"-extension", "GLX"});
        if (display_number >= 0) xo.extra_args.push_back(":" + std::to_string(display_number));
        try {
            xvfb = std::make_unique<desktop::XvfbServer>(xo);
        } catch (const std::exception& e) {
            *error = e.what();
            return false;
        }
        display_number = xvfb->display_number();
        {
            std::lock_guard lock(mutex);
            display = xvfb->display_name();
        }
        publish();
        return true;
    }

    void stop_apps() {
        for (auto& a : apps) a.terminate(std::chrono::milliseconds(500));
        apps.clear();
        publish();
    }

    void stop_wm() {
        if (wm_started) wm.terminate(std::chrono::milliseconds(1000));
        wm = ChildProcess();
        wm_started = false;
        set_wm_managing(false);
        publish();
    }

    void stop_xvfb() {
        probe_connection.reset();
        xvfb.reset();
        publish();
    }

    // Spawns the WM and waits until it manages the screen. Returns "" or why not.
    std::string start_wm() {
        try {
            wm = ChildProcess::spawn(spawn_options(wm_argv, "wm.log"));
            wm_started = true;
        } catch (const std::exception& e) {
            wm_gave_up = true;
            return std::string("cannot start window manager: ") + e.what();
        }
        publish();
        auto deadline = Clock::now() + options.wm_ready_timeout;
        std::string problem;
        auto keep_waiting = [&] {
            if (stopping)
                problem = "stopping";
            else if (!wm.running())
                problem = "window manager exited at start (" + describe_exit(wm.status()) + ")";
            else if (!xvfb->running())
                problem = "X server exited";
            return problem.empty();
        };
        if (wm_takes_windows(connect_probe(), keep_waiting, deadline)) {
            set_wm_managing(true);
            return "";
        }
        if (!problem.empty()) return problem;
        return "window manager did not manage the screen within " +
               std::to_string(options.wm_ready_timeout.count()) + " ms";
    }

    x11::XConnection* connect_probe() {
        if (probe_connection && probe_connection->broken()) probe_connection.reset();
        if (!probe_connection) {
            try {
                probe_connection =
                    std::make_unique<x11::XConnection>(":" + std::to_string(display_number));
            } catch (const x11::XConnectionError&) {
                return nullptr;
            }
        }
        return probe_connection.get();
    }

    std::string start_apps() {
        std::string errors;
        for (std::size_t i = 0; i < options.autostart.size(); ++i) {
            try {
                apps.push_back(ChildProcess::spawn(
                    spawn_options(options.autostart[i], "app-" + std::to_string(i) + ".log")));
            } catch (const std::exception& e) {
                errors += (errors.empty() ? "" : "; ") + std::string("autostart[") +
                          std::to_string(i) + "]: " + e.what();
            }
        }
        publish();
        return errors;
    }

    bool allow_restart(std::deque<Clock::time_point>& history) {
        auto now = Clock::now();
        while (!history.empty() && now - history.front() > options.restart.window)
            history.pop_front();
        if (static_cast<int>(history.size()) >= options.restart.max_restarts) return false;
        history.push_back(now);
        return true;
    }

    // WM (if any) and apps on a running X server; reports ready or degraded.
    void bring_up_clients() {
        std::string problem;
        if (!wm_argv.empty() && !wm_gave_up) problem = start_wm();
        if (stopping) return;
        std::string app_errors = start_apps();
        if (!problem.empty()) {
            set_state(SessionState::degraded, problem);
        } else {
            set_state(SessionState::ready, app_errors);
        }
    }

    void on_wm_exit() {
        std::string why = "window manager exited (" + describe_exit(wm.status()) + ")";
        stop_wm();
        if (!allow_restart(wm_restarts)) {
            wm_gave_up = true;
            set_state(SessionState::degraded,
                      why + " " + std::to_string(options.restart.max_restarts) + " times within " +
                          std::to_string(options.restart.window.count()) +
                          " s; running without one");
            return;
        }
        set_state(SessionState::degraded, why + "; restarting it");
        std::string problem = start_wm();
        if (stopping) return;
        if (problem.empty())
            set_state(SessionState::ready, "");
        else
            set_state(SessionState::degraded, problem);
    }

    void on_xvfb_exit() {
        std::string why = "X server exited (" + describe_exit(xvfb->process().status()) + ")";
        // Its clients lost their connection; stop what is left of them before restarting.
        stop_apps();
        stop_wm();
        stop_xvfb();
        if (!allow_restart(xvfb_restarts)) {
            set_state(SessionState::failed,
                      why + "; it died " + std::to_string(options.restart.max_restarts) +
                          " times within " + std::to_string(options.restart.window.count()) +
                          " s, giving up");
            return;
        }
        std::string display_name = ":" + std::to_string(display_number);
        set_state(SessionState::degraded, why + "; restarting it on " + display_name);
        std::string error;
        // Tries for a few seconds: the old server's socket and lock may take a moment to be
        // released, longer on a loaded machine (three quick tries were not always enough).
        const auto give_up_at = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (!stopping) {
            if (start_xvfb(&error)) break;
            if (std::chrono::steady_clock::now() >= give_up_at) break;
            sleep_unless_stopping(std::chrono::milliseconds(200));
        }
        if (stopping) return;
        if (!xvfb) {
            set_state(SessionState::failed,
                      why + "; could not restart it on " + display_name + ": " + error);
            return;
        }
        bring_up_clients();
    }

    bool x_server_answers() {
        try {
            x11::XConnection conn(":" + std::to_string(display_number));
            XSync(conn.get(), False);
            return !conn.broken();
        } catch (const x11::XConnectionError&) {
            return false;
        }
    }

    void monitor_loop() {
        while (sleep_unless_stopping(options.monitor_interval)) {
            if (!xvfb) continue;  // failed: nothing left to watch
            if (!xvfb->running()) {
                on_xvfb_exit();
                continue;
            }
            if (wm_started && !wm.running()) {
                // A WM usually dies because the X server did: then restart the server first.
                if (!x_server_answers()) {
                    xvfb->process().wait(std::chrono::seconds(2));
                    if (!xvfb->running()) {
                        on_xvfb_exit();
                        continue;
                    }
                }
                on_wm_exit();
                continue;
            }
            bool managing;
            {
                std::lock_guard lock(mutex);
                managing = wm_managing;
            }
            // A WM that was slow to start may come up later.
            if (wm_started && !managing &&
                wm_takes_windows(
                    connect_probe(), [&] { return !stopping.load(); },
                    Clock::now() + std::chrono::milliseconds(300))) {
                set_wm_managing(true);
                set_state(SessionState::ready, "");
            }
            // Reap apps that exited (they are not restarted: exiting can be what they do).
            bool changed = false;
            for (auto it = apps.begin(); it != apps.end();) {
                if (!it->running()) {
                    it = apps.erase(it);
                    changed = true;
                } else {
                    ++it;
                }
            }
            if (changed) publish();
        }
    }
};

SessionSupervisor::SessionSupervisor(SessionOptions options, StateCallback on_state)
    : impl_(std::make_unique<Impl>()) {
    impl_->options = std::move(options);
    impl_->on_state = std::move(on_state);
    if (impl_->options.window_manager)
        impl_->wm_argv = *impl_->options.window_manager;
    else if (on_path("openbox"))
        impl_->wm_argv = {"openbox"};
}

SessionSupervisor::~SessionSupervisor() {
    Impl& s = *impl_;
    {
        std::lock_guard lock(s.stop_mutex);
        s.stopping = true;
    }
    s.stop_cv.notify_all();
    if (s.monitor.joinable()) s.monitor.join();
    s.stop_apps();
    s.stop_wm();
    s.stop_xvfb();
}

void SessionSupervisor::start() {
    Impl& s = *impl_;
    if (s.monitor.joinable() || s.xvfb) throw std::logic_error("SessionSupervisor started twice");
    s.set_state(SessionState::starting, "");
    std::string error;
    if (!s.start_xvfb(&error)) {
        s.set_state(SessionState::failed, "cannot start the X server: " + error);
        throw std::runtime_error("cannot start the X server: " + error);
    }
    s.bring_up_clients();
    s.monitor = std::thread([&s] { s.monitor_loop(); });
}

json SessionSupervisor::info() const {
    const Impl& s = *impl_;
    std::lock_guard lock(s.mutex);
    json j = {{"display", s.display},
              {"screen", {{"width", s.options.width}, {"height", s.options.height}}},
              {"dpi", s.options.dpi},
              {"ready", s.state == SessionState::ready},
              {"wm", s.wm_managing},
              {"state", to_string(s.state)}};
    if (!s.reason.empty()) j["reason"] = s.reason;
    return j;
}

SessionState SessionSupervisor::state() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->state;
}

std::string SessionSupervisor::display_name() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->display;
}

std::map<std::string, std::string> SessionSupervisor::client_env() const {
    return {{"DISPLAY", display_name()}};
}

pid_t SessionSupervisor::xvfb_pid() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->xvfb_pid;
}

pid_t SessionSupervisor::wm_pid() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->wm_pid;
}

std::vector<pid_t> SessionSupervisor::app_pids() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->app_pids;
}

}  // namespace deskbox::session
