// The XTest injector against a real Xvfb: an independent client window (EventWindow) records
// what arrives, and the tests compare it with what was asked for.
#include <gtest/gtest.h>  // before Xlib: its None/Bool macros break gtest's headers

#include <X11/XKBlib.h>
#include <X11/extensions/XTest.h>
#include <X11/keysym.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.hpp"
#include "input/x11/xtest_injector.hpp"
#include "tests/support/event_window.hpp"
#include "tests/support/xvfb.hpp"
#include "x11/connection.hpp"
#include "x11/error_trap.hpp"

namespace deskbox::input {
namespace {

using testing::ButtonEvent;
using testing::EventLog;
using testing::EventWindow;
using testing::KeyEvent;

constexpr int kWidth = 1280;
constexpr int kHeight = 800;

std::vector<KeySym> keyboard_mapping(Display* dpy, int* per_keycode) {
    int min = 0, max = 0;
    XDisplayKeycodes(dpy, &min, &max);
    KeySym* syms = XGetKeyboardMapping(dpy, static_cast<KeyCode>(min), max - min + 1, per_keycode);
    std::vector<KeySym> out(syms, syms + (max - min + 1) * *per_keycode);
    XFree(syms);
    return out;
}

bool key_has_symbols(Display* dpy, KeyCode keycode) {
    int per = 0;
    KeySym* syms = XGetKeyboardMapping(dpy, keycode, 1, &per);
    bool any = false;
    for (int i = 0; i < per; ++i) any = any || syms[i] != NoSymbol;
    XFree(syms);
    return any;
}

std::vector<int> keys_down(Display* dpy) {
    char keys[32];
    XQueryKeymap(dpy, keys);
    std::vector<int> down;
    for (int kc = 0; kc < 256; ++kc) {
        if (keys[kc / 8] & (1 << (kc % 8))) down.push_back(kc);
    }
    return down;
}

std::vector<KeyEvent> presses_of(const std::vector<KeyEvent>& keys) {
    std::vector<KeyEvent> out;
    for (const auto& key : keys) {
        if (key.press) out.push_back(key);
    }
    return out;
}

// Builders: designated initializers that skip members trip -Wmissing-field-initializers.
Click click(std::optional<Point> at, Button button = Button::left, int count = 1,
            std::vector<Keysym> hold_keys = {}) {
    Click c;
    c.at = at;
    c.button = button;
    c.count = count;
    c.hold_keys = std::move(hold_keys);
    return c;
}
Drag drag(std::vector<Point> path, Button button = Button::left,
          std::vector<Keysym> hold_keys = {}) {
    Drag d;
    d.path = std::move(path);
    d.button = button;
    d.hold_keys = std::move(hold_keys);
    return d;
}
Scroll scroll(std::optional<Point> at, int dx, int dy) {
    Scroll s;
    s.at = at;
    s.dx = dx;
    s.dy = dy;
    return s;
}

class InjectorTest : public testing::XvfbTest {
  protected:
    desktop::XvfbOptions xvfb_options() const override {
        desktop::XvfbOptions options;
        options.width = kWidth;
        options.height = kHeight;
        return options;
    }
    void SetUp() override {
        XvfbTest::SetUp();
        window_ = std::make_unique<EventWindow>(xvfb().display_name());
        injector_ = std::make_unique<XTestInjector>(xvfb().display_name());
    }
    void TearDown() override {
        injector_.reset();
        window_.reset();
        XvfbTest::TearDown();
    }

    EventWindow& window() { return *window_; }
    XTestInjector& injector() { return *injector_; }
    void destroy_injector() { injector_.reset(); }

    // Runs the action and returns everything the window received because of it.
    EventLog run(const Action& action) {
        start_recording();
        injector().execute(action);
        EXPECT_TRUE(window().settle());
        return window().snapshot();
    }

    std::string type(const std::string& text) {
        start_recording();
        injector().execute(Type{text});
        return window().wait_for_text(text);
    }

