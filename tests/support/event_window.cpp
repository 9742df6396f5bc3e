#include "tests/support/event_window.hpp"

#include <X11/XKBlib.h>

#include <X11/Xutil.h>
#include <X11/keysym.h>
#include <langinfo.h>
#include <poll.h>

#include <clocale>
#include <cstring>
#include <stdexcept>

namespace deskbox::testing {
namespace {

bool locale_is_utf8() {
    const char* codeset = nl_langinfo(CODESET);
    return codeset && (std::strcmp(codeset, "UTF-8") == 0 || std::strcmp(codeset, "utf8") == 0);
}

void ensure_utf8_locale() {
    if (locale_is_utf8()) return;
    for (const char* name : {"", "C.UTF-8", "en_US.UTF-8"}) {
        if (std::setlocale(LC_CTYPE, name) && locale_is_utf8()) return;
    }
}

std::string utf8(char32_t cp) {
    std::string out;
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    }
    return out;
}

constexpr long kEventMask = ButtonPressMask | ButtonReleaseMask | PointerMotionMask | KeyPressMask |
                            KeyReleaseMask | StructureNotifyMask;

}  // namespace

EventWindow::EventWindow(const std::string& display_name) : wake_(Pipe::create()) {
    ensure_utf8_locale();
    // The built-in input method: no ibus/fcitx from the environment, compose still works.
    if (XSupportsLocale()) XSetLocaleModifiers("@im=none");

    dpy_ = XOpenDisplay(display_name.c_str());
    control_ = XOpenDisplay(display_name.c_str());
    if (!dpy_ || !control_) {
        if (dpy_) XCloseDisplay(dpy_);
        if (control_) XCloseDisplay(control_);
        throw std::runtime_error("EventWindow: cannot open display " + display_name);
    }
    // Take XKB up now, as toolkits do at startup. Xlib otherwise does it at the first key it
    // decodes; a keymap change made before that (a spare keycode the injector maps while this
    // client still lags behind, under load) then never reached the client, which decoded
    // that key as NoSymbol.
    int xkb_major = XkbMajorVersion, xkb_minor = XkbMinorVersion;
    if (!XkbUseExtension(dpy_, &xkb_major, &xkb_minor))
        throw std::runtime_error("EventWindow: the X server has no XKB");
    XkbKeycodeToKeysym(dpy_, 38, 0, 0);  // loads Xlib's copy of the keymap
    const int screen = DefaultScreen(dpy_);
    width_ = DisplayWidth(dpy_, screen);
    height_ = DisplayHeight(dpy_, screen);
    marker_atom_ = XInternAtom(dpy_, "DESKBOX_TEST_MARKER", False);

    XSetWindowAttributes attributes{};
    attributes.override_redirect = True;  // no window manager needed to place or focus it
    attributes.background_pixel = BlackPixel(dpy_, screen);
    attributes.event_mask = kEventMask;
    window_ = XCreateWindow(dpy_, RootWindow(dpy_, screen), 0, 0, width_, height_, 0,
                            CopyFromParent, InputOutput, CopyFromParent,
                            CWOverrideRedirect | CWBackPixel | CWEventMask, &attributes);

    im_ = XOpenIM(dpy_, nullptr, nullptr, nullptr);
    if (im_) {
        ic_ = XCreateIC(im_, XNInputStyle, XIMPreeditNothing | XIMStatusNothing, XNClientWindow,
                        window_, XNFocusWindow, window_, nullptr);
    }
    long im_mask = 0;
    if (ic_) XGetICValues(ic_, XNFilterEvents, &im_mask, nullptr);
    XSelectInput(dpy_, window_, kEventMask | im_mask);

    XMapRaised(dpy_, window_);
    XEvent event;
    do {
        XWindowEvent(dpy_, window_, StructureNotifyMask, &event);
    } while (event.type != MapNotify);
    XSetInputFocus(dpy_, window_, RevertToPointerRoot, CurrentTime);
    if (ic_) XSetICFocus(ic_);
    XSync(dpy_, False);

    thread_ = std::thread([this] { run(); });
}

EventWindow::~EventWindow() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    const char byte = 0;
    write_all(wake_.write.get(), &byte, 1);
    if (thread_.joinable()) thread_.join();
    if (ic_) XDestroyIC(ic_);
    if (im_) XCloseIM(im_);
    XDestroyWindow(dpy_, window_);
    XCloseDisplay(dpy_);
    XCloseDisplay(control_);
}

void EventWindow::run() {
    const int x_fd = ConnectionNumber(dpy_);
    for (;;) {
        while (XPending(dpy_) > 0) {
            XEvent event;
            XNextEvent(dpy_, &event);
            record(event);
        }
        {
            std::lock_guard lock(mutex_);
            if (stop_) return;
        }
        pollfd fds[2] = {{x_fd, POLLIN, 0}, {wake_.read.get(), POLLIN, 0}};
        ::poll(fds, 2, 1000);
    }
}

