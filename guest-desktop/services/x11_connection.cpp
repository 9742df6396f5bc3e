#include "guest-desktop/services/x11_connection.hpp"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <mutex>

#include "guest-desktop/services/service_error.hpp"

namespace deskbox::services {

namespace {
thread_local XErrorTrap* innermost_trap = nullptr;
XErrorHandler previous_handler = nullptr;
std::once_flag install_once;
std::once_flag install_io_once;

void mark_broken(Display*, void* user_data) {
    // Returning (instead of exiting) leaves the Display in a dead state where calls fail.
    auto* state = static_cast<XConnection::State*>(user_data);
    state->broken_in = std::this_thread::get_id();
    state->broken.store(true);
}

// Says what happened (as Xlib's default does) but returns instead of exiting.
int report_io_error(Display* display) {
    std::fprintf(stderr, "deskbox: lost the connection to X display %s\n", DisplayString(display));
    return 0;
}
}  // namespace

int trap_handler(Display* display, XErrorEvent* event) {
    for (XErrorTrap* t = innermost_trap; t; t = t->outer_) {
        if (t->display_ == display) {
            if (!t->first_error_) t->first_error_ = event->error_code;
            return 0;
        }
    }
    return previous_handler ? previous_handler(display, event) : 0;
}

XConnection::XConnection(const std::string& display_name)
    : name_(display_name), state_(std::make_unique<State>()) {
    XInitThreads();  // libX11 >= 1.8 does this itself; older ones need it before any use
    display_ = XOpenDisplay(display_name.c_str());
    if (!display_)
        throw ServiceError(error_code::unavailable, "cannot connect to X display " + display_name);
    // Xlib's default process-wide IO error handler exits; ours returns, and then the
    // per-display exit handler decides (ours marks the connection broken, others' still exit).
    std::call_once(install_io_once, [] { XSetIOErrorHandler(report_io_error); });
    XSetIOErrorExitHandler(display_, mark_broken, state_.get());
}

XConnection::~XConnection() {
    if (!display_) return;
    if (broken() && state_->broken_in != std::this_thread::get_id()) {
        // After an IO error libX11 keeps the display's user lock held by the thread that hit
        // it, so any call from another thread (XCloseDisplay included) blocks forever. Give
        // the socket back and leave the Display's memory (some 70 KB) behind.
        ::close(ConnectionNumber(display_));
        return;
    }
    XCloseDisplay(display_);
}

XErrorTrap::XErrorTrap(Display* display) : display_(display), outer_(innermost_trap) {
    std::call_once(install_once, [] { previous_handler = XSetErrorHandler(trap_handler); });
    innermost_trap = this;
}

XErrorTrap::~XErrorTrap() {
    XSync(display_, False);
    innermost_trap = outer_;
}

int XErrorTrap::error() {
    XSync(display_, False);
    return first_error_;
}

std::vector<Atom> intern_atoms(Display* display, const std::vector<std::string>& names) {
    std::vector<char*> pointers;
    for (const auto& n : names) pointers.push_back(const_cast<char*>(n.c_str()));
    std::vector<Atom> atoms(names.size(), None);
    XInternAtoms(display, pointers.data(), static_cast<int>(pointers.size()), False, atoms.data());
    return atoms;
}

std::optional<PropertyValue> get_property(Display* display, Window window, Atom property, Atom type,
                                          bool remove) {
    XErrorTrap trap(display);
    Atom actual_type = None;
    int format = 0;
    unsigned long items = 0, after = 0;
    unsigned char* data = nullptr;
    // LONG_MAX/4 longs: "all of it"; Xlib splits big replies itself.
    int status =
        XGetWindowProperty(display, window, property, 0, LONG_MAX / 4, remove ? True : False, type,
                           &actual_type, &format, &items, &after, &data);
    std::unique_ptr<unsigned char, int (*)(void*)> owned(data, XFree);
    if (status != Success || actual_type == None || trap.error()) return std::nullopt;
    PropertyValue value;
    value.type = actual_type;
    value.format = format;
    value.items = items;
    std::size_t unit = format == 8 ? 1 : format == 16 ? sizeof(short) : sizeof(long);
    if (data) value.bytes.assign(reinterpret_cast<const char*>(data), items * unit);
    return value;
}

std::vector<unsigned long> get_longs(Display* display, Window window, Atom property, Atom type) {
    std::vector<unsigned long> out;
    auto value = get_property(display, window, property, type);
    if (!value || value->format != 32) return out;
    const auto* p = reinterpret_cast<const unsigned long*>(value->bytes.data());
    out.assign(p, p + value->items);
    return out;
}

}  // namespace deskbox::services
