#include "x11/properties.hpp"

#include <climits>
#include <memory>

#include "x11/error_trap.hpp"

namespace deskbox::x11 {

std::optional<PropertyValue> get_property(Display* display, Window window, Atom property, Atom type,
                                          bool remove) {
    XErrorTrap trap(display);
    Atom actual_type = None;
    int format = 0;
    unsigned long items = 0, after = 0;
    unsigned char* data = nullptr;
    // LONG_MAX/4 longs: "all of it"; Xlib splits big replies itself.
    int status =
        XGetWindowProperty(display, window, property, 0, LONG_MAX / 4, remove ? True : False, type,
                           &actual_type, &format, &items, &after, &data);
    std::unique_ptr<unsigned char, int (*)(void*)> owned(data, XFree);
    // The reply is in, so is any error before it: no sync needed.
    if (status != Success || actual_type == None || trap.caught()) return std::nullopt;
    PropertyValue value;
    value.type = actual_type;
    value.format = format;
    value.items = items;
    std::size_t unit = format == 8 ? 1 : format == 16 ? sizeof(short) : sizeof(long);
    if (data) value.bytes.assign(reinterpret_cast<const char*>(data), items * unit);
    return value;
}

std::vector<unsigned long> get_longs(Display* display, Window window, Atom property, Atom type) {
    std::vector<unsigned long> out;
    auto value = get_property(display, window, property, type);
    if (!value || value->format != 32) return out;
    const auto* p = reinterpret_cast<const unsigned long*>(value->bytes.data());
    out.assign(p, p + value->items);
    return out;
}

}  // namespace deskbox::x11
