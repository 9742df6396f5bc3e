// windows.list: the desktop's top-level application windows. With an EWMH window manager
// (openbox) the WM's _NET_CLIENT_LIST is the truth; otherwise the root's children are walked
// for WM_STATE clients (under a reparenting WM) or named top-levels (no WM at all).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "guest-desktop/services/service_error.hpp"

namespace deskbox::x11 {
class XConnection;
}
namespace deskbox::services {

class WindowService {
  public:
    // Connects lazily, and again after the X server was restarted.
    explicit WindowService(std::string display_name);
    ~WindowService();
    WindowService(const WindowService&) = delete;
    WindowService& operator=(const WindowService&) = delete;

    // → {"windows":[{"id","title","class","instance","pid"?,"x","y","width","height",
    //     "frame"?:{"x","y","width","height"},"active","visible"}],"active":id|null}
    // x/y/width/height: the client area in root coordinates (inside any WM frame), so a click
    // at (x,y) lands in the application; "frame" is the outer rectangle when the WM reports
    // _NET_FRAME_EXTENTS. Throws ServiceError(unavailable) if the display is unreachable.
    nlohmann::json list(const nlohmann::json& params = nullptr);

  private:
    std::mutex mutex_;
    std::string display_name_;
    std::unique_ptr<x11::XConnection> connection_;
};

}  // namespace deskbox::services
