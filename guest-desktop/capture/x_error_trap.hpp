// Catches X protocol errors of one Display while alive, instead of Xlib's default handler
// (which prints and exits the process). Errors of other displays go to the handler that was
// installed before, so a trap here does not hide another component's errors.
#pragma once

#include <X11/Xlib.h>

#include <string>

namespace deskbox::capture {

class XErrorTrap {
  public:
    explicit XErrorTrap(Display* display);
    ~XErrorTrap();
    XErrorTrap(const XErrorTrap&) = delete;
    XErrorTrap& operator=(const XErrorTrap&) = delete;

    // XSync so every request sent so far has been answered, then whether one failed.
    bool sync_and_check();
    // Errors that arrived so far (no round trip).
    bool caught() const { return error_count_ > 0; }
    int error_count() const { return error_count_; }
    // The first error caught, as "BadMatch (request 130.4)"; empty if none.
    const std::string& first_error() const { return first_error_; }
    // Forgets caught errors.
    void clear();

  private:
    static int dispatch(Display* display, XErrorEvent* event);
    void record(const XErrorEvent& event);

    Display* display_;
    int error_count_ = 0;
    std::string first_error_;
};

}  // namespace deskbox::capture