    // Forgets earlier events, including those of earlier actions the window has not read yet.
    void start_recording() {
        ASSERT_TRUE(window().settle());
        window().clear();
    }

    void set_layout(const std::string& layout) {
        const auto result = run_process({"setxkbmap", "-display", xvfb().display_name(), layout});
        ASSERT_EQ(result.status.exit_code, 0) << result.err;
    }

  private:
    std::unique_ptr<EventWindow> window_;
    std::unique_ptr<XTestInjector> injector_;
};

// ---- pointer --------------------------------------------------------------------------------

TEST_F(InjectorTest, ClickLandsOnTheExactPixel) {
    for (const Point point : {Point{0, 0}, Point{kWidth - 1, kHeight - 1}, Point{640, 400},
                              Point{1, kHeight - 2}, Point{kWidth - 2, 1}, Point{777, 3}}) {
        const EventLog log = run(click(point));
        ASSERT_EQ(log.buttons.size(), 2u) << point.x << "," << point.y;
        for (const ButtonEvent& event : log.buttons) {
            EXPECT_EQ(event.button, 1u);
            EXPECT_EQ(event.x, point.x);
            EXPECT_EQ(event.y, point.y);
        }
        EXPECT_TRUE(log.buttons[0].press);
        EXPECT_FALSE(log.buttons[1].press);
        EXPECT_EQ(injector().cursor_position(), point);
    }
}

TEST_F(InjectorTest, ButtonsArriveWithTheirNumbers) {
    const std::pair<Button, unsigned> buttons[] = {{Button::left, 1},
                                                   {Button::middle, 2},
                                                   {Button::right, 3},
                                                   {Button::back, 8},
                                                   {Button::forward, 9}};
    for (const auto& [button, number] : buttons) {
        const EventLog log = run(click(Point{50, 60}, button));
        ASSERT_EQ(log.buttons.size(), 2u);
        EXPECT_EQ(log.buttons[0].button, number);
        EXPECT_EQ(log.buttons[1].button, number);
        EXPECT_TRUE(log.buttons[0].press);
        EXPECT_FALSE(log.buttons[1].press);
    }
}

TEST_F(InjectorTest, DoubleAndTripleClicksArriveAsConsecutivePairs) {
    for (int count : {2, 3}) {
        const EventLog log = run(click(Point{300, 200}, Button::left, count));
        ASSERT_EQ(log.buttons.size(), static_cast<std::size_t>(2 * count));
        for (std::size_t i = 0; i < log.buttons.size(); ++i) {
            EXPECT_EQ(log.buttons[i].press, i % 2 == 0) << i;
            EXPECT_EQ(log.buttons[i].button, 1u);
            EXPECT_EQ(log.buttons[i].x, 300);
            EXPECT_EQ(log.buttons[i].y, 200);
        }
        // Nothing between the clicks: the pointer only moved there before the first press.
        for (const auto& motion : log.motions) EXPECT_LE(motion.time, log.buttons[0].time);
    }
}

TEST_F(InjectorTest, ShiftClickHoldsShiftDuringTheClick) {
    const EventLog log = run(click(Point{10, 20}, Button::left, 1, {XK_Shift_L}));
    ASSERT_EQ(log.buttons.size(), 2u);
    EXPECT_TRUE(log.buttons[0].state & ShiftMask);
    EXPECT_TRUE(log.buttons[1].state & ShiftMask);
    ASSERT_EQ(log.keys.size(), 2u);
    EXPECT_EQ(log.keys[0].keysym, static_cast<KeySym>(XK_Shift_L));
    EXPECT_TRUE(log.keys[0].press);
    EXPECT_FALSE(log.keys[1].press);
    EXPECT_TRUE(keys_down(display()).empty());

    const EventLog ctrl = run(click(Point{11, 21}, Button::left, 1, {XK_Control_L, XK_Alt_L}));
    ASSERT_EQ(ctrl.buttons.size(), 2u);
    EXPECT_EQ(ctrl.buttons[0].state & (ControlMask | Mod1Mask), unsigned{ControlMask | Mod1Mask});
    EXPECT_TRUE(keys_down(display()).empty());
}

TEST_F(InjectorTest, DragFollowsEveryPointOfThePath) {
    injector().execute(Move{Point{0, 0}});
    const std::vector<Point> path = {{100, 100}, {101, 100}, {105, 103}, {150, 120},     {150, 121},
                                     {400, 500}, {399, 499}, {10, 700},  {kWidth - 1, 0}};
    const EventLog log = run(drag(path));
    ASSERT_EQ(log.motions.size(), path.size());
    for (std::size_t i = 0; i < path.size(); ++i) {
        EXPECT_EQ(log.motions[i].x, path[i].x) << i;
        EXPECT_EQ(log.motions[i].y, path[i].y) << i;
        // The button is down for every motion after the first point.
        EXPECT_EQ((log.motions[i].state & Button1Mask) != 0, i > 0) << i;
    }
    ASSERT_EQ(log.buttons.size(), 2u);
    EXPECT_TRUE(log.buttons[0].press);
    EXPECT_EQ(log.buttons[0].x, path.front().x);
    EXPECT_EQ(log.buttons[0].y, path.front().y);
    EXPECT_FALSE(log.buttons[1].press);
    EXPECT_EQ(log.buttons[1].x, path.back().x);
    EXPECT_EQ(log.buttons[1].y, path.back().y);
}

TEST_F(InjectorTest, DragWithHeldKeyAndRightButton) {
    const EventLog log = run(drag({{20, 20}, {40, 40}, {60, 30}}, Button::right, {XK_Control_L}));
    ASSERT_EQ(log.buttons.size(), 2u);
    EXPECT_EQ(log.buttons[0].button, 3u);
    EXPECT_TRUE(log.buttons[0].state & ControlMask);
    EXPECT_TRUE(log.buttons[1].state & ControlMask);  // released before the key
    EXPECT_TRUE(keys_down(display()).empty());
}

// computer_20241022's left_click_drag without start_coordinate: pressed where the pointer is.
TEST_F(InjectorTest, DragFromThePointerPressesWhereItIs) {
    injector().execute(Move{Point{200, 150}});
    Drag from_pointer = drag({{250, 180}, {300, 250}});
    from_pointer.from_pointer = true;
    const EventLog log = run(from_pointer);
    ASSERT_EQ(log.buttons.size(), 2u);
    EXPECT_TRUE(log.buttons[0].press);
    EXPECT_EQ(log.buttons[0].x, 200);
    EXPECT_EQ(log.buttons[0].y, 150);
    ASSERT_EQ(log.motions.size(), 2u) << "no motion before the press";
    EXPECT_TRUE(log.motions[0].state & Button1Mask);
    EXPECT_FALSE(log.buttons[1].press);
    EXPECT_EQ(log.buttons[1].x, 300);
    EXPECT_EQ(log.buttons[1].y, 250);
}

TEST_F(InjectorTest, ScrollNotchesArriveAsWheelButtonsAtThePoint) {
    const auto count = [](const EventLog& log, unsigned button, bool press) {
        int n = 0;
        for (const auto& event : log.buttons) n += event.button == button && event.press == press;
        return n;
    };
    const EventLog down_left = run(scroll(Point{300, 200}, -2, 3));
    EXPECT_EQ(down_left.buttons.size(), 10u);
    EXPECT_EQ(count(down_left, 5, true), 3);
    EXPECT_EQ(count(down_left, 5, false), 3);
    EXPECT_EQ(count(down_left, 6, true), 2);
    EXPECT_EQ(count(down_left, 6, false), 2);
    for (const auto& event : down_left.buttons) {
        EXPECT_EQ(event.x, 300);
        EXPECT_EQ(event.y, 200);
    }

    const EventLog up_right = run(scroll(Point{kWidth - 1, kHeight - 1}, 4, -1));
    EXPECT_EQ(up_right.buttons.size(), 10u);
    EXPECT_EQ(count(up_right, 4, true), 1);
    EXPECT_EQ(count(up_right, 7, true), 4);
    EXPECT_EQ(count(up_right, 7, false), 4);
    for (const auto& event : up_right.buttons) EXPECT_EQ(event.x, kWidth - 1);

    // Without a point the wheel turns where the pointer is.
    const EventLog here = run(scroll(std::nullopt, 0, 1));
    ASSERT_EQ(here.buttons.size(), 2u);
    EXPECT_EQ(here.buttons[0].button, 5u);
    EXPECT_EQ(here.buttons[0].x, kWidth - 1);
}

TEST_F(InjectorTest, MouseDownAndUpAreSeparate) {
    const EventLog down = run(MouseDown{Button::left, Point{10, 20}});
    ASSERT_EQ(down.buttons.size(), 1u);
    EXPECT_TRUE(down.buttons[0].press);
    EXPECT_EQ(down.buttons[0].x, 10);
    EXPECT_EQ(down.buttons[0].y, 20);

    const EventLog moved = run(Move{Point{30, 40}});
    ASSERT_EQ(moved.motions.size(), 1u);
    EXPECT_TRUE(moved.motions[0].state & Button1Mask);

    const EventLog up = run(MouseUp{Button::left, Point{50, 60}});
    ASSERT_EQ(up.buttons.size(), 1u);
    EXPECT_FALSE(up.buttons[0].press);
    EXPECT_EQ(up.buttons[0].x, 50);
    EXPECT_EQ(up.buttons[0].y, 60);
}

// What openbox does to focus a window on click: a synchronous passive grab, so the server
// freezes the pointer at the press and queues what follows until the grabbing client replays
// it. The injector must return only once its events have really happened.
class SyncGrabber {
  public:
    SyncGrabber(const std::string& display_name, std::chrono::milliseconds hold)
        : dpy_(XOpenDisplay(display_name.c_str())), hold_(hold) {
        root_ = DefaultRootWindow(dpy_);
        XGrabButton(dpy_, AnyButton, AnyModifier, root_, False, ButtonPressMask, GrabModeSync,
                    GrabModeAsync, 0, 0);
        XSync(dpy_, False);
        thread_ = std::thread([this] { run(); });
    }
    ~SyncGrabber() {
        stop_ = true;
        thread_.join();
        XUngrabButton(dpy_, AnyButton, AnyModifier, root_);
        XCloseDisplay(dpy_);
    }
    int presses() const { return presses_; }

