// deskbox-agent's core: owns the desktop session and the services, and serves the agent
// channel (protocol/) one host connection at a time. Background processes, the session and
// the keymap survive a host reconnect; screen capture restarts with each connection so the
// new host gets a full frame first.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "guest-desktop/agent/agent_options.hpp"
#include "guest-desktop/agent/channel_endpoint.hpp"
#include "protocol/agent_methods.hpp"
#include "protocol/rpc.hpp"

namespace deskbox::session {
class SessionSupervisor;
}
namespace deskbox::services {
class ExecService;
class FileService;
class WindowService;
class ClipboardService;
class AccessibilityService;
}  // namespace deskbox::services
namespace deskbox::input {
class Injector;
}
namespace deskbox::capture {
class ScreenCapture;
}

namespace deskbox::agent {

class DesktopAgent {
  public:
    // Starts the session (or attaches to options.attach_display) and the services.
    // Throws std::runtime_error if the desktop cannot be brought up.
    explicit DesktopAgent(AgentOptions options);
    ~DesktopAgent();
    DesktopAgent(const DesktopAgent&) = delete;
    DesktopAgent& operator=(const DesktopAgent&) = delete;

    // Serves connections from `endpoint` until it has no more or shutdown() is called.
    void run(ChannelEndpoint& endpoint);
    // Serves one connection until it closes; returns why it closed.
    std::string serve(std::unique_ptr<protocol::Channel> channel);
    // Thread-safe: closes the current connection and makes run() return.
    void shutdown();

    const std::string& display_name() const { return display_; }
    nlohmann::json session_info() const;

  private:
    void emit(nlohmann::json header, std::string body = {});
    // One handler per method of protocol::agent_methods().
    void register_handlers(protocol::RpcServer& server, capture::ScreenCapture& capture);
    protocol::AgentRoutes screen_routes(capture::ScreenCapture& capture);  // and ping, session
    protocol::AgentRoutes service_routes();  // exec, files, windows, clipboard, ports, system,
                                           // accessibility

    AgentOptions options_;
    std::unique_ptr<session::SessionSupervisor> session_;
    std::string display_;
    // The attached display's screen as of starting (session_info without a session).
    int attached_width_ = 0;
    int attached_height_ = 0;
    std::unique_ptr<input::Injector> injector_;
    std::unique_ptr<services::ExecService> exec_;
    std::unique_ptr<services::FileService> files_;
    std::unique_ptr<services::WindowService> windows_;
    std::unique_ptr<services::ClipboardService> clipboard_;
    std::unique_ptr<services::AccessibilityService> accessibility_;

    std::mutex current_mutex_;
    protocol::RpcServer* current_ = nullptr;  // the connection events go to
    std::atomic<bool> shutting_down_{false};
    ChannelEndpoint* endpoint_ = nullptr;

    // For screen.sync's settle: when input last ended and when damage was last sent.
    std::atomic<std::int64_t> last_action_ns_{0};
    std::atomic<std::int64_t> last_damage_ns_{0};
};

}  // namespace deskbox::agent
