#include "x11/connection.hpp"

#include <unistd.h>

#include "x11/error_trap.hpp"

namespace deskbox::x11 {

XConnection::XConnection(const std::string& display_name, OnServerLoss on_loss)
    : name_(display_name), loss_(std::make_unique<Loss>()) {
    install_error_handlers();
    display_ = XOpenDisplay(display_name.c_str());
    if (!display_) throw XConnectionError("cannot connect to X display " + display_name);
    // The process-wide IO error handler only logs and returns; this per-display one decides.
    if (on_loss == OnServerLoss::mark_broken)
        XSetIOErrorExitHandler(display_, &XConnection::mark_broken, loss_.get());
    else
        XSetIOErrorExitHandler(display_, &XConnection::exit_process, nullptr);
    atoms_ = std::make_unique<AtomCache>(display_);
}

XConnection::~XConnection() {
    if (!display_) return;
    if (broken() && loss_->seen_by != std::this_thread::get_id()) {
        // After an IO error libX11 keeps the display's user lock held by the thread that hit
        // it, so any call from another thread (XCloseDisplay included) blocks forever. Give
        // the socket back and leave the Display's memory behind.
        ::close(ConnectionNumber(display_));
        return;
    }
    XCloseDisplay(display_);
}

void XConnection::mark_broken(Display*, void* loss) {
    // Returning (instead of exiting) leaves the Display in a dead state where calls fail.
    auto* state = static_cast<Loss*>(loss);
    state->seen_by = std::this_thread::get_id();
    state->broken.store(true);
}

void XConnection::exit_process(Display*, void*) {
    // _exit: other threads are running and may hold locks that exit()'s destructors need.
    static const char msg[] = "deskbox: cannot go on without that X display, exiting\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(70);
}

}  // namespace deskbox::x11
