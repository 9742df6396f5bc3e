// One Xvfb server owned by this process: started with -displayfd so we learn the display
// number without racing other servers, killed and reaped on destruction.
#pragma once

#include <X11/Xlib.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/child_process.hpp"

namespace deskbox::desktop {

struct XvfbOptions {
    int width = 1280;
    int height = 800;
    int depth = 24;
    int dpi = 96;
    std::vector<std::string> extra_args;
    std::chrono::milliseconds start_timeout{10'000};
    std::string log_file;  // Xvfb's stderr; empty: a temp file removed with the server
};

struct DisplayCloser {
    void operator()(Display* d) const {
        if (d) XCloseDisplay(d);
    }
};
using DisplayPtr = std::unique_ptr<Display, DisplayCloser>;

class XvfbServer {
  public:
    // Starts Xvfb and waits until it accepts connections. Throws std::runtime_error with
    // Xvfb's stderr if it fails to start in time.
    explicit XvfbServer(const XvfbOptions& options);
    ~XvfbServer();
    XvfbServer(const XvfbServer&) = delete;
    XvfbServer& operator=(const XvfbServer&) = delete;

    const std::string& display_name() const { return display_name_; }  // ":N"
    int display_number() const { return display_number_; }
    const XvfbOptions& options() const { return options_; }
    bool running() { return process_.running(); }
    ChildProcess& process() { return process_; }
    const std::string& log_file() const { return log_file_; }

    // A new client connection; throws if it cannot connect.
    DisplayPtr connect() const;

  private:
    XvfbOptions options_;
    ChildProcess process_;
    std::string display_name_;
    std::string log_file_;
    bool own_log_ = false;
    int display_number_ = -1;
};

}  // namespace deskbox::desktop
