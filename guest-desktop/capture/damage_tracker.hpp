// XDamage on the root window (which reports drawing to every window on it). The server
// sends one DamageNotify when the damage goes from empty to non-empty; take_damage() fetches
// and clears the accumulated region in one round trip.
#pragma once

#include <X11/Xlib.h>
#include <X11/extensions/Xdamage.h>
#include <X11/extensions/Xfixes.h>

#include <string>
#include <vector>

#include "guest-desktop/capture/types.hpp"

namespace deskbox::capture {

class DamageTracker {
  public:
    // Throws CaptureError naming what is missing (DAMAGE or XFIXES >= 2).
    explicit DamageTracker(Display* display);
    ~DamageTracker();
    DamageTracker(const DamageTracker&) = delete;
    DamageTracker& operator=(const DamageTracker&) = delete;

    // True if the event is a DamageNotify for our damage object.
    bool is_damage_event(const XEvent& event) const;
    // Everything damaged since the previous call, then the damage is empty again. The round
    // trip also means every request the server processed before it is included.
    std::vector<Rect> take_damage();

  private:
    Display* display_;
    int event_base_ = 0;
    Damage damage_ = 0;
    XserverRegion region_ = 0;
};

}  // namespace deskbox::capture
