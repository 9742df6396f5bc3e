// One Xlib client connection of the guest (the agent's services and capture, the XTest
// injector). Xlib's default exits the whole process when a connection is lost; here each
// connection's owner says what losing the X server means for it: the services notice, report,
// and reconnect after the session supervisor restarted Xvfb; the screen capture and the injector
// have nothing left to do and end the agent, so the host sees its channel close and fails the
// sandbox with the reason from the log.
#pragma once

#include <X11/Xlib.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "x11/atom_cache.hpp"

namespace deskbox::x11 {

// Thrown when a display cannot be opened.
class XConnectionError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

enum class OnServerLoss {
    // Xlib calls stay harmless (they fail or return garbage) and broken() turns true; the
    // owner drops the connection and opens a new one.
    mark_broken,
    // Exits the process (code 70, after saying why): for a connection nothing can go on without.
    exit_process,
};

// Once broken, only the thread that saw the loss may still call Xlib on it (libX11 keeps the
// display locked for that thread): check broken() before each use from another thread, and
// destroy it on that thread if you can (elsewhere its memory, some 70 KB, is left behind).
class XConnection {
  public:
    // Throws XConnectionError if the display cannot be opened.
    explicit XConnection(const std::string& display_name,
                         OnServerLoss on_loss = OnServerLoss::mark_broken);
    ~XConnection();
    XConnection(const XConnection&) = delete;
    XConnection& operator=(const XConnection&) = delete;

    Display* get() const { return display_; }
    bool broken() const { return loss_->broken.load(); }
    const std::string& name() const { return name_; }
    // This connection's atoms (interned once each).
    AtomCache& atoms() { return *atoms_; }

  private:
    // Shared with Xlib's exit handler, at a stable address.
    struct Loss {
        std::atomic<bool> broken{false};
        std::thread::id seen_by;  // the thread that saw the loss (written before broken)
    };
    static void mark_broken(Display* display, void* loss);
    static void exit_process(Display* display, void* unused);

    std::string name_;
    Display* display_ = nullptr;
    std::unique_ptr<Loss> loss_;
    std::unique_ptr<AtomCache> atoms_;
};

}  // namespace deskbox::x11