  private:
    void run() {
        while (!stop_) {
            while (XPending(dpy_)) {
                XEvent event;
                XNextEvent(dpy_, &event);
                if (event.type != ButtonPress) continue;
                ++presses_;
                std::this_thread::sleep_for(hold_);  // a busy window manager
                XAllowEvents(dpy_, ReplayPointer, CurrentTime);
                XFlush(dpy_);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    Display* dpy_;
    Window root_ = 0;
    std::chrono::milliseconds hold_;
    std::atomic<bool> stop_{false};
    std::atomic<int> presses_{0};
    std::thread thread_;
};

TEST_F(InjectorTest, ActionsReturnAfterAGrabbingWindowManagerLetTheirEventsThrough) {
    SyncGrabber grabber(xvfb().display_name(), std::chrono::milliseconds(40));
    injector().execute(Move{Point{10, 10}});
    injector().execute(drag({{310, 310}, {320, 330}, {340, 350}}));
    EXPECT_EQ(injector().cursor_position(), (Point{340, 350}));
    injector().execute(MouseDown{Button::left, Point{50, 60}});
    injector().execute(MouseUp{Button::left, Point{70, 80}});
    EXPECT_EQ(injector().cursor_position(), (Point{70, 80}));
    injector().execute(click(Point{200, 210}));
    EXPECT_EQ(injector().cursor_position(), (Point{200, 210}));
    EXPECT_EQ(grabber.presses(), 3);
}

TEST_F(InjectorTest, CursorPositionAfterMove) {
    injector().execute(Move{Point{123, 456}});
    EXPECT_EQ(injector().execute(CursorPosition{}), (nlohmann::json{{"x", 123}, {"y", 456}}));
    injector().execute(click(Point{kWidth - 1, 0}));
    EXPECT_EQ(injector().cursor_position(), (Point{kWidth - 1, 0}));
    EXPECT_EQ(injector().execute(Screenshot{}), nlohmann::json::object());
}

TEST_F(InjectorTest, BadArgumentsAreRejectedBeforeAnythingHappens) {
    start_recording();
    try {
        injector().execute(click(Point{kWidth, 10}));
        FAIL() << "no error";
    } catch (const ActionError& error) {
        EXPECT_EQ(error.field(), "x");
    }
    try {
        injector().execute(drag({{0, 0}, {5, kHeight}}));
        FAIL() << "no error";
    } catch (const ActionError& error) {
        EXPECT_EQ(error.field(), "path[1][1]");
    }
    try {
        injector().execute(click(std::nullopt, Button::left, 4));
        FAIL() << "no error";
    } catch (const ActionError& error) {
        EXPECT_EQ(error.field(), "count");
    }
    try {
        injector().execute(
            Type{"ab\x01"
                 "c"});
        FAIL() << "no error";
    } catch (const ActionError& error) {
        EXPECT_EQ(error.field(), "text");
        EXPECT_NE(std::string(error.what()).find("U+0001"), std::string::npos) << error.what();
    }
    EXPECT_THROW(injector().execute(Wait{-1}), ActionError);
    ASSERT_TRUE(window().settle());
    const EventLog log = window().snapshot();
    EXPECT_TRUE(log.buttons.empty());
    EXPECT_TRUE(log.keys.empty());  // "ab" was not typed before the bad character was found
}

// ---- typing ---------------------------------------------------------------------------------

const std::vector<std::string> kTexts = {
    "Grêmio",
    "naïve café",
    "日本語",
    "😀",
    R"(--help; rm -rf "$x")",
    "line one\nline two\n\tindented\tx\n",
    R"(Hello, World! @#$%^&*()_+{}|:"<>?~)",
    "`1234567890-=[]\\;',./ ÀÉÎÕÜ ßøæ €£¥ Привет Ωμέγα",
};

TEST_F(InjectorTest, TypesTextExactlyOnUsLayout) {
    ASSERT_TRUE(window().has_input_context()) << "text is decoded by an X input method";
    for (const auto& text : kTexts) EXPECT_EQ(type(text), text);
}

TEST_F(InjectorTest, ReturnAndTabArriveAsTheirKeysyms) {
    start_recording();
    injector().execute(Type{"a\nb\tc\r\nd"});
    EXPECT_EQ(window().wait_for_text("a\nb\tc\nd"), "a\nb\tc\nd");
    std::vector<KeySym> pressed;
    for (const auto& key : presses_of(window().key_events())) pressed.push_back(key.keysym);
    EXPECT_EQ(pressed, (std::vector<KeySym>{XK_a, XK_Return, XK_b, XK_Tab, XK_c, XK_Return, XK_d}));
}

TEST_F(InjectorTest, TypesTextExactlyOnGermanLayout) {
    set_layout("de");
    for (const auto& text : kTexts) EXPECT_EQ(type(text), text);
    // "z" and "y" swap places on a German keyboard; the keycode must follow the layout.
    EXPECT_EQ(type("zyZY"), "zyZY");
}

TEST_F(InjectorTest, UsesTheLayoutsOwnKeysBeforeSpareKeycodes) {
    set_layout("de");
    // On a German keyboard @ is AltGr+q and € is AltGr+e: no remapping needed.
    EXPECT_EQ(type("@€"), "@€");
    const auto spares = injector().spare_keycodes();
    std::vector<KeySym> pressed;
    for (const auto& key : presses_of(window().key_events())) {
        pressed.push_back(key.keysym);
        EXPECT_EQ(std::count(spares.begin(), spares.end(), key.keycode), 0) << key.keycode;
    }
    EXPECT_EQ(pressed,
              (std::vector<KeySym>{XK_ISO_Level3_Shift, XK_at, XK_ISO_Level3_Shift, XK_EuroSign}));
    for (KeyCode kc : spares) EXPECT_FALSE(key_has_symbols(display(), kc)) << int{kc};
}

TEST_F(InjectorTest, TypesTextExactlyOnFrenchLayout) {
    set_layout("fr");
    for (const auto& text : kTexts) EXPECT_EQ(type(text), text);
}

TEST_F(InjectorTest, TypesTextExactlyInTheCurrentGroupOfAMultiLayoutKeymap) {
    // Two groups; the second (Russian) is locked, so Latin letters are not in the current group.
    ASSERT_EQ(
        run_process({"setxkbmap", "-display", xvfb().display_name(), "us,ru"}).status.exit_code, 0);
    XkbLockGroup(display(), XkbUseCoreKbd, 1);
    XSync(display(), False);
    for (const auto& text : {std::string("Привет, мир"), std::string("abc XYZ"), kTexts[1]})
        EXPECT_EQ(type(text), text);
}

TEST_F(InjectorTest, CapsLockDoesNotChangeTypedText) {
    injector().execute(Key{{KeyChord{{XK_Caps_Lock}}}});
    XkbStateRec state{};
    XkbGetState(display(), XkbUseCoreKbd, &state);
    ASSERT_TRUE(state.locked_mods & LockMask);

    EXPECT_EQ(type("aBc déF 1!"), "aBc déF 1!");

    XkbGetState(display(), XkbUseCoreKbd, &state);
    EXPECT_TRUE(state.locked_mods & LockMask) << "CapsLock is restored after typing";
}

TEST_F(InjectorTest, HeldShiftDoesNotChangeTypedTextAndStaysHeld) {
    const KeyCode shift = XKeysymToKeycode(display(), XK_Shift_L);
    XTestFakeKeyEvent(display(), shift, True, 0);
    XSync(display(), False);

    EXPECT_EQ(type("abc Déf 2@"), "abc Déf 2@");

    const auto down = keys_down(display());
    EXPECT_EQ(down, std::vector<int>{shift}) << "the user's Shift is pressed again";
    XTestFakeKeyEvent(display(), shift, False, 0);
    XSync(display(), False);
}

TEST_F(InjectorTest, ManyDistinctUnmappedCharactersReuseSpareKeycodesSafely) {
    // Far more distinct characters missing from the layout than spare positions (2 levels per
    // spare keycode), twice over with ASCII in between: keycodes are remapped many times while
    // the window is still reading, and every character must still arrive as sent.
    const std::size_t spares = injector().spare_keycodes().size();
    ASSERT_GT(spares, 4u);
    const char32_t count = static_cast<char32_t>(2 * spares + 40);
    std::string text;
    for (int round = 0; round < 2; ++round) {
        for (char32_t i = 0; i < count; ++i) {
            const char32_t cp = 0x4e00 + (round == 0 ? i : (i * 7) % count);
            text += static_cast<char>(0xe0 | (cp >> 12));
            text += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
            text += static_cast<char>(0x80 | (cp & 0x3f));
            if (i % 5 == 0) text += "ab ";
        }
    }
    EXPECT_EQ(type(text), text);
}

TEST_F(InjectorTest, SpareKeycodesAreEmptiedWhenTheInjectorIsDestroyed) {
    int per_before = 0;
    const auto before = keyboard_mapping(display(), &per_before);
    const auto spares = injector().spare_keycodes();
    ASSERT_FALSE(spares.empty());

    const std::string text = "日本語😀é ñ Ωμέγα";
    EXPECT_EQ(type(text), text);
    bool remapped = false;
    for (KeyCode kc : spares) remapped = remapped || key_has_symbols(display(), kc);
    EXPECT_TRUE(remapped) << "typing needed spare keycodes";

    destroy_injector();
    for (KeyCode kc : spares) EXPECT_FALSE(key_has_symbols(display(), kc)) << int{kc};
    int per_after = 0;
    const auto after = keyboard_mapping(display(), &per_after);
    ASSERT_EQ(per_after, per_before);
    EXPECT_EQ(after, before);
}

// ---- keys -----------------------------------------------------------------------------------

TEST_F(InjectorTest, ChordPressesInOrderWithStateBitsAndReleasesInReverse) {
    const EventLog log = run(Key{{KeyChord{{XK_Control_L, XK_Shift_L, XK_t}}}});
    ASSERT_EQ(log.keys.size(), 6u);
    const KeyCode ctrl = XKeysymToKeycode(display(), XK_Control_L);
    const KeyCode shift = XKeysymToKeycode(display(), XK_Shift_L);
    const KeyCode t = XKeysymToKeycode(display(), XK_t);
    const std::vector<std::pair<bool, unsigned>> expected = {
        {true, ctrl}, {true, shift}, {true, t}, {false, t}, {false, shift}, {false, ctrl}};
    for (std::size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(log.keys[i].press, expected[i].first) << i;
        EXPECT_EQ(log.keys[i].keycode, expected[i].second) << i;
    }
    EXPECT_EQ(log.keys[2].state & (ControlMask | ShiftMask), unsigned{ControlMask | ShiftMask});
    EXPECT_TRUE(keys_down(display()).empty());
}

TEST_F(InjectorTest, NamedKeysAndSuccessiveChords) {
    const EventLog log = run(Key{{KeyChord{{XK_Return}}, KeyChord{{XK_Control_L, XK_a}},
                                  KeyChord{{XK_Delete}}, KeyChord{{XK_F5}}}});
    std::vector<KeySym> pressed;
    for (const auto& key : presses_of(log.keys)) pressed.push_back(key.keysym);
    EXPECT_EQ(pressed, (std::vector<KeySym>{XK_Return, XK_Control_L, XK_a, XK_Delete, XK_F5}));
    const auto presses = presses_of(log.keys);
    EXPECT_TRUE(presses[2].state & ControlMask);
    EXPECT_FALSE(presses[3].state & ControlMask) << "ctrl is released between chords";
}

TEST_F(InjectorTest, KeysNeedingShiftOrMissingFromTheLayoutStillArrive) {
    // "exclam" needs Shift on a US keyboard, "eacute" needs a spare keycode.
    const EventLog log = run(Key{{KeyChord{{XK_exclam}}, KeyChord{{XK_eacute}}}});
    EXPECT_EQ(log.text, "!é");
    // A spare key in a chord means its keysym whatever else the chord holds.
    const EventLog shifted = run(Key{{KeyChord{{XK_Shift_L, XK_ntilde}}}});
    const auto presses = presses_of(shifted.keys);
    ASSERT_EQ(presses.size(), 2u);
    EXPECT_TRUE(presses[1].state & ShiftMask);
    EXPECT_EQ(presses[1].keysym, static_cast<KeySym>(XK_ntilde));
}

TEST_F(InjectorTest, NothingStaysPressedWhenAKeyActionThrows) {
    EXPECT_THROW(injector().execute(Key{{KeyChord{{XK_Control_L, XK_Shift_L, NoSymbol}}}}),
                 std::runtime_error);
    ASSERT_TRUE(window().settle());
    EXPECT_TRUE(keys_down(display()).empty());

    // More keys missing from the layout than there are spare keycodes, all held at once.
    KeyChord chord{{XK_Control_L}};
    for (std::size_t i = 0; i <= injector().spare_keycodes().size(); ++i)
        chord.keys.push_back(static_cast<Keysym>(0x01004e00 + i));
    start_recording();
    try {
        injector().execute(Key{{chord}});
        FAIL() << "no error";
    } catch (const std::runtime_error& error) {
        EXPECT_NE(std::string(error.what()).find("spare keycodes are held down"), std::string::npos)
            << error.what();
    }
    ASSERT_TRUE(window().settle());
    EXPECT_TRUE(keys_down(display()).empty());
    const auto keys = window().key_events();
    EXPECT_FALSE(keys.empty());
    EXPECT_EQ(std::count_if(keys.begin(), keys.end(), [](auto& k) { return k.press; }),
              std::count_if(keys.begin(), keys.end(), [](auto& k) { return !k.press; }));
}

TEST_F(InjectorTest, HoldKeyPressesForTheDurationThenReleases) {
    const EventLog log = run(HoldKey{KeyChord{{XK_Control_L, XK_Shift_L}}, 50});
    ASSERT_EQ(log.keys.size(), 4u);
    EXPECT_TRUE(log.keys[0].press);
    EXPECT_TRUE(log.keys[1].press);
    EXPECT_FALSE(log.keys[2].press);
    EXPECT_EQ(log.keys[2].keysym, static_cast<KeySym>(XK_Shift_L));
    EXPECT_FALSE(log.keys[3].press);
    EXPECT_GE(log.keys[2].time, log.keys[1].time);
    EXPECT_TRUE(keys_down(display()).empty());
}

// A human at a viewer: keys go down and up one by one, across actions. Shift held by the
// human stays held when a key that needs Shift is released, and a repeat re-presses.
TEST_F(InjectorTest, KeyDownAndKeyUpSpanActionsLikeAHumansKeys) {
    start_recording();
    injector().execute(KeyDown{XK_Shift_L});
    injector().execute(KeyDown{XK_A});
    injector().execute(KeyUp{XK_A});
    injector().execute(KeyDown{XK_exclam});  // needs Shift, which the human holds
    injector().execute(KeyUp{XK_exclam});
    EXPECT_EQ(keys_down(display()).size(), 1u) << "Shift is still down";
    injector().execute(KeyUp{XK_Shift_L});
    injector().execute(KeyDown{XK_b});
    injector().execute(KeyDown{XK_b});  // autorepeat
    injector().execute(KeyUp{XK_b});
    injector().execute(KeyUp{XK_b});         // not down any more: ignored
    injector().execute(KeyDown{XK_eacute});  // not on the layout: a spare keycode
    injector().execute(KeyUp{XK_eacute});
    ASSERT_TRUE(window().settle());
    EXPECT_EQ(window().typed_text(), "A!bbé");
    EXPECT_TRUE(keys_down(display()).empty());
}

TEST_F(InjectorTest, KeysLeftDownAreReleasedWhenTheInjectorEnds) {
    {
        XTestInjector own(xvfb().display_name());
        own.execute(KeyDown{XK_Control_L});
        own.execute(KeyDown{XK_eacute});
        EXPECT_EQ(keys_down(display()).size(), 2u);
    }
    EXPECT_TRUE(keys_down(display()).empty());
}

// ---- the X layer ----------------------------------------------------------------------------

TEST_F(InjectorTest, ItsConnectionIsOnTheOneXLayer) {
    // An X error on the injector's connection goes to the layer's handler (its traps, else a
    // line in the log), never to Xlib's default, which exits the process.
    const XErrorHandler current = XSetErrorHandler(nullptr);
    XSetErrorHandler(current);
    EXPECT_EQ(current, &deskbox::x11::XErrorTrap::dispatch);
}

TEST(XTestInjectorOpen, ADisplayThatIsNotThereThrows) {
    EXPECT_THROW(XTestInjector(":4997"), deskbox::x11::XConnectionError);
}

}  // namespace
}  // namespace deskbox::input