KeyEvent EventWindow::decode_key(XKeyEvent& event) {
    KeyEvent key;
    key.press = event.type == KeyPress;
    key.keycode = event.keycode;
    key.state = event.state;
    key.time = event.time;
    if (!key.press) {
        char ignored[8];
        XLookupString(&event, ignored, sizeof ignored, &key.keysym, nullptr);
        return key;
    }
    if (ic_) {
        std::string buffer(64, '\0');
        Status status = 0;
        int length = Xutf8LookupString(ic_, &event, buffer.data(), static_cast<int>(buffer.size()),
                                       &key.keysym, &status);
        if (status == XBufferOverflow) {
            buffer.resize(static_cast<std::size_t>(length) + 1);
            length = Xutf8LookupString(ic_, &event, buffer.data(), static_cast<int>(buffer.size()),
                                       &key.keysym, &status);
        }
        if (status == XLookupChars || status == XLookupBoth)
            key.text.assign(buffer.data(), static_cast<std::size_t>(length));
        if (status != XLookupKeySym && status != XLookupBoth) key.keysym = NoSymbol;
    } else {
        // No input method: resolve the keysym and convert it ourselves.
        char buffer[64];
        const int length = XLookupString(&event, buffer, sizeof buffer, &key.keysym, nullptr);
        const KeySym sym = key.keysym;
        if (sym >= 0x01000100 && sym <= 0x0110ffff) {
            key.text = utf8(static_cast<char32_t>(sym - 0x01000000));
        } else if ((sym >= 0x20 && sym <= 0x7e) || (sym >= 0xa0 && sym <= 0xff)) {
            key.text = utf8(static_cast<char32_t>(sym));
        } else if (length > 0) {
            key.text.assign(buffer, static_cast<std::size_t>(length));
        }
    }
    if (key.keysym == XK_Return || key.keysym == XK_KP_Enter) key.text = "\n";
    return key;
}

void EventWindow::record(XEvent& event) {
    if (event.type == MappingNotify) {
        XRefreshKeyboardMapping(&event.xmapping);
        return;
    }
    const bool filtered = XFilterEvent(&event, None);  // the input method may consume keys
    switch (event.type) {
        case ButtonPress:
        case ButtonRelease: {
            const XButtonEvent& b = event.xbutton;
            std::lock_guard lock(mutex_);
            log_.buttons.push_back(
                {b.type == ButtonPress, b.button, b.x_root, b.y_root, b.state, b.time});
            break;
        }
        case MotionNotify: {
            const XMotionEvent& m = event.xmotion;
            std::lock_guard lock(mutex_);
            log_.motions.push_back({m.x_root, m.y_root, m.state, m.time});
            break;
        }
        case KeyPress:
        case KeyRelease: {
            KeyEvent key = decode_key(event.xkey);
            if (filtered) key.text.clear();
            std::lock_guard lock(mutex_);
            log_.text += key.text;
            log_.keys.push_back(std::move(key));
            break;
        }
        case ClientMessage:
            if (event.xclient.message_type == marker_atom_) {
                std::lock_guard lock(mutex_);
                log_.markers = std::max(log_.markers, event.xclient.data.l[0]);
            }
            break;
        default:
            return;
    }
    changed_.notify_all();
}

bool EventWindow::wait_for(const std::function<bool(const EventLog&)>& predicate,
                           std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return predicate(log_); });
}

bool EventWindow::settle(std::chrono::milliseconds timeout) {
    const long marker = ++next_marker_;
    XEvent event{};
    event.xclient.type = ClientMessage;
    event.xclient.window = window_;
    event.xclient.message_type = marker_atom_;
    event.xclient.format = 32;
    event.xclient.data.l[0] = marker;
    XSendEvent(control_, window_, False, NoEventMask, &event);
    XSync(control_, False);
    return wait_for([marker](const EventLog& log) { return log.markers >= marker; }, timeout);
}

std::string EventWindow::wait_for_text(const std::string& expected,
                                       std::chrono::milliseconds timeout) {
    wait_for([&](const EventLog& log) { return log.text.size() >= expected.size(); }, timeout);
    settle();
    return typed_text();
}

EventLog EventWindow::snapshot() const {
    std::lock_guard lock(mutex_);
    return log_;
}

std::string EventWindow::typed_text() const {
    std::lock_guard lock(mutex_);
    return log_.text;
}

std::vector<ButtonEvent> EventWindow::button_events() const {
    std::lock_guard lock(mutex_);
    return log_.buttons;
}

std::vector<MotionEvent> EventWindow::motions() const {
    std::lock_guard lock(mutex_);
    return log_.motions;
}

std::vector<KeyEvent> EventWindow::key_events() const {
    std::lock_guard lock(mutex_);
    return log_.keys;
}

void EventWindow::clear() {
    std::lock_guard lock(mutex_);
    const long markers = log_.markers;
    log_ = EventLog{};
    log_.markers = markers;
}

}  // namespace deskbox::testing
