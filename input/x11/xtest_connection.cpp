#include "input/x11/xtest_connection.hpp"

#include <X11/extensions/XTest.h>

#include <chrono>
#include <stdexcept>
#include <thread>

namespace deskbox::input::x11 {

XTestConnection::XTestConnection(const std::string& display_name)
    : connection_(display_name, deskbox::x11::OnServerLoss::exit_process) {
    Display* dpy = connection_.get();
    screen_ = DefaultScreen(dpy);
    root_ = RootWindow(dpy, screen_);

    int event_base, error_base, major, minor;
    if (!XTestQueryExtension(dpy, &event_base, &error_base, &major, &minor))
        throw std::runtime_error("the X server has no XTest extension");
    int opcode, xkb_error;
    major = XkbMajorVersion, minor = XkbMinorVersion;
    if (!XkbQueryExtension(dpy, &opcode, &xkb_event_base_, &xkb_error, &major, &minor))
        throw std::runtime_error("the X server has no XKEYBOARD extension");
    XkbSelectEvents(dpy, XkbUseCoreKbd, XkbNewKeyboardNotifyMask | XkbMapNotifyMask,
                    XkbNewKeyboardNotifyMask | XkbMapNotifyMask);
    // Our events must get through even while another client grabs the server.
    XTestGrabControl(dpy, True);
}

void XTestConnection::key(KeyCode keycode, bool down) {
    XTestFakeKeyEvent(connection_.get(), keycode, down ? True : False, 0);
    unsynced_ = true;
}

void XTestConnection::button(unsigned button, bool down) {
    XTestFakeButtonEvent(connection_.get(), button, down ? True : False, 0);
    if (button >= 1 && button <= 3) {
        const unsigned bit = Button1Mask << (button - 1);
        expected_buttons_ = down ? (expected_buttons_ | bit) : (expected_buttons_ & ~bit);
    }
}

void XTestConnection::move(Point point) {
    XTestFakeMotionEvent(connection_.get(), screen_, point.x, point.y, 0);
    expected_pointer_ = point;
}

void XTestConnection::change_mapping(KeyCode first, const std::vector<Keysym>& keysyms) {
    std::vector<KeySym> syms(keysyms.begin(), keysyms.end());  // Xlib takes a non-const array
    XChangeKeyboardMapping(connection_.get(), first, 2, syms.data(),
                           static_cast<int>(syms.size() / 2));
    unsynced_ = true;
}

void XTestConnection::sync() {
    XSync(connection_.get(), False);
    unsynced_ = false;
    settle_pointer();
}

// XSync says the server read our requests, not that it processed the device events they
// make: while a client holds a synchronous grab (openbox grabs a click on a window to focus
// it, then replays it), the server queues pointer events until that client lets them go,
// and XQueryPointer, the next screenshot or the next action sees the pointer before them.
// So wait, briefly and bounded, until the pointer is where we put it with the buttons we
// hold.
void XTestConnection::settle_pointer() {
    constexpr unsigned kTracked = Button1Mask | Button2Mask | Button3Mask;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
    while (true) {
        Window root_return, child;
        int x = 0, y = 0, win_x, win_y;
        unsigned mask = 0;
        XQueryPointer(connection_.get(), root_, &root_return, &child, &x, &y, &win_x, &win_y,
                      &mask);
        const bool placed =
            !expected_pointer_ || (expected_pointer_->x == x && expected_pointer_->y == y);
        if ((placed && (mask & kTracked) == (expected_buttons_ & kTracked)) ||
            std::chrono::steady_clock::now() >= deadline)
            return;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

Point XTestConnection::cursor_position() const {
    Window root_return, child;
    int root_x = 0, root_y = 0, win_x, win_y;
    unsigned mask;
    XQueryPointer(connection_.get(), root_, &root_return, &child, &root_x, &root_y, &win_x, &win_y,
                  &mask);
    return Point{root_x, root_y};
}

Size XTestConnection::known_screen_size() const {
    return Size{DisplayWidth(connection_.get(), screen_),
                DisplayHeight(connection_.get(), screen_)};
}

Size XTestConnection::current_screen_size() const {
    Window root_return;
    int x, y;
    unsigned width, height, border, depth;
    XGetGeometry(connection_.get(), root_, &root_return, &x, &y, &width, &height, &border, &depth);
    return Size{static_cast<int>(width), static_cast<int>(height)};
}

XkbStateRec XTestConnection::keyboard_state() const {
    XkbStateRec state{};
    if (XkbGetState(connection_.get(), XkbUseCoreKbd, &state) != Success)
        throw std::runtime_error("XkbGetState failed: cannot read the keyboard state");
    return state;
}

bool XTestConnection::keymap_changed() {
    bool changed = false;
    while (XPending(connection_.get()) > 0) {
        XEvent event;
        XNextEvent(connection_.get(), &event);
        if (event.type == xkb_event_base_) {
            const auto& xkb_event = reinterpret_cast<const XkbEvent&>(event);
            if (xkb_event.any.xkb_type == XkbNewKeyboardNotify ||
                xkb_event.any.xkb_type == XkbMapNotify)
                changed = true;
        } else if (event.type == MappingNotify) {
            changed = true;
        }
    }
    return changed;
}

}  // namespace deskbox::input::x11
