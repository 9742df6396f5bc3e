// WindowService against real X clients, under openbox and with no window manager.
#include <gtest/gtest.h>

#include <X11/Xatom.h>
#include <X11/Xlib.h>
#include <X11/Xutil.h>

#include <chrono>
#include <functional>
#include <thread>

#include "guest-desktop/services/window_service.hpp"
#include "guest-desktop/session/session_supervisor.hpp"
#include "tests/support/xvfb.hpp"

namespace deskbox::services {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// A plain client window painted in one colour, with UTF-8 title and WM_CLASS.
class TestWindow {
  public:
    TestWindow(Display* d, const std::string& title, const std::string& res_class, int x, int y,
               int w, int h, unsigned long color, bool override_redirect = false)
        : d_(d) {
        XSetWindowAttributes attrs{};
        attrs.background_pixel = color;
        attrs.override_redirect = override_redirect;
        window_ = XCreateWindow(d, DefaultRootWindow(d), x, y, static_cast<unsigned>(w),
                                static_cast<unsigned>(h), 0, CopyFromParent, InputOutput,
                                CopyFromParent, CWBackPixel | CWOverrideRedirect, &attrs);
        XSizeHints hints{};
        hints.flags = USPosition | USSize;
        hints.x = x, hints.y = y, hints.width = w, hints.height = h;
        std::string instance = res_class + "-instance";
        XClassHint class_hint{instance.data(), const_cast<char*>(res_class.c_str())};
        Xutf8SetWMProperties(d, window_, title.c_str(), title.c_str(), nullptr, 0, &hints, nullptr,
                             &class_hint);
        XSync(d, False);
    }
    ~TestWindow() {
        XDestroyWindow(d_, window_);
        XSync(d_, False);
    }
    void map() {
        XMapWindow(d_, window_);
        XSync(d_, False);
    }
    Window id() const { return window_; }

