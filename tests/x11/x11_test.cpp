// The one X11 layer on a real Xvfb: error traps (threads, nesting, the log fallback),
// connections that survive their server or end the process, the atom cache, properties.
#include <gtest/gtest.h>

#include <X11/Xatom.h>
#include <X11/Xproto.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <filesystem>
#include <thread>

#include "common/unique_fd.hpp"
#include "tests/support/xvfb.hpp"
#include "x11/connection.hpp"
#include "x11/error_trap.hpp"
#include "x11/properties.hpp"

namespace deskbox::x11 {
namespace {

using namespace std::chrono_literals;
using X11Test = deskbox::testing::XvfbTest;

// A window id of our own that no longer exists: every request on it is BadWindow.
Window destroyed_window(Display* d) {
    Window w = XCreateSimpleWindow(d, DefaultRootWindow(d), 0, 0, 1, 1, 0, 0, 0);
    XDestroyWindow(d, w);
    XSync(d, False);
    return w;
}

// An atom no server has handed out: XGetAtomName on it is BadAtom.
constexpr Atom kUnknownAtom = 0x1fffffff;

std::size_t open_fds() {
    std::size_t n = 0;
    for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
    return n;
}

TEST_F(X11Test, ATrapKeepsTheFirstErrorWithItsText) {
    Display* d = display();
    Window gone = destroyed_window(d);
    XErrorTrap trap(d);
    EXPECT_FALSE(trap.caught());
    XMapWindow(d, gone);  // no reply: the error comes later
    EXPECT_TRUE(trap.sync_and_check());
    EXPECT_EQ(trap.first_error_code(), BadWindow);
    EXPECT_NE(trap.first_error().find("BadWindow"), std::string::npos) << trap.first_error();
    EXPECT_NE(trap.first_error().find("(request " + std::to_string(X_MapWindow) + ".0)"),
              std::string::npos)
        << trap.first_error();
    char* name = XGetAtomName(d, kUnknownAtom);  // a reply call: its error is in on return
    EXPECT_EQ(name, nullptr);
    EXPECT_EQ(trap.error_count(), 2);
    EXPECT_EQ(trap.first_error_code(), BadWindow);  // still the first one
    trap.clear();
    EXPECT_FALSE(trap.caught());
    EXPECT_EQ(trap.first_error(), "");
    EXPECT_FALSE(trap.sync_and_check());
}

TEST_F(X11Test, NestedTrapsTakeTheErrorsOfTheirOwnScope) {
    Display* d = display();
    Window gone = destroyed_window(d);
    auto other = xvfb().connect();
    XErrorTrap outer(d);
    {
        XErrorTrap inner(d);
        XMapWindow(d, gone);
        EXPECT_TRUE(inner.sync_and_check());
    }
    EXPECT_FALSE(outer.sync_and_check()) << "the inner trap's error reached the outer one";
    {
        // A trap for another display is not in the way of this one's errors.
        XErrorTrap unrelated(other.get());
        XMapWindow(d, gone);
        XSync(d, False);
        EXPECT_FALSE(unrelated.sync_and_check());
    }
    EXPECT_TRUE(outer.caught());
    EXPECT_EQ(outer.error_count(), 1);
}

TEST_F(X11Test, ATrapEndingBeforeItsErrorArrivedStillTakesIt) {
    Display* d = display();
    Window gone = destroyed_window(d);
    ::testing::internal::CaptureStderr();
    {
        XErrorTrap trap(d);
        XMapWindow(d, gone);  // unanswered when the trap ends
    }
    XSync(d, False);
    std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(log.find("not trapped"), std::string::npos) << log;
}

TEST_F(X11Test, AnErrorNobodyTrappedIsLoggedAndTheProcessGoesOn) {
    install_error_handlers();
    Display* d = display();
    Window gone = destroyed_window(d);
    ::testing::internal::CaptureStderr();
    XMapWindow(d, gone);
    XSync(d, False);  // Xlib's default handler would exit here
    std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find("X error BadWindow"), std::string::npos) << log;
    EXPECT_NE(log.find("not trapped"), std::string::npos) << log;
    XWindowAttributes root{};
    EXPECT_TRUE(XGetWindowAttributes(d, DefaultRootWindow(d), &root));  // still usable
}

TEST_F(X11Test, TwoThreadsTrapErrorsOnTwoDisplaysAtOnce) {
    XConnection first(xvfb().display_name());
    XConnection second(xvfb().display_name());
    Window gone = destroyed_window(first.get());
    constexpr int kRounds = 300;
    std::barrier start(2);
    std::atomic<int> wrong{0};
    ::testing::internal::CaptureStderr();
    // Each thread makes its own kind of error on its own display, in lockstep with the other:
    // each trap must see exactly its own error every round, never the other thread's.
    std::thread windows([&] {
        Display* d = first.get();
        for (int i = 0; i < kRounds; ++i) {
            start.arrive_and_wait();
            XErrorTrap trap(d);
            XMapWindow(d, gone);
            if (!trap.sync_and_check() || trap.error_count() != 1 ||
                trap.first_error_code() != BadWindow)
                ++wrong;
        }
    });
    std::thread atoms([&] {
        Display* d = second.get();
        for (int i = 0; i < kRounds; ++i) {
            start.arrive_and_wait();
            XErrorTrap outer(d);
            {
                XErrorTrap trap(d);
                XGetAtomName(d, kUnknownAtom);
                if (!trap.caught() || trap.error_count() != 1 || trap.first_error_code() != BadAtom)
                    ++wrong;
            }
            XSync(d, False);
            if (outer.caught()) ++wrong;
        }
    });
    windows.join();
    atoms.join();
    std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(wrong, 0);
    EXPECT_EQ(log.find("not trapped"), std::string::npos) << log;
}

TEST_F(X11Test, ATrapDoesNotSeeAnotherThreadsErrors) {
    Display* d = display();
    Window gone = destroyed_window(d);
    XErrorTrap mine(d);
    ::testing::internal::CaptureStderr();
    std::thread other([&] {
        XMapWindow(d, gone);
        XSync(d, False);  // the error arrives on this thread, which has no trap
    });
    other.join();
    std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(mine.caught());
    EXPECT_NE(log.find("not trapped"), std::string::npos) << log;
}

int spy_handler(Display*, XErrorEvent*) {
    return 0;
}

TEST_F(X11Test, TheHandlerIsInstalledOnceAndNeverAgain) {
    install_error_handlers();
    XErrorHandler ours = XSetErrorHandler(&spy_handler);
    EXPECT_EQ(ours, &XErrorTrap::dispatch);
    install_error_handlers();
    {
        XErrorTrap trap(display());
        XConnection connection(xvfb().display_name());
    }
    XErrorHandler current = XSetErrorHandler(ours);  // back to ours for the other tests
    EXPECT_EQ(current, &spy_handler) << "something installed the handler again";
}

TEST(X11Connection, UnreachableDisplayIsAnError) {
    EXPECT_THROW(XConnection(":4998"), XConnectionError);
}

TEST(X11Connection, SurvivesItsServerGoingAway) {
    desktop::XvfbServer xvfb({});
    std::size_t fds_before = open_fds();
    auto connection = std::make_unique<XConnection>(xvfb.display_name());
    EXPECT_FALSE(connection->broken());
    xvfb.process().signal(SIGKILL);
    xvfb.process().wait();
    XSync(connection->get(), False);  // Xlib's default would exit the process here
    EXPECT_TRUE(connection->broken());
    {
        // Traps on a dead connection neither hang nor report anything.
        XErrorTrap trap(connection->get());
        XMapWindow(connection->get(), DefaultRootWindow(connection->get()));
        EXPECT_FALSE(trap.sync_and_check());
    }
    // Dropped on another thread than the one that saw the loss: the socket is still closed.
    std::thread([&] { connection.reset(); }).join();
    EXPECT_EQ(open_fds(), fds_before);
}

TEST(X11Connection, LosingAConnectionNothingCanGoOnWithoutEndsTheProcess) {
    desktop::XvfbServer xvfb({});
    Pipe log = Pipe::create();
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::dup2(log.write.get(), STDERR_FILENO);
        XConnection connection(xvfb.display_name(), OnServerLoss::exit_process);
        ::kill(xvfb.process().pid(), SIGKILL);
        for (int i = 0; i < 500; ++i) {  // until the server's end reaches us
            XSync(connection.get(), False);
            ::usleep(10'000);
        }
        ::_exit(0);
    }
    log.write.reset();
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 70);
    std::string text(4096, '\0');
    text.resize(static_cast<std::size_t>(
        std::max<ssize_t>(0, ::read(log.read.get(), text.data(), text.size()))));
    EXPECT_NE(text.find("lost the connection to X display " + xvfb.display_name()),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("exiting"), std::string::npos) << text;
    xvfb.process().wait();
}

