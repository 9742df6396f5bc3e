#include "guest-desktop/capture/damage_tracker.hpp"

namespace deskbox::capture {

DamageTracker::DamageTracker(Display* display) : display_(display) {
    int error_base = 0;
    if (!XDamageQueryExtension(display_, &event_base_, &error_base))
        throw CaptureError("the X server has no DAMAGE extension");
    int major = 0, minor = 0;
    // Each extension must be told the client's version before its requests work.
    if (!XDamageQueryVersion(display_, &major, &minor) || major < 1)
        throw CaptureError("the X server's DAMAGE extension is older than 1.0");
    int fixes_event = 0, fixes_error = 0;
    if (!XFixesQueryExtension(display_, &fixes_event, &fixes_error))
        throw CaptureError("the X server has no XFIXES extension (needed for damage regions)");
    if (!XFixesQueryVersion(display_, &major, &minor) || major < 2)
        throw CaptureError("the X server's XFIXES extension is older than 2.0");
    damage_ = XDamageCreate(display_, DefaultRootWindow(display_), XDamageReportNonEmpty);
    region_ = XFixesCreateRegion(display_, nullptr, 0);
}

DamageTracker::~DamageTracker() {
    if (region_) XFixesDestroyRegion(display_, region_);
    if (damage_) XDamageDestroy(display_, damage_);
    XFlush(display_);
}

bool DamageTracker::is_damage_event(const XEvent& event) const {
    return event.type == event_base_ + XDamageNotify &&
           reinterpret_cast<const XDamageNotifyEvent&>(event).damage == damage_;
}

std::vector<Rect> DamageTracker::take_damage() {
    XDamageSubtract(display_, damage_, None, region_);
    int count = 0;
    XRectangle* rects = XFixesFetchRegion(display_, region_, &count);
    std::vector<Rect> out;
    out.reserve(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i)
        out.push_back({rects[i].x, rects[i].y, rects[i].width, rects[i].height});
    if (rects) XFree(rects);
    return out;
}

}  // namespace deskbox::capture
