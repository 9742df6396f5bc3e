// Grabs root-window pixels as BGRX: XShmGetImage into one shared segment of screen size, or
// XGetImage when MIT-SHM is missing or unusable (remote display, container without shared
// IPC). The display must be used by one thread only (the caller's).
#pragma once

#include <X11/Xlib.h>
#include <X11/extensions/XShm.h>

#include <memory>
#include <optional>
#include <string>

#include "guest-desktop/capture/types.hpp"

namespace deskbox::capture {

struct XImageDeleter {
    void operator()(XImage* image) const;
};
using XImagePtr = std::unique_ptr<XImage, XImageDeleter>;

class ScreenGrabber {
  public:
    // use_xshm: nullopt = XShm if it works, else XGetImage; true = XShm or throw;
    // false = always XGetImage. Throws CaptureError if the root's pixel format is not
    // 32 bits per pixel little-endian BGRX (the only format the protocol carries).
    ScreenGrabber(Display* display, std::optional<bool> use_xshm);
    ~ScreenGrabber();
    ScreenGrabber(const ScreenGrabber&) = delete;
    ScreenGrabber& operator=(const ScreenGrabber&) = delete;

    bool using_xshm() const { return shm_ != nullptr; }
    // Why XShm is not used ("" when it is, or when it was not asked for).
    const std::string& xshm_unavailable_reason() const { return xshm_reason_; }
    int width() const { return width_; }
    int height() const { return height_; }
    Rect screen() const { return {0, 0, width_, height_}; }

    // Grabs `area` (clipped to the screen; must not be empty after clipping). The view is
    // valid until the next grab or destruction. Throws CaptureError on an X error (e.g. the
    // screen shrank under us).
    ImageView grab(const Rect& area);
    ImageView grab_full() { return grab(screen()); }

  private:
    struct ShmSegment;
    void check_pixel_format();
    bool try_attach_shm(std::string& reason);

    Display* display_;
    Window root_;
    Visual* visual_ = nullptr;
    int depth_ = 0;
    int width_ = 0;
    int height_ = 0;
    std::unique_ptr<ShmSegment> shm_;
    std::string xshm_reason_;
    XImagePtr image_;  // the XGetImage result backing the last view
};

}  // namespace deskbox::capture
