#include "guest-desktop/agent/desktop_agent.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <thread>

#include "guest-desktop/agent/input_actions.hpp"
#include "guest-desktop/capture/capture_engine.hpp"
#include "guest-desktop/capture/settle.hpp"
#include "guest-desktop/services/accessibility_service.hpp"
#include "guest-desktop/services/clipboard_service.hpp"
#include "guest-desktop/services/exec_service.hpp"
#include "guest-desktop/services/file_service.hpp"
#include "guest-desktop/services/port_service.hpp"
#include "guest-desktop/services/process_sweep.hpp"
#include "guest-desktop/services/system_service.hpp"
#include "guest-desktop/services/window_service.hpp"
#include "guest-desktop/session/session_supervisor.hpp"
#include "input/x11/xtest_injector.hpp"
#include "protocol/agent_methods.hpp"
#include "x11/connection.hpp"
#include "x11/error_trap.hpp"

namespace deskbox::agent {
namespace {

using protocol::Reply;
using protocol::Request;
using protocol::RpcError;
using Clock = std::chrono::steady_clock;

std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
}

// Handlers throw the services' own error types; the channel speaks RpcError.
template <typename Fn>
protocol::RpcServer::Handler translated(Fn fn) {
    return [fn = std::move(fn)](const Request& request) -> Reply {
        try {
            return fn(request);
        } catch (const RpcError&) {
            throw;
        } catch (const services::ServiceError& e) {
            throw RpcError(e.code(), e.what(), e.field());
        } catch (const input::ActionError& e) {
            throw RpcError("invalid_action", e.what(), e.field());
        } catch (const capture::CaptureError& e) {
            throw RpcError("capture_failed", e.what());
        }
    };
}

Reply json_reply(nlohmann::json result) {
    return Reply{std::move(result), {}};
}

int int_param(const nlohmann::json& params, const char* name, int fallback, int min, int max) {
    if (!params.contains(name)) return fallback;
    const auto& v = params[name];
    if (!v.is_number_integer())
        throw RpcError("bad_request", std::string(name) + ": expected an integer", name);
    auto value = v.get<long long>();
    if (value < min || value > max)
        throw RpcError(
            "bad_request",
            std::string(name) + ": must be in " + std::to_string(min) + ".." + std::to_string(max),
            name);
    return static_cast<int>(value);
}

}  // namespace

DesktopAgent::DesktopAgent(AgentOptions options) : options_(std::move(options)) {
    // Before any other Xlib call: the one X error handler of the process (traps, else "log and
    // go on") and thread support.
    x11::install_error_handlers();

    std::map<std::string, std::string> client_env;
    if (options_.attach_display) {
        display_ = *options_.attach_display;
        client_env["DISPLAY"] = display_;
        const x11::XConnection probe(display_);
        attached_width_ = DisplayWidth(probe.get(), DefaultScreen(probe.get()));
        attached_height_ = DisplayHeight(probe.get(), DefaultScreen(probe.get()));
    } else {
        session::SessionOptions so;
        so.width = options_.width;
        so.height = options_.height;
        so.dpi = options_.dpi;
        so.glx = options_.glx;
        so.window_manager = options_.window_manager;
        so.autostart = options_.autostart;
        so.app_env = options_.app_env;
        so.log_dir = options_.log_dir;
        session_ = std::make_unique<session::SessionSupervisor>(
            so, [this](session::SessionState state, const std::string& reason) {
                nlohmann::json header = {{"event", "session.state"},
                                         {"state", session::to_string(state)}};
                if (!reason.empty()) header["reason"] = reason;
                emit(std::move(header));
            });
        session_->start();
        display_ = session_->display_name();
        client_env = session_->client_env();
    }
    for (const auto& [k, v] : options_.app_env) client_env.emplace(k, v);

    injector_ = std::make_unique<input::XTestInjector>(display_);

    services::ExecCallbacks exec_callbacks;
    exec_callbacks.on_output = [this](pid_t pid, std::string_view stream, std::string_view bytes) {
        emit({{"event", "process.output"}, {"pid", pid}, {"stream", stream}}, std::string(bytes));
    };
    exec_callbacks.on_exit = [this](pid_t pid, int exit_code, int signal) {
        nlohmann::json header = {{"event", "process.exit"}, {"pid", pid}, {"exit_code", exit_code}};
        if (signal) header["signal"] = signal;
        emit(std::move(header));
    };
    // Output and clipboard text travel in the JSON header, which the protocol caps at 1 MiB.
    services::ExecLimits exec_limits;
    exec_limits.max_output_bytes = 256 << 10;
    exec_ = std::make_unique<services::ExecService>(exec_callbacks, exec_limits, client_env);
    files_ = std::make_unique<services::FileService>();
    windows_ = std::make_unique<services::WindowService>(display_);
    services::ClipboardOptions clipboard_options;
    clipboard_options.max_bytes = 512 << 10;
    clipboard_ = std::make_unique<services::ClipboardService>(display_, clipboard_options);
    // libatspi is opened on the first accessibility call, not here: most templates lack it.
    accessibility_ =
        std::make_unique<services::AccessibilityService>(display_, [this]() -> std::optional<int> {
            try {
                const nlohmann::json listed = windows_->list();
                for (const auto& window : listed.value("windows", nlohmann::json::array()))
                    if (window["id"] == listed["active"] && window.contains("pid"))
                        return window["pid"].get<int>();
            } catch (const std::exception&) {
                // No display or no window manager's word: AT-SPI's own states decide.
            }
            return std::nullopt;
        });
}

