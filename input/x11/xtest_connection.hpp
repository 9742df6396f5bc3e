// The injector's X connection (one of the X layer's, x11/connection.hpp): fakes key, button and
// motion events with XTest, and waits until the server has really processed them (sync). Also
// reads what the injector needs to know about the display: pointer position, screen size,
// keyboard state, keymap changes.
#pragma once

#include <X11/XKBlib.h>

#include <optional>
#include <string>
#include <vector>

#include "input/actions.hpp"
#include "x11/connection.hpp"

namespace deskbox::input::x11 {

class XTestConnection {
  public:
    // Opens a connection of its own to `display_name`, so keymap notifications never consume
    // another client's events. Losing the X server ends the process (OnServerLoss::exit_process):
    // the injector cannot go on without it, nor can the agent's capture. Throws
    // std::runtime_error (x11::XConnectionError if the display cannot be opened) if XTest or
    // XKB are missing.
    explicit XTestConnection(const std::string& display_name);

    Display* display() const { return connection_.get(); }

    void key(KeyCode keycode, bool down);
    void button(unsigned button, bool down);
    void move(Point point);
    // Gives `keysyms.size() / 2` consecutive keycodes from `first` two keysyms each.
    void change_mapping(KeyCode first, const std::vector<Keysym>& keysyms);

    // Returns once the server has processed every event sent, pointer events included.
    void sync();
    // Key events or mapping changes went out since the last sync.
    bool unsynced() const { return unsynced_; }

    Point cursor_position() const;
    // The screen size as of connecting (or the last refresh), and as the server says now.
    Size known_screen_size() const;
    Size current_screen_size() const;

    // Throws std::runtime_error if the server does not say.
    XkbStateRec keyboard_state() const;
    // Whether a keymap change (setxkbmap, xmodmap, our own remaps) was announced since the last
    // call; reads every event that is waiting.
    bool keymap_changed();

  private:
    void settle_pointer();

    deskbox::x11::XConnection connection_;
    int screen_ = 0;
    Window root_ = 0;
    int xkb_event_base_ = 0;
    bool unsynced_ = false;
    // What our own events should have made of the pointer (settle_pointer waits for it).
    std::optional<Point> expected_pointer_;
    unsigned expected_buttons_ = 0;  // core state bits of buttons 1-3 we hold down
};

}  // namespace deskbox::input::x11
