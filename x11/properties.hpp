// Reading window properties whatever their size and whether or not the window still exists.
#pragma once

#include <X11/Xlib.h>

#include <optional>
#include <string>
#include <vector>

namespace deskbox::x11 {

// A window property's raw value. For format 32 the items are longs as Xlib returns them.
struct PropertyValue {
    Atom type = None;
    int format = 0;
    unsigned long items = 0;
    std::string bytes;  // format 8: the bytes; 16/32: the C array (short/long per item)
};

// nullopt if the property is missing or the window is gone. `remove` deletes it once read
// (ICCCM transfers).
std::optional<PropertyValue> get_property(Display* display, Window window, Atom property,
                                          Atom type = AnyPropertyType, bool remove = false);
// Format-32 properties of type WINDOW/CARDINAL/ATOM as a list of values.
std::vector<unsigned long> get_longs(Display* display, Window window, Atom property,
                                     Atom type = AnyPropertyType);

}  // namespace deskbox::x11