TEST_F(X11Test, AtomsAreInternedOnceEachAndTogether) {
    XConnection connection(xvfb().display_name());
    Display* d = connection.get();
    AtomCache& atoms = connection.atoms();
    unsigned long before = NextRequest(d);
    auto first = atoms.intern({"DESKBOX_TEST_A", "DESKBOX_TEST_B", "UTF8_STRING"});
    EXPECT_EQ(NextRequest(d) - before, 3u);  // XInternAtoms: one request each, one round trip
    ASSERT_EQ(first.size(), 3u);
    EXPECT_EQ(first[0], XInternAtom(display(), "DESKBOX_TEST_A", True));
    EXPECT_EQ(first[1], XInternAtom(display(), "DESKBOX_TEST_B", True));
    EXPECT_EQ(first[2], XInternAtom(display(), "UTF8_STRING", True));
    EXPECT_NE(first[0], first[1]);

    before = NextRequest(d);
    auto again = atoms.intern({"UTF8_STRING", "DESKBOX_TEST_A"});
    EXPECT_EQ(NextRequest(d), before) << "known names went to the server again";
    EXPECT_EQ(again, (std::vector<Atom>{first[2], first[0]}));
    EXPECT_EQ(atoms.intern_one("DESKBOX_TEST_B"), first[1]);

    before = NextRequest(d);
    Atom fresh = atoms.intern({"DESKBOX_TEST_A", "DESKBOX_TEST_C"})[1];
    EXPECT_EQ(NextRequest(d) - before, 1u);  // only the new name
    EXPECT_EQ(fresh, XInternAtom(display(), "DESKBOX_TEST_C", True));
}

