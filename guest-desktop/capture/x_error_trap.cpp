#include "guest-desktop/capture/x_error_trap.hpp"

#include <algorithm>
#include <mutex>
#include <vector>

namespace deskbox::capture {
namespace {

// Xlib's error handler is process-wide, so the traps of all displays share one dispatcher
// that is installed while at least one trap lives.
struct Registry {
    std::mutex mutex;
    std::vector<XErrorTrap*> traps;  // innermost last
    XErrorHandler previous = nullptr;
};

Registry& registry() {
    static Registry r;
    return r;
}

}  // namespace

XErrorTrap::XErrorTrap(Display* display) : display_(display) {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    if (r.traps.empty()) r.previous = XSetErrorHandler(&XErrorTrap::dispatch);
    r.traps.push_back(this);
}

XErrorTrap::~XErrorTrap() {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    std::erase(r.traps, this);
    if (r.traps.empty()) {
        XErrorHandler current = XSetErrorHandler(r.previous);
        // Someone replaced our dispatcher meanwhile: leave theirs in place.
        if (current != &XErrorTrap::dispatch) XSetErrorHandler(current);
        r.previous = nullptr;
    }
}

bool XErrorTrap::sync_and_check() {
    XSync(display_, False);
    return caught();
}

void XErrorTrap::clear() {
    error_count_ = 0;
    first_error_.clear();
}

void XErrorTrap::record(const XErrorEvent& event) {
    if (error_count_++ == 0) {
        char text[128] = {};
        XGetErrorText(display_, event.error_code, text, sizeof text);
        first_error_ = std::string(text) + " (request " + std::to_string(event.request_code) + "." +
                       std::to_string(event.minor_code) + ")";
    }
}

int XErrorTrap::dispatch(Display* display, XErrorEvent* event) {
    XErrorHandler previous = nullptr;
    {
        auto& r = registry();
        std::lock_guard lock(r.mutex);
        auto it = std::find_if(r.traps.rbegin(), r.traps.rend(),
                               [&](XErrorTrap* t) { return t->display_ == display; });
        if (it != r.traps.rend()) {
            (*it)->record(*event);
            return 0;
        }
        previous = r.previous;
    }
    // Not ours: behave as if we were never installed (the default handler exits).
    return previous ? previous(display, event) : 0;
}

}  // namespace deskbox::capture