DesktopAgent::~DesktopAgent() {
    shutdown();
    // Members go in reverse order: services, injector (restores the keymap), then the session.
}

nlohmann::json DesktopAgent::session_info() const {
    if (session_) return session_->info();
    return {{"display", display_},
            {"screen", {{"width", attached_width_}, {"height", attached_height_}}},
            {"dpi", options_.dpi},
            {"ready", true},
            {"wm", false},
            {"attached", true}};
}

void DesktopAgent::emit(nlohmann::json header, std::string body) {
    std::lock_guard lock(current_mutex_);
    if (!current_) return;  // no host connected: events have nowhere to go
    try {
        current_->send_event(std::move(header), std::move(body));
    } catch (const protocol::ProtocolError&) {
        // The connection is going away; serve() notices and cleans up.
    }
}

void DesktopAgent::shutdown() {
    shutting_down_ = true;
    std::lock_guard lock(current_mutex_);
    if (current_) current_->close();
    if (endpoint_) endpoint_->interrupt();
}

void DesktopAgent::run(ChannelEndpoint& endpoint) {
    {
        std::lock_guard lock(current_mutex_);
        endpoint_ = &endpoint;
    }
    // A virtio-serial port with no host attached "closes" every 100 ms: say a repeated reason
    // once, then at most every 10 s with a count, so the console keeps its boot lines.
    std::string last_reason;
    int repeats = 0;
    Clock::time_point last_logged{};
    while (!shutting_down_) {
        auto channel = endpoint.next();
        if (!channel) break;
        auto started = Clock::now();
        std::string reason = serve(std::move(channel));
        if (reason != last_reason || Clock::now() - last_logged > std::chrono::seconds(10)) {
            if (repeats > 0)
                std::fprintf(stderr, "deskbox-agent: (%d more closed the same way)\n", repeats);
            std::fprintf(stderr, "deskbox-agent: connection closed: %s\n", reason.c_str());
            last_reason = reason;
            last_logged = Clock::now();
            repeats = 0;
        } else {
            ++repeats;
        }
        if (options_.once) break;
        // A character device reads EOF while no host is attached; don't spin on it.
        if (Clock::now() - started < std::chrono::milliseconds(200))
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::lock_guard lock(current_mutex_);
    endpoint_ = nullptr;
}

std::string DesktopAgent::serve(std::unique_ptr<protocol::Channel> channel) {
    nlohmann::json info = session_info();
    try {
        protocol::handshake(*channel, "agent",
                            {{"display", display_},
                             {"screen", info["screen"]},
                             {"pid", ::getpid()},
                             {"agent", "deskbox-agent 0.1"}});
    } catch (const protocol::ProtocolError& e) {
        return std::string("handshake failed: ") + e.what();
    }

    capture::CaptureOptions capture_options;
    capture_options.max_fps = options_.max_fps;
    capture::CaptureEngine capture(display_, capture_options);
    capture::CaptureCallbacks callbacks;
    callbacks.on_damage = [this](capture::DamageRect&& rect) {
        last_damage_ns_ = now_ns();
        emit({{"event", "damage"},
              {"seq", rect.seq},
              {"x", rect.x},
              {"y", rect.y},
              {"width", rect.width},
              {"height", rect.height},
              {"format", "bgrx"}},
             std::move(rect.pixels));
    };
    callbacks.on_cursor_shape = [this](capture::CursorImage&& cursor) {
        emit({{"event", "cursor.shape"},
              {"width", cursor.width},
              {"height", cursor.height},
              {"xhot", cursor.xhot},
              {"yhot", cursor.yhot},
              {"serial", cursor.serial}},
             std::move(cursor.pixels));
    };
    callbacks.on_cursor_position = [this](capture::CursorPosition p) {
        emit({{"event", "cursor.position"}, {"x", p.x}, {"y", p.y}});
    };
    callbacks.on_error = [](const std::string& message) {
        std::fprintf(stderr, "deskbox-agent: capture: %s\n", message.c_str());
    };
    capture.set_callbacks(std::move(callbacks));

    // Many handlers at once: long commands (each holds one until it ends) must not hold up
    // the next request; threads count against the sandbox's pids limit, not much else.
    protocol::RpcServerOptions rpc_options;
    rpc_options.max_workers = 64;
    protocol::RpcServer server(std::move(channel), rpc_options);
    register_handlers(server, capture);
    {
        std::lock_guard lock(current_mutex_);
        if (shutting_down_) return "shutting down";
        current_ = &server;
    }
    // Capture first: the host syncs the screen right after the handshake, and a request read
    // before the engine runs would be refused ("the capture engine is not running"). The
    // first full frame goes out at once either way (events need no started server).
    capture.start();
    server.start();
    std::string reason = server.wait();
    {
        std::lock_guard lock(current_mutex_);
        current_ = nullptr;
    }
    capture.stop();
    return reason;
}

void DesktopAgent::register_handlers(protocol::RpcServer& server, capture::ScreenCapture& capture) {
    protocol::AgentRoutes routes = screen_routes(capture);
    routes.merge(service_routes());
    protocol::serve_agent_methods(server, std::move(routes));
}

protocol::AgentRoutes DesktopAgent::screen_routes(capture::ScreenCapture& capture) {
    using protocol::AgentMethod;
    using protocol::Dispatch;
    protocol::AgentRoutes routes;
    routes[AgentMethod::ping] = {
        [](const Request&) { return json_reply(nlohmann::json::object()); }};
    routes[AgentMethod::session_info] = {
        [this](const Request&) { return json_reply(session_info()); }};

    // Input and screen syncs share the serial lane, so a sync always follows the actions
    // sent before it.
    routes[AgentMethod::input_actions] = {
        translated([this, &capture](const Request& request) {
            const input::Size screen{capture.width(), capture.height()};
            return json_reply(run_input_actions(*injector_, request.params, screen,
                                                [this] { last_action_ns_ = now_ns(); }));
        }),
        Dispatch::serial};

    routes[AgentMethod::screen_sync] = {
        translated([this, &capture](const Request& request) {
            const std::chrono::milliseconds settle(
                int_param(request.params, "settle_ms", 0, 0, 5000));
            const std::chrono::milliseconds max_wait(
                int_param(request.params, "max_ms", 1000, 0, 30000));
            auto last_activity = [this] {
                return Clock::time_point(std::chrono::nanoseconds(
                    std::max(last_action_ns_.load(), last_damage_ns_.load())));
            };
            auto result = capture::sync_and_settle(capture, last_activity, settle, max_wait);
            return json_reply({{"seq", result.seq}, {"settled", result.settled}});
        }),
        Dispatch::serial};
    routes[AgentMethod::screen_full] = {translated([&capture](const Request&) {
                                            return json_reply({{"seq", capture.full_frame()}});
                                        }),
                                        Dispatch::serial};
    routes[AgentMethod::capture_configure] = {translated([&capture](const Request& request) {
        if (request.params.contains("max_fps"))
            capture.set_max_fps(int_param(request.params, "max_fps", 30, 1, 240));
        return json_reply(nlohmann::json::object());
    })};
    routes[AgentMethod::cursor_get] = {translated([this](const Request&) {
                                           auto p = injector_->cursor_position();
                                           return json_reply({{"x", p.x}, {"y", p.y}});
                                       }),
                                       Dispatch::serial};
    return routes;
}

protocol::AgentRoutes DesktopAgent::service_routes() {
    using protocol::AgentMethod;
    protocol::AgentRoutes routes;
    // A service call: its params (and body) in, a JSON result out.
    auto service = [&routes](AgentMethod method, auto fn) {
        routes[method] = {
            translated([fn = std::move(fn)](const Request& r) { return json_reply(fn(r)); })};
    };
    service(AgentMethod::exec_run,
            [this](const Request& r) { return exec_->run(r.params, r.body); });
    service(AgentMethod::exec_kill, [this](const Request& r) { return exec_->kill(r.params); });
    service(AgentMethod::exec_stdin,
            [this](const Request& r) { return exec_->write_stdin(r.params, r.body); });
    service(AgentMethod::exec_list, [this](const Request&) { return exec_->list(); });

    routes[AgentMethod::files_read] = {translated([this](const Request& r) {
        auto reply = files_->read(r.params);
        return Reply{std::move(reply.result), std::move(reply.body)};
    })};
    service(AgentMethod::files_write,
            [this](const Request& r) { return files_->write(r.params, r.body); });
    service(AgentMethod::files_list, [this](const Request& r) { return files_->list(r.params); });
    service(AgentMethod::files_mkdir, [this](const Request& r) { return files_->mkdir(r.params); });
    service(AgentMethod::files_remove,
            [this](const Request& r) { return files_->remove(r.params); });
    service(AgentMethod::files_stat, [this](const Request& r) { return files_->stat(r.params); });

    service(AgentMethod::windows_list,
            [this](const Request& r) { return windows_->list(r.params); });
    service(AgentMethod::clipboard_get,
            [this](const Request& r) { return clipboard_->get(r.params); });
    service(AgentMethod::clipboard_set,
            [this](const Request& r) { return clipboard_->set(r.params); });

    // Ports programs listen on (exposed ports, inspect).
    service(AgentMethod::net_listening,
            [](const Request&) { return services::PortService().listening(); });

    // Everything but the desktop session (this agent, its init, the X server, the window
    // manager): a sandbox at its process or memory limit comes back without a re-create.
    service(AgentMethod::processes_kill, [this](const Request&) {
        std::set<pid_t> keep = {::getpid()};
        if (session_) {
            for (pid_t p : {session_->xvfb_pid(), session_->wm_pid()})
                if (p > 0) keep.insert(p);
        }
        // As the child of the sandbox's init, the whole pid namespace or VM.
        pid_t root = ::getppid() == 1 ? 1 : ::getpid();
        auto swept = services::kill_processes_under(root, keep);
        return nlohmann::json{
            {"killed", swept.killed}, {"refused", swept.refused}, {"rounds", swept.rounds}};
    });

    service(AgentMethod::accessibility_tree,
            [this](const Request& r) { return accessibility_->tree(r.params); });
    service(AgentMethod::accessibility_find,
            [this](const Request& r) { return accessibility_->find(r.params); });
    service(AgentMethod::accessibility_act,
            [this](const Request& r) { return accessibility_->act(r.params); });

    // After a restore from a shared memory snapshot: fresh hostname, clock and randomness.
    service(AgentMethod::system_identity,
            [](const Request& r) { return services::SystemService().identity(r.params); });
    return routes;
}

}  // namespace deskbox::agent