  private:
    Display* d_;
    Window window_;
};

const json* find_window(const json& list, Window id) {
    for (const auto& w : list["windows"])
        if (w["id"] == id) return &w;
    return nullptr;
}

// Polls list() until `ok` holds (bounded); returns the last listing.
json wait_listing(WindowService& service, const std::function<bool(const json&)>& ok) {
    json list;
    for (int i = 0; i < 500; ++i) {
        list = service.list();
        if (ok(list)) break;
        std::this_thread::sleep_for(20ms);
    }
    return list;
}

unsigned long pixel_at(Display* d, int x, int y) {
    XImage* image = XGetImage(d, DefaultRootWindow(d), x, y, 1, 1, AllPlanes, ZPixmap);
    if (!image) return ~0ul;
    unsigned long p = XGetPixel(image, 0, 0) & 0xffffff;
    XDestroyImage(image);
    return p;
}

void activate(Display* d, Window w) {
    XEvent ev{};
    ev.xclient.type = ClientMessage;
    ev.xclient.window = w;
    ev.xclient.message_type = XInternAtom(d, "_NET_ACTIVE_WINDOW", False);
    ev.xclient.format = 32;
    ev.xclient.data.l[0] = 2;  // source: pager, which WMs obey without focus-stealing checks
    ev.xclient.data.l[1] = CurrentTime;
    XSendEvent(d, DefaultRootWindow(d), False, SubstructureRedirectMask | SubstructureNotifyMask,
               &ev);
    XSync(d, False);
}

TEST(Windows, ListsClientsUnderOpenboxWithGeometryAndActive) {
    session::SessionOptions options;
    options.width = 1024;
    options.height = 768;
    session::SessionSupervisor session(options);
    session.start();
    ASSERT_EQ(session.info()["wm"], true);
    desktop::DisplayPtr connection(XOpenDisplay(session.display_name().c_str()));
    ASSERT_NE(connection, nullptr);
    Display* d = connection.get();  // outlives the windows below
    WindowService service(session.display_name());

    const std::string unicode_title = "Ünïcödé 日本語 😀";
    TestWindow a(d, "first window", "DeskboxA", 40, 60, 300, 200, 0x12ab34);
    TestWindow b(d, unicode_title, "DeskboxB", 500, 300, 320, 240, 0xab3412);
    a.map();
    b.map();

    json list = wait_listing(service, [&](const json& l) {
        const json* wa = find_window(l, a.id());
        const json* wb = find_window(l, b.id());
        return wa && wb && (*wa)["visible"] == true && (*wb)["visible"] == true &&
               l["active"] == b.id();
    });
    const json* wa = find_window(list, a.id());
    const json* wb = find_window(list, b.id());
    ASSERT_TRUE(wa && wb) << list.dump(2);
    EXPECT_EQ((*wa)["title"], "first window");
    EXPECT_EQ((*wb)["title"], unicode_title);
    EXPECT_EQ((*wa)["class"], "DeskboxA");
    EXPECT_EQ((*wa)["instance"], "DeskboxA-instance");
    EXPECT_EQ((*wa)["width"], 300);
    EXPECT_EQ((*wa)["height"], 200);
    EXPECT_EQ((*wb)["width"], 320);
    EXPECT_EQ((*wb)["height"], 240);
    // openbox focuses a newly mapped window: the last one is active.
    EXPECT_EQ(list["active"], b.id()) << list.dump(2);
    EXPECT_EQ((*wb)["active"], true);
    EXPECT_EQ((*wa)["active"], false);
    // The frame surrounds the client area.
    ASSERT_TRUE(wb->contains("frame"));
    EXPECT_LE((*wb)["frame"]["y"].get<int>(), (*wb)["y"].get<int>());
    EXPECT_GE((*wb)["frame"]["width"].get<int>(), 320);

    // The reported rectangle is where the window's pixels are on screen (frame-aware).
    for (const json* w : {wa, wb}) {
        unsigned long color = w == wa ? 0x12ab34 : 0xab3412;
        int x = (*w)["x"], y = (*w)["y"], width = (*w)["width"], height = (*w)["height"];
        EXPECT_EQ(pixel_at(d, x, y), color) << (*w).dump();
        EXPECT_EQ(pixel_at(d, x + width - 1, y + height - 1), color) << (*w).dump();
        EXPECT_NE(pixel_at(d, x - 1, y - 1), color) << (*w).dump();
    }

    activate(d, a.id());
    list = wait_listing(service, [&](const json& l) { return l["active"] == a.id(); });
    EXPECT_EQ(list["active"], a.id());
    wa = find_window(list, a.id());
    ASSERT_NE(wa, nullptr);
    EXPECT_EQ((*wa)["active"], true);
}

class WindowsWithoutWm : public testing::XvfbTest {};

TEST_F(WindowsWithoutWm, WalksTopLevelWindows) {
    Display* d = display();
    WindowService service(xvfb().display_name());
    TestWindow shown(d, "plain", "Plain", 10, 20, 100, 50, 0x0000ff);
    TestWindow hidden(d, "hidden", "Hidden", 200, 20, 60, 60, 0x00ff00);
    TestWindow popup(d, "popup", "Popup", 300, 300, 30, 30, 0xff0000, true);
    shown.map();
    popup.map();
    XSetInputFocus(d, shown.id(), RevertToParent, CurrentTime);
    XSync(d, False);

    json list = service.list();
    const json* s = find_window(list, shown.id());
    const json* h = find_window(list, hidden.id());
    ASSERT_TRUE(s && h) << list.dump(2);
    EXPECT_EQ(find_window(list, popup.id()), nullptr);  // override-redirect: not an app window
    EXPECT_EQ((*s)["x"], 10);
    EXPECT_EQ((*s)["y"], 20);
    EXPECT_EQ((*s)["width"], 100);
    EXPECT_EQ((*s)["height"], 50);
    EXPECT_EQ((*s)["visible"], true);
    EXPECT_EQ((*h)["visible"], false);
    EXPECT_EQ((*s)["title"], "plain");
    EXPECT_FALSE(s->contains("frame"));
    EXPECT_EQ(list["active"], shown.id());
    EXPECT_EQ((*s)["active"], true);
}

TEST(Windows, UnreachableDisplayIsAnError) {
    WindowService service(":4999");
    try {
        service.list();
        FAIL() << "expected an error";
    } catch (const ServiceError& e) {
        EXPECT_EQ(e.code(), "unavailable");
    }
}

}  // namespace
}  // namespace deskbox::services