TEST_F(X11Test, PropertiesOfAWindowThatVanishedAreSimplyMissing) {
    Display* d = display();
    Window w = XCreateSimpleWindow(d, DefaultRootWindow(d), 0, 0, 1, 1, 0, 0, 0);
    long values[] = {7, 8, 9};
    XChangeProperty(d, w, XA_WM_NAME, XA_CARDINAL, 32, PropModeReplace,
                    reinterpret_cast<unsigned char*>(values), 3);
    XSync(d, False);
    EXPECT_EQ(get_longs(d, w, XA_WM_NAME, XA_CARDINAL), (std::vector<unsigned long>{7, 8, 9}));
    auto raw = get_property(d, w, XA_WM_NAME);
    ASSERT_TRUE(raw);
    EXPECT_EQ(raw->type, XA_CARDINAL);
    EXPECT_EQ(raw->format, 32);
    EXPECT_EQ(raw->items, 3u);
    EXPECT_FALSE(get_property(d, w, XA_WM_CLASS));  // never set

    XDestroyWindow(d, w);
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(get_property(d, w, XA_WM_NAME));
    EXPECT_TRUE(get_longs(d, w, XA_WM_NAME).empty());
    XSync(d, False);
    std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(log, "");
}

}  // namespace
}  // namespace deskbox::x11
