#include "guest-desktop/services/window_service.hpp"

#include <X11/Xatom.h>
#include <X11/Xutil.h>

#include <map>
#include <optional>
#include <set>
#include <vector>

#include "common/utf8.hpp"
#include "guest-desktop/services/params.hpp"
#include "guest-desktop/services/x_display.hpp"
#include "x11/error_trap.hpp"
#include "x11/properties.hpp"

namespace deskbox::services {

using nlohmann::json;
using x11::get_longs;
using x11::get_property;
using x11::XErrorTrap;

namespace {

struct Atoms {
    Atom client_list, active_window, wm_name_utf8, utf8_string, wm_state, frame_extents, wm_pid,
        supporting_check;
    explicit Atoms(x11::AtomCache& cache) {
        auto a = cache.intern({"_NET_CLIENT_LIST", "_NET_ACTIVE_WINDOW", "_NET_WM_NAME",
                               "UTF8_STRING", "WM_STATE", "_NET_FRAME_EXTENTS", "_NET_WM_PID",
                               "_NET_SUPPORTING_WM_CHECK"});
        client_list = a[0], active_window = a[1], wm_name_utf8 = a[2], utf8_string = a[3];
        wm_state = a[4], frame_extents = a[5], wm_pid = a[6], supporting_check = a[7];
    }
};

std::vector<Window> children_of(Display* d, Window w) {
    Window root_return, parent_return;
    Window* children = nullptr;
    unsigned int count = 0;
    std::vector<Window> out;
    if (XQueryTree(d, w, &root_return, &parent_return, &children, &count) && children) {
        out.assign(children, children + count);
        XFree(children);
    }
    return out;
}

Window parent_of(Display* d, Window w) {
    Window root_return, parent_return = None;
    Window* children = nullptr;
    unsigned int count = 0;
    if (!XQueryTree(d, w, &root_return, &parent_return, &children, &count)) return None;
    if (children) XFree(children);
    return parent_return;
}

bool has_property(Display* d, Window w, Atom property) {
    return get_property(d, w, property).has_value();
}

// A live EWMH window manager: the root's check window points at itself (a crashed WM leaves
// the root property behind, pointing at a destroyed window).
bool ewmh_wm_present(Display* d, Window root, const Atoms& atoms) {
    auto check = get_longs(d, root, atoms.supporting_check, XA_WINDOW);
    if (check.size() != 1 || check[0] == 0) return false;
    auto self = get_longs(d, check[0], atoms.supporting_check, XA_WINDOW);
    return self.size() == 1 && self[0] == check[0];
}

// The client window (with WM_STATE) at or below `w`, as XmuClientWindow finds it.
Window find_client(Display* d, Window w, const Atoms& atoms, int depth) {
    if (has_property(d, w, atoms.wm_state)) return w;
    if (depth == 0) return None;
    for (Window child : children_of(d, w)) {
        Window found = find_client(d, child, atoms, depth - 1);
        if (found) return found;
    }
    return None;
}

std::string window_title(Display* d, Window w, const Atoms& atoms) {
    if (auto v = get_property(d, w, atoms.wm_name_utf8, atoms.utf8_string); v && v->format == 8)
        return utf8::to_valid(v->bytes);
    XTextProperty prop{};
    std::string title;
    if (XGetWMName(d, w, &prop) && prop.value) {
        char** list = nullptr;
        int count = 0;
        // Converts STRING (Latin-1) and COMPOUND_TEXT to UTF-8 whatever the locale.
        if (Xutf8TextPropertyToTextList(d, &prop, &list, &count) >= Success && list) {
            if (count > 0 && list[0]) title = list[0];
            XFreeStringList(list);
        }
        XFree(prop.value);
    }
    return utf8::to_valid(title);
}

std::optional<json> describe(Display* d, Window root, Window w, const Atoms& atoms) {
    XErrorTrap trap(d);
    XWindowAttributes attrs{};
    if (!XGetWindowAttributes(d, w, &attrs)) return std::nullopt;
    int x = 0, y = 0;
    Window child;
    if (!XTranslateCoordinates(d, w, root, 0, 0, &x, &y, &child)) return std::nullopt;
    json info = {{"id", w},
                 {"title", window_title(d, w, atoms)},
                 {"class", ""},
                 {"instance", ""},
                 {"x", x},
                 {"y", y},
                 {"width", attrs.width},
                 {"height", attrs.height},
                 {"visible", attrs.map_state == IsViewable}};
    XClassHint hint{};
    if (XGetClassHint(d, w, &hint)) {
        if (hint.res_class) info["class"] = utf8::to_valid(hint.res_class);
        if (hint.res_name) info["instance"] = utf8::to_valid(hint.res_name);
        if (hint.res_class) XFree(hint.res_class);
        if (hint.res_name) XFree(hint.res_name);
    }
    auto pid = get_longs(d, w, atoms.wm_pid, XA_CARDINAL);
    if (pid.size() == 1) info["pid"] = pid[0];
    auto extents = get_longs(d, w, atoms.frame_extents, XA_CARDINAL);  // left, right, top, bottom
    if (extents.size() == 4) {
        long left = static_cast<long>(extents[0]), right = static_cast<long>(extents[1]);
        long top = static_cast<long>(extents[2]), bottom = static_cast<long>(extents[3]);
        info["frame"] = {{"x", x - left},
                         {"y", y - top},
                         {"width", attrs.width + left + right},
                         {"height", attrs.height + top + bottom}};
    }
    // Vanished while we looked? Every request above has a reply, so no sync is needed.
    if (trap.caught()) return std::nullopt;
    return info;
}

// Without an EWMH window manager: with none at all, top-level windows that have a name or a
// class are the applications' own; with a WM (non-EWMH or just crashed), only WM_STATE
// windows are clients, the rest are frames and WM bits.
std::vector<Window> clients_without_ewmh(x11::XConnection& connection, Window root,
                                         const Atoms& atoms) {
    Display* d = connection.get();
    std::vector<Window> clients;
    Atom wm_s0 = connection.atoms().intern_one("WM_S" + std::to_string(DefaultScreen(d)));
    bool any_wm = XGetSelectionOwner(d, wm_s0) != None;
    XErrorTrap trap(d);
    for (Window top : children_of(d, root)) {
        Window client = find_client(d, top, atoms, 3);
        if (client) {
            clients.push_back(client);
            continue;
        }
        if (any_wm) continue;
        XWindowAttributes attrs{};
        if (!XGetWindowAttributes(d, top, &attrs) || attrs.override_redirect ||
            attrs.c_class != InputOutput)
            continue;
        XClassHint hint{};
        bool named = has_property(d, top, atoms.wm_name_utf8) || has_property(d, top, XA_WM_NAME);
        if (XGetClassHint(d, top, &hint)) {
            named = true;
            if (hint.res_class) XFree(hint.res_class);
            if (hint.res_name) XFree(hint.res_name);
        }
        if (named) clients.push_back(top);
    }
    return clients;
}

// The client holding the input focus: the focus window's top-level, mapped to its client.
std::optional<Window> focused_client(Display* d, Window root, const std::vector<Window>& clients) {
    XErrorTrap trap(d);
    Window focus = None;
    int revert = 0;
    XGetInputFocus(d, &focus, &revert);
    std::map<Window, Window> toplevel_to_client;
    for (Window c : clients) {
        Window w = c;
        for (Window p = parent_of(d, w); p && p != root; p = parent_of(d, w)) w = p;
        toplevel_to_client[w] = c;
    }
    Window w = focus;
    if (w == None || w == PointerRoot) return std::nullopt;
    for (Window p = parent_of(d, w); p && p != root; p = parent_of(d, w)) w = p;
    if (auto it = toplevel_to_client.find(w); it != toplevel_to_client.end()) return it->second;
    return std::nullopt;
}

}  // namespace

WindowService::WindowService(std::string display_name) : display_name_(std::move(display_name)) {}

WindowService::~WindowService() = default;

json WindowService::list(const json& params) {
    params::object(params, {});
    std::lock_guard lock(mutex_);
    x11::XConnection& connection = live_display(connection_, display_name_);
    Display* d = connection.get();
    Window root = DefaultRootWindow(d);
    Atoms atoms(connection.atoms());

    std::vector<Window> clients;
    const bool ewmh = ewmh_wm_present(d, root, atoms);
    if (ewmh) {
        for (unsigned long w : get_longs(d, root, atoms.client_list, XA_WINDOW))
            clients.push_back(static_cast<Window>(w));
    } else {
        clients = clients_without_ewmh(connection, root, atoms);
    }

    // The active client: the WM's word, else the input focus mapped to its top-level.
    std::optional<Window> active;
    if (ewmh) {
        auto a = get_longs(d, root, atoms.active_window, XA_WINDOW);
        if (!a.empty() && a[0] != 0) active = static_cast<Window>(a[0]);
    }
    if (!active) active = focused_client(d, root, clients);

    json windows = json::array();
    std::set<Window> seen;
    for (Window w : clients) {
        if (!seen.insert(w).second) continue;
        auto info = describe(d, root, w, atoms);
        if (!info) continue;
        (*info)["active"] = active && *active == w;
        windows.push_back(std::move(*info));
    }
    if (connection_->broken()) {
        connection_.reset();
        throw ServiceError(error_code::unavailable,
                           "lost the connection to X display " + display_name_);
    }
    return {{"windows", std::move(windows)}, {"active", active ? json(*active) : json(nullptr)}};
}

}  // namespace deskbox::services
