#include "x11/error_trap.hpp"

#include <cstdio>
#include <mutex>

namespace deskbox::x11 {
namespace {

// The innermost trap of this thread; each trap links to the one it nests in.
thread_local XErrorTrap* innermost_trap = nullptr;

// Says what happened (Xlib's default does too) but returns instead of exiting: the Display's
// exit handler decides next (XConnection's keep the process alive; Xlib's default exits).
int report_lost_connection(Display* display) {
    std::fprintf(stderr, "deskbox: lost the connection to X display %s\n", DisplayString(display));
    return 0;
}

}  // namespace

void install_error_handlers() {
    static std::once_flag once;
    std::call_once(once, [] {
        XInitThreads();  // libX11 >= 1.8 does this itself; older ones need it before any use
        XSetErrorHandler(&XErrorTrap::dispatch);
        XSetIOErrorHandler(&report_lost_connection);
    });
}

std::string describe(Display* display, const XErrorEvent& event) {
    char text[160] = {};
    XGetErrorText(display, event.error_code, text, sizeof text);
    return std::string(text) + " (request " + std::to_string(event.request_code) + "." +
           std::to_string(event.minor_code) + ")";
}

XErrorTrap::XErrorTrap(Display* display)
    : display_(display), outer_(innermost_trap), first_request_(NextRequest(display)) {
    install_error_handlers();
    innermost_trap = this;
}

XErrorTrap::~XErrorTrap() {
    // Requests with a reply were answered when their call returned; only requests without
    // one (XSelectInput, XChangeProperty...) may still have an error on the way.
    unsigned long last_sent = NextRequest(display_) - 1;
    if (last_sent >= first_request_ && LastKnownRequestProcessed(display_) < last_sent)
        XSync(display_, False);
    if (innermost_trap == this) {
        innermost_trap = outer_;
        return;
    }
    // Destroyed out of order: unlink it wherever it is, so no dangling trap stays linked.
    for (XErrorTrap* t = innermost_trap; t; t = t->outer_) {
        if (t->outer_ == this) {
            t->outer_ = outer_;
            break;
        }
    }
}

bool XErrorTrap::sync_and_check() {
    XSync(display_, False);
    return caught();
}

void XErrorTrap::clear() {
    error_count_ = 0;
    first_error_code_ = 0;
    first_error_.clear();
}

void XErrorTrap::record(const XErrorEvent& event) {
    if (error_count_++ > 0) return;
    first_error_code_ = event.error_code;
    first_error_ = describe(display_, event);
}

int XErrorTrap::dispatch(Display* display, XErrorEvent* event) {
    for (XErrorTrap* t = innermost_trap; t; t = t->outer_) {
        if (t->display_ == display) {
            t->record(*event);
            return 0;
        }
    }
    // Nobody expected it (typically a window that vanished between two requests): a desktop
    // changes under us all the time, so this is worth a line in the log, never an exit.
    std::fprintf(stderr, "deskbox: X error %s on display %s, not trapped; ignored\n",
                 describe(display, *event).c_str(), DisplayString(display));
    return 0;
}

}  // namespace deskbox::x11
