// accessibility.tree / .find / .act: the desktop's AT-SPI tree (GTK apps through at-spi2,
// Firefox with its accessibility on), read over D-Bus through libatspi.
//
// libatspi is opened (dlopen) on first use, so the agent runs in templates without it and
// answers "this template has no accessibility support". libatspi is not thread-safe and keeps
// its D-Bus connections on GLib's default main context, which must be iterated for its cache
// to follow the applications' change signals: one thread runs that main loop and every call
// into the library is a job run on it.
//
// Bounds are in screen pixels (the host maps them to API pixels). A node's "ref" is its D-Bus
// address, "<bus name><object path>": stable for the element's life, and the handle
// accessibility.act takes.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace deskbox::services {

class AccessibilityService {
  public:
    // The process owning the window X says has the focus (_NET_ACTIVE_WINDOW's _NET_WM_PID),
    // if known: AT-SPI's own "active" state can stay on a window that lost it (xfwm4's).
    using FocusedPid = std::function<std::optional<int>()>;

    AccessibilityService(std::string display_name, FocusedPid focused_pid);
    ~AccessibilityService();
    AccessibilityService(const AccessibilityService&) = delete;
    AccessibilityService& operator=(const AccessibilityService&) = delete;

    // {"scope": "focused"|"all", "app", "max_depth", "max_nodes", "visible_only"}
    // → {"windows": [node + "app", "pid"], "node_count", "truncated"}; node: {"ref", "role",
    // "name", "description"?, "states", "bounds"?, "actions"?, "value"?, "text"?, "children"}.
    nlohmann::json tree(const nlohmann::json& params);
    // {"role", "name", "name_match": "exact"|"substring"|"regex", "states", "scope", "app",
    // "max_results", "visible_only"} → {"matches": [node without children], "truncated"}.
    nlohmann::json find(const nlohmann::json& params);
    // {"ref", "action": "press"|"click"|"focus"|"set_value"|"select"|an action's name,
    // "value"} → {"ref", "action" (what ran), "node"}.
    nlohmann::json act(const nlohmann::json& params);

    class Engine;  // the libatspi side, on its loop thread

  private:
    // The engine, started on first use. Throws ServiceError(unavailable) without libatspi.
    Engine& engine();

    std::string display_name_;
    FocusedPid focused_pid_;
    std::mutex start_mutex_;
    std::unique_ptr<Engine> engine_;
};

}  // namespace deskbox::services
