// A test client: a full-screen, focused, override-redirect window on its own X connection that
// records every pointer and keyboard event it receives, with root coordinates, button numbers,
// state masks, server timestamps and, for keys, the text they produce under the current keymap
// (Xutf8LookupString through an input context). That is how tests prove injected input arrives
// exactly: they compare what this independent client decoded.
//
// A background thread reads the connection as events arrive. Keysyms are looked up when an
// event is read, so reading late would resolve remapped spare keycodes against a newer keymap;
// reading promptly is what a real application does too.
#pragma once

#include <X11/Xlib.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.hpp"

namespace deskbox::testing {

struct ButtonEvent {
    bool press = false;
    unsigned button = 0;
    int x = 0;  // root coordinates
    int y = 0;
    unsigned state = 0;  // modifier and button mask before the event
    Time time = 0;
};

struct MotionEvent {
    int x = 0;
    int y = 0;
    unsigned state = 0;
    Time time = 0;
};

struct KeyEvent {
    bool press = false;
    unsigned keycode = 0;
    unsigned state = 0;
    KeySym keysym = 0;  // as the client resolved it
    std::string text;   // UTF-8 the key press produced (empty for releases)
    Time time = 0;
};

struct EventLog {
    std::vector<ButtonEvent> buttons;
    std::vector<MotionEvent> motions;
    std::vector<KeyEvent> keys;
    std::string text;  // all key press text in order; Return and KP_Enter recorded as "\n"
    long markers = 0;  // settle() markers seen
};

class EventWindow {
  public:
    // Opens `display_name`, maps and focuses the window, then starts recording. Sets the
    // process's LC_CTYPE to a UTF-8 locale if it is not one (needed for Xutf8LookupString).
    explicit EventWindow(const std::string& display_name);
    ~EventWindow();
    EventWindow(const EventWindow&) = delete;
    EventWindow& operator=(const EventWindow&) = delete;

    // Waits until `predicate` holds for the log (checked after every recorded event); returns
    // whether it held before `timeout`.
    bool wait_for(const std::function<bool(const EventLog&)>& predicate,
                  std::chrono::milliseconds timeout = std::chrono::seconds(10));

    // Returns after every event the server generated before this call has been recorded:
    // a ClientMessage sent through the server behind them comes back. False on timeout.
    bool settle(std::chrono::milliseconds timeout = std::chrono::seconds(10));

    // Waits until at least as much text as `expected` arrived (or timeout), settles, and
    // returns what was typed.
    std::string wait_for_text(const std::string& expected,
                              std::chrono::milliseconds timeout = std::chrono::seconds(10));

    EventLog snapshot() const;
    std::string typed_text() const;
    std::vector<ButtonEvent> button_events() const;
    std::vector<MotionEvent> motions() const;
    std::vector<KeyEvent> key_events() const;
    void clear();

    Window window() const { return window_; }
    int width() const { return width_; }
    int height() const { return height_; }
    bool has_input_context() const { return ic_ != nullptr; }

  private:
    void run();
    void record(XEvent& event);
    KeyEvent decode_key(XKeyEvent& event);

    Display* dpy_ = nullptr;      // used only by the recording thread once it runs
    Display* control_ = nullptr;  // settle() markers, used by the caller's thread
    Window window_ = 0;
    int width_ = 0;
    int height_ = 0;
    XIM im_ = nullptr;
    XIC ic_ = nullptr;
    Atom marker_atom_ = 0;
    long next_marker_ = 0;

    mutable std::mutex mutex_;
    std::condition_variable changed_;
    EventLog log_;

    Pipe wake_;
    bool stop_ = false;  // guarded by mutex_
    std::thread thread_;
};

}  // namespace deskbox::testing
