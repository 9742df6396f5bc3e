// Xlib connections that survive their X server. Xlib's defaults exit the whole process on a
// lost connection (the IO error path) and on any X protocol error nobody handled; the agent
// must instead notice, report, and reconnect after the session supervisor restarts Xvfb.
#pragma once

#include <X11/Xlib.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace deskbox::services {

// One client connection. If the server goes away, Xlib calls stay harmless (they return
// failure or garbage) and broken() turns true; the owner then drops it and reconnects.
// Once broken, only the thread that saw the error may still call Xlib on it (libX11 keeps
// the display locked for that thread): check broken() before each use from another thread,
// and destroy it on that thread if you can (elsewhere its memory has to be leaked).
class XConnection {
  public:
    // Throws ServiceError(unavailable) if the display cannot be opened.
    explicit XConnection(const std::string& display_name);
    ~XConnection();
    XConnection(const XConnection&) = delete;
    XConnection& operator=(const XConnection&) = delete;

    Display* get() const { return display_; }
    bool broken() const { return state_->broken.load(); }
    const std::string& name() const { return name_; }

    // Shared with Xlib's IO error callback.
    struct State {
        std::atomic<bool> broken{false};
        std::thread::id broken_in;  // the thread that saw the IO error (written before broken)
    };

  private:
    std::string name_;
    Display* display_ = nullptr;
    std::unique_ptr<State> state_;  // stable address for Xlib's callback
};

// Catches X protocol errors raised on `display` by this thread while alive, instead of letting
// them reach the process-wide handler (Xlib's default one exits). Errors arrive asynchronously,
// so the destructor and error() sync first.
class XErrorTrap {
  public:
    explicit XErrorTrap(Display* display);
    ~XErrorTrap();
    XErrorTrap(const XErrorTrap&) = delete;
    XErrorTrap& operator=(const XErrorTrap&) = delete;

    // XSyncs, then returns the first error code seen (0 if none).
    int error();

  private:
    friend int trap_handler(Display*, XErrorEvent*);
    Display* display_;
    int first_error_ = 0;
    XErrorTrap* outer_;
};

// Atoms by name (one round trip for many).
std::vector<Atom> intern_atoms(Display* display, const std::vector<std::string>& names);

// A window property's raw value. For format 32 the items are longs as Xlib returns them.
struct PropertyValue {
    Atom type = None;
    int format = 0;
    unsigned long items = 0;
    std::string bytes;  // format 8: the bytes; 16/32: the C array (short/long per item)
};
// nullopt if the property is missing or the window is gone.
std::optional<PropertyValue> get_property(Display* display, Window window, Atom property,
                                          Atom type = AnyPropertyType, bool remove = false);
// Format-32 properties of type WINDOW/CARDINAL/ATOM as a list of values.
std::vector<unsigned long> get_longs(Display* display, Window window, Atom property,
                                     Atom type = AnyPropertyType);

}  // namespace deskbox::services
