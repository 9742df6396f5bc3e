// ClipboardService against xclip, a real X selection client, on a real Xvfb.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "common/child_process.hpp"
#include "guest-desktop/services/clipboard_service.hpp"
#include "tests/support/xvfb.hpp"

namespace deskbox::services {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::string kUnicode = "日本語 😀 naïve — \"quotes\" \\ tab\there\nsecond line";

std::string big_text() {
    std::string text;
    const std::string line = "0123456789 ünïcödé 日本語 😀 line of text\n";
    while (text.size() < 1'000'000) text += line;
    return text;
}

class ClipboardTest : public testing::XvfbTest {
  protected:
    // xclip -o: what a real client pastes.
    RunResult paste(const std::vector<std::string>& args) {
        std::vector<std::string> argv = {"env", "DISPLAY=" + xvfb().display_name(), "xclip", "-o"};
        argv.insert(argv.end(), args.begin(), args.end());
        return run_process(argv, 30s);
    }
    // xclip -i, kept in the foreground (-quiet) so it is our child until it loses the selection.
    ChildProcess copy_with_xclip(const std::string& text, const std::string& selection) {
        SpawnOptions o;
        o.argv = {"xclip", "-quiet", "-i", "-selection", selection};
        o.env_overrides = {{"DISPLAY", xvfb().display_name()}};
        o.pipe_stdin = true;
        o.stdout_to_null = true;
        o.stderr_to_null = true;
        ChildProcess child = ChildProcess::spawn(o);
        write_all(child.stdin_fd().get(), text.data(), text.size());
        child.stdin_fd().reset();
        return child;
    }
    // Our get(), repeated until it shows `expected` (xclip takes the selection after reading
    // all of stdin); bounded.
    std::string get_until(ClipboardService& service, const std::string& expected,
                          const json& params = nullptr) {
        std::string got;
        for (int i = 0; i < 300; ++i) {
            got = service.get(params)["text"];
            if (got == expected) break;
            std::this_thread::sleep_for(20ms);
        }
        return got;
    }
};

TEST_F(ClipboardTest, SetIsPastedByXclipExactly) {
    ClipboardService service(xvfb().display_name());
    service.set({{"text", kUnicode}});
    RunResult r = paste({"-selection", "clipboard"});
    EXPECT_EQ(r.status.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, kUnicode);
    // PRIMARY too by default (middle click, Shift+Insert in xterm).
    EXPECT_EQ(paste({"-selection", "primary"}).out, kUnicode);
    // Our own get goes through the X server as well.
    EXPECT_EQ(service.get()["text"], kUnicode);
}

TEST_F(ClipboardTest, OffersTargetsAndLatin1String) {
    ClipboardService service(xvfb().display_name());
    service.set({{"text", "naïve 日本"}, {"selection", "clipboard"}});
    std::string targets = paste({"-selection", "clipboard", "-t", "TARGETS"}).out;
    EXPECT_NE(targets.find("UTF8_STRING"), std::string::npos) << targets;
    EXPECT_NE(targets.find("STRING"), std::string::npos) << targets;
    EXPECT_NE(targets.find("TEXT"), std::string::npos) << targets;
    // STRING is ISO 8859-1: ï is one byte, CJK has no Latin-1 form.
    EXPECT_EQ(paste({"-selection", "clipboard", "-t", "STRING"}).out, "na\xEFve ??");
    // selection "clipboard" left PRIMARY alone.
    EXPECT_EQ(service.get({{"selection", "primary"}})["text"], "");
}

TEST_F(ClipboardTest, LargeTextGoesOutIncrementally) {
    ClipboardService service(xvfb().display_name());
    std::string text = big_text();
    service.set({{"text", text}});
    RunResult r = paste({"-selection", "clipboard"});
    EXPECT_EQ(r.out.size(), text.size());
    EXPECT_TRUE(r.out == text);
}

TEST_F(ClipboardTest, ReadsWhatXclipCopied) {
    ClipboardService service(xvfb().display_name());
    ChildProcess xclip = copy_with_xclip(kUnicode, "clipboard");
    EXPECT_EQ(get_until(service, kUnicode), kUnicode);
}

TEST_F(ClipboardTest, ReadsALargeTextIncrementally) {
    ClipboardService service(xvfb().display_name());
    std::string text = big_text();
    ChildProcess xclip = copy_with_xclip(text, "clipboard");
    std::string got = get_until(service, text);
    EXPECT_EQ(got.size(), text.size());
    EXPECT_TRUE(got == text);
}

TEST_F(ClipboardTest, AnotherClientTakingOverWins) {
    ClipboardService service(xvfb().display_name());
    service.set({{"text", "ours"}});
    ChildProcess xclip = copy_with_xclip("theirs", "clipboard");
    EXPECT_EQ(get_until(service, "theirs"), "theirs");
    // And we can take it back.
    service.set({{"text", "ours again"}});
    EXPECT_EQ(paste({"-selection", "clipboard"}).out, "ours again");
}

TEST_F(ClipboardTest, EmptyWhenNobodyOwnsIt) {
    ClipboardService service(xvfb().display_name());
    EXPECT_EQ(service.get()["text"], "");
}

TEST_F(ClipboardTest, BadParamsNameTheField) {
    ClipboardService service(xvfb().display_name());
    auto field_of = [](auto fn) {
        try {
            fn();
        } catch (const ServiceError& e) {
            return e.code() + " " + e.field();
        }
        return std::string("no error");
    };
    EXPECT_EQ(field_of([&] { service.set(json::object()); }), "bad_request text");
    EXPECT_EQ(field_of([&] { service.set({{"text", 5}}); }), "bad_request text");
    EXPECT_EQ(field_of([&] {
                  service.set({{"text", "x"}, {"selection", "secondary"}});
              }),
              "bad_request selection");
    EXPECT_EQ(field_of([&] { service.get({{"selection", "both"}}); }), "bad_request selection");
    ClipboardService tiny(xvfb().display_name(), ClipboardOptions{.max_bytes = 4});
    EXPECT_EQ(field_of([&] { tiny.set({{"text", "12345"}}); }), "too_large text");
}

std::size_t open_fds() {
    std::size_t n = 0;
    for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
    return n;
}

TEST_F(ClipboardTest, ClosesItsConnections) {
    std::size_t before = open_fds();
    {
        ClipboardService service(xvfb().display_name());
        service.set({{"text", "x"}});
        EXPECT_EQ(service.get()["text"], "x");
        EXPECT_GT(open_fds(), before);
    }
    EXPECT_EQ(open_fds(), before);
}

TEST_F(ClipboardTest, SurvivesTheXServerGoingAway) {
    std::size_t before = open_fds();
    auto service = std::make_unique<ClipboardService>(xvfb().display_name());
    service->set({{"text", "before"}});
    // The fixture's own connection must not take the test process down with it.
    XSetIOErrorExitHandler(
        display(), [](Display*, void*) {}, nullptr);
    xvfb().process().signal(SIGKILL);
    xvfb().process().wait();
    // The process is still here, and the errors say what happened.
    try {
        service->get();
        FAIL() << "expected an error";
    } catch (const ServiceError& e) {
        EXPECT_EQ(e.code(), "unavailable");
    }
    EXPECT_THROW(service->set({{"text", "after"}}), ServiceError);
    service.reset();
    EXPECT_EQ(open_fds(), before);  // the dead connections' sockets were closed too
}

}  // namespace
}  // namespace deskbox::services
