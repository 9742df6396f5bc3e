// X protocol errors in a multi-threaded program (the agent: a capture thread, service threads).
// Xlib has one error handler per process and its default prints and exits the whole process,
// e.g. because a window vanished while we looked at it. This layer installs its own handler,
// once, and gives each error to the innermost XErrorTrap that the thread receiving it holds
// for that display; an error nobody trapped is logged and ignored.
#pragma once

#include <X11/Xlib.h>

#include <string>

namespace deskbox::x11 {

// Turns on Xlib's thread support and installs this layer's process-wide handlers: X errors
// (to the traps, else logged) and lost connections (logged; then each Display's own exit
// handler decides, see XConnection). Only the first call does anything; XErrorTrap and
// XConnection make it themselves. A program calls it before its first Xlib call, and nothing
// may call XSetErrorHandler or XSetIOErrorHandler after it (the traps would go deaf).
void install_error_handlers();

// Catches the X protocol errors that `display` raises on this thread while it lives. Traps
// nest per thread: an error goes to the innermost trap of the thread for that display, and
// a trap never sees another thread's errors (each thread uses its own connections, or one at a
// time under a lock, so errors arrive on the thread that caused them). Errors arrive
// asynchronously: caught() tells what arrived so far, sync_and_check() waits for all.
class XErrorTrap {
  public:
    explicit XErrorTrap(Display* display);
    // Syncs first when requests sent while it lived may still be unanswered, so their errors
    // land here and not in the log. Destroy traps in reverse order of creation.
    ~XErrorTrap();
    XErrorTrap(const XErrorTrap&) = delete;
    XErrorTrap& operator=(const XErrorTrap&) = delete;

    // XSync, so every request sent so far has been answered, then whether one failed.
    bool sync_and_check();
    // Errors that arrived so far (no round trip).
    bool caught() const { return error_count_ > 0; }
    int error_count() const { return error_count_; }
    // The first error caught: its code (BadWindow...; 0 if none) and as text,
    // "BadMatch (invalid parameter attributes) (request 130.4)" (empty if none).
    int first_error_code() const { return first_error_code_; }
    const std::string& first_error() const { return first_error_; }
    // Forgets the errors caught so far.
    void clear();

    // The process-wide handler install_error_handlers() puts in place.
    static int dispatch(Display* display, XErrorEvent* event);

  private:
    void record(const XErrorEvent& event);

    Display* display_;
    XErrorTrap* outer_;            // the thread's previous innermost trap
    unsigned long first_request_;  // the first request sent while this trap lives
    int error_count_ = 0;
    int first_error_code_ = 0;
    std::string first_error_;
};

// "BadWindow (invalid Window parameter) (request 20.0)".
std::string describe(Display* display, const XErrorEvent& event);

}  // namespace deskbox::x11
