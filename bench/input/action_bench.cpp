// Input benchmark: our XTest injector against xdotool, the tool agents' shell-script stacks
// call once per action. Both drive the same Xvfb; an independent recording window decides
// when an action has arrived and whether typed text is exact.
//
//   action_bench [--clicks N] [--xdotool-clicks N] [--chars N] [--strings N]
// --strings N also types a corpus of N mixed strings (20..60 characters, seeded), each as its
// own action, counting the exact ones (what an agent's form filling looks like).
// Exit status 2 if our typed text was not exact.
#include <X11/Xlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/child_process.hpp"
#include "guest-desktop/xvfb_server.hpp"
#include "input/x11/xtest_injector.hpp"
#include "tests/support/event_window.hpp"

namespace {

using namespace deskbox;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::duration<double, std::milli>;

struct Percentiles {
    double p50 = 0, p95 = 0, p99 = 0;
};

Percentiles percentiles(std::vector<double> samples) {
    std::sort(samples.begin(), samples.end());
    const auto at = [&](double q) {
        const auto i = static_cast<std::size_t>(q * static_cast<double>(samples.size() - 1) + 0.5);
        return samples[std::min(i, samples.size() - 1)];
    };
    return {at(0.50), at(0.95), at(0.99)};
}

std::string utf8(char32_t cp) {
    std::string out;
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    }
    return out;
}

// `count` characters. Mixed: mostly ASCII (letters, digits, symbols, spaces) with Latin
// accents and CJK ideographs, as in multilingual form input. Seeded: the same text every run.
std::string sample_text(int count, bool ascii_only, int* distinct_unmapped,
                        std::uint32_t seed = 20240601) {
    const std::u32string ascii =
        U"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:!?@#$%&*()-_=+'\"/";
    const std::u32string accents = U"éèêëàâäçñöüßøåæœíóúÉÀÇÑÖÜ";
    std::mt19937 rng(seed);
    std::string text;
    std::vector<char32_t> unmapped;
    for (int i = 0; i < count; ++i) {
        const int kind = ascii_only ? 0 : static_cast<int>(rng() % 10);
        char32_t cp;
        if (kind < 6) {
            cp = ascii[rng() % ascii.size()];
        } else if (kind < 8) {
            cp = accents[rng() % accents.size()];
            unmapped.push_back(cp);
        } else {
            cp = 0x4e00 + rng() % 300;
            unmapped.push_back(cp);
        }
        text += utf8(cp);
    }
    std::sort(unmapped.begin(), unmapped.end());
    *distinct_unmapped =
        static_cast<int>(std::unique(unmapped.begin(), unmapped.end()) - unmapped.begin());
    return text;
}

int utf8_length(const std::string& text) {
    return static_cast<int>(std::count_if(text.begin(), text.end(), [](char c) {
        return (static_cast<unsigned char>(c) & 0xc0) != 0x80;
    }));
}

// Waits until no key event has arrived for `quiet`; returns when the last one was seen.
Clock::time_point wait_until_quiet(testing::EventWindow& window, std::size_t expected_bytes,
                                   std::chrono::milliseconds quiet) {
    auto last = Clock::now();
    std::size_t seen = window.snapshot().keys.size();
    for (;;) {
        if (window.typed_text().size() >= expected_bytes) return Clock::now();
        const bool more = window.wait_for(
            [&](const testing::EventLog& log) { return log.keys.size() != seen; }, quiet);
        if (!more) return last;
        last = Clock::now();
        seen = window.snapshot().keys.size();
    }
}

int arg(int argc, char** argv, const char* name, int fallback) {
    for (int i = 1; i + 1 < argc; ++i) {
        if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
    }
    return fallback;
}

struct TypingResult {
    double chars_per_s = 0;
    bool exact = false;
    std::string received;
};

TypingResult measure_typing(testing::EventWindow& window, const std::string& text,
                            const std::function<bool()>& send) {
    window.settle();
    window.clear();
    const auto start = Clock::now();
    const bool sent = send();
    // Until the window has as much text as was sent, or nothing more arrives for 2 s.
    const auto end =
        std::max(Clock::now(), wait_until_quiet(window, text.size(), std::chrono::seconds(2)));
    window.settle();
    TypingResult result;
    result.received = window.typed_text();
    result.exact = sent && result.received == text;
    result.chars_per_s = utf8_length(text) / std::chrono::duration<double>(end - start).count();
    return result;
}

void print_typing_row(const char* name, const TypingResult& r, const std::string& text) {
    std::printf("  %-36s %8.0f chars/s   exact: %s", name, r.chars_per_s, r.exact ? "yes" : "no");
    if (!r.exact) {
        std::size_t same = 0;
        if (std::getenv("ACTION_BENCH_DEBUG"))
            std::fprintf(stderr, "expected: %s\nreceived: %s\n", text.c_str(), r.received.c_str());
        while (same < r.received.size() && same < text.size() && r.received[same] == text[same])
            ++same;
        std::printf("  (received %d chars, first wrong at char %d)", utf8_length(r.received),
                    utf8_length(text.substr(0, same)));
    }
    std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
    const int clicks = arg(argc, argv, "--clicks", 500);
    const int xdotool_clicks = arg(argc, argv, "--xdotool-clicks", 100);
    const int chars = arg(argc, argv, "--chars", 1000);
    const int strings = arg(argc, argv, "--strings", 0);
    input::XTestInjectorOptions injector_options;
    injector_options.spare_reuse_interval = std::chrono::milliseconds(arg(
        argc, argv, "--reuse-ms", static_cast<int>(injector_options.spare_reuse_interval.count())));
    injector_options.client_key_cost = std::chrono::microseconds(arg(
        argc, argv, "--key-cost-us", static_cast<int>(injector_options.client_key_cost.count())));
    const bool typing_only = arg(argc, argv, "--typing-only", 0) != 0;

    desktop::XvfbOptions options;
    options.width = 1280;
    options.height = 800;
    desktop::XvfbServer xvfb(options);
    ::setenv("DISPLAY", xvfb.display_name().c_str(), 1);  // for xdotool
    testing::EventWindow window(xvfb.display_name());
    input::XTestInjector injector(xvfb.display_name(), injector_options);
    std::printf("Xvfb %s 1280x800, %zu spare keycodes, spare reuse after %d us/key + %d ms\n\n",
                xvfb.display_name().c_str(), injector.spare_keycodes().size(),
                static_cast<int>(injector_options.client_key_cost.count()),
                static_cast<int>(injector_options.spare_reuse_interval.count()));

    std::mt19937 rng(7);
    const auto random_point = [&] {
        return input::Point{static_cast<int>(rng() % 1280), static_cast<int>(rng() % 800)};
    };
    const auto released = [](const testing::EventLog& log) {
        return std::any_of(log.buttons.begin(), log.buttons.end(),
                           [](const testing::ButtonEvent& b) { return !b.press; });
    };

    // ---- click latency: request until the window has the ButtonRelease --------------------
    if (!typing_only) {
        std::vector<double> ours;
        for (int i = -20; i < clicks; ++i) {  // the first 20 warm up
            input::Click click;
            click.at = random_point();
            window.clear();
            const auto start = Clock::now();
            injector.execute(click);
            if (!window.wait_for(released)) {
                std::fprintf(stderr, "click %d never arrived\n", i);
                return 1;
            }
            if (i >= 0) ours.push_back(Ms(Clock::now() - start).count());
        }
        const auto xdotool_clicks_ms = [&](std::vector<std::string> tail) {
            std::vector<double> samples;
            for (int i = -3; i < xdotool_clicks; ++i) {
                const input::Point point = random_point();
                std::vector<std::string> argv = {"xdotool", "mousemove", std::to_string(point.x),
                                                 std::to_string(point.y)};
                argv.insert(argv.end(), tail.begin(), tail.end());
                window.clear();
                const auto start = Clock::now();
                const auto result = run_process(argv);
                if (result.status.exit_code != 0 || !window.wait_for(released)) {
                    std::fprintf(stderr, "xdotool click failed: %s\n", result.err.c_str());
                    std::exit(1);
                }
                if (i >= 0) samples.push_back(Ms(Clock::now() - start).count());
            }
            return samples;
        };
        const Percentiles a = percentiles(ours);
        const Percentiles b = percentiles(xdotool_clicks_ms({"click", "1"}));
        const Percentiles c = percentiles(xdotool_clicks_ms({"click", "--delay", "0", "1"}));
        std::printf("click latency, ms (action start -> test window has the ButtonRelease)\n");
        std::printf("  %-36s %9s %9s %9s\n", "", "p50", "p95", "p99");
        const auto row = [](const char* name, const Percentiles& p, int n) {
            std::printf("  %-36s %9.3f %9.3f %9.3f   (%d clicks)\n", name, p.p50, p.p95, p.p99, n);
        };
        row("ours: XTestInjector::execute(Click)", a, clicks);
        row("xdotool mousemove X Y click 1", b, xdotool_clicks);
        row("xdotool ... click --delay 0 1", c, xdotool_clicks);
        std::printf("  %-36s %8.0fx %8.0fx %8.0fx\n", "ratio xdotool (click 1) / ours",
                    b.p50 / a.p50, b.p95 / a.p95, b.p99 / a.p99);
        std::printf("  %-36s %8.0fx %8.0fx %8.0fx\n", "ratio xdotool (--delay 0) / ours",
                    c.p50 / a.p50, c.p95 / a.p95, c.p99 / a.p99);
    }

    // ---- typing throughput: request until the window has every character -------------------
    bool all_exact = true;
    for (const bool ascii_only : {true, false}) {
        int distinct = 0;
        const std::string text = sample_text(chars, ascii_only, &distinct);
        const TypingResult mine = measure_typing(window, text, [&] {
            injector.execute(input::Type{text});
            return true;
        });
        const TypingResult theirs = measure_typing(window, text, [&] {
            return run_process({"xdotool", "type", "--delay", "0", text}, std::chrono::seconds(120))
                       .status.exit_code == 0;
        });
        all_exact = all_exact && mine.exact;
        if (ascii_only) {
            std::printf("\ntyping %d ASCII chars, until the test window has them all\n", chars);
        } else {
            std::printf(
                "\ntyping %d mixed chars (ASCII + accents + CJK; %d distinct not on the US "
                "layout), until the test window has them all\n",
                utf8_length(text), distinct);
        }
        print_typing_row("ours: XTestInjector::execute(Type)", mine, text);
        print_typing_row("xdotool type --delay 0", theirs, text);
        std::printf("  %-36s %7.1fx\n", "ratio ours / xdotool (chars/s)",
                    mine.chars_per_s / theirs.chars_per_s);
    }

    // ---- a corpus of separate strings: how many arrive exact, and at what rate -------------
    if (strings > 0) {
        std::mt19937 lengths(99);
        int exact = 0, total_chars = 0;
        double seconds = 0;
        for (int i = 0; i < strings; ++i) {
            int distinct = 0;
            const std::string text = sample_text(20 + static_cast<int>(lengths() % 41), false,
                                                 &distinct, 1000 + static_cast<std::uint32_t>(i));
            const TypingResult r = measure_typing(window, text, [&] {
                injector.execute(input::Type{text});
                return true;
            });
            exact += r.exact ? 1 : 0;
            total_chars += utf8_length(text);
            seconds += utf8_length(text) / r.chars_per_s;
        }
        all_exact = all_exact && exact == strings;
        std::printf("\ntyping a corpus of %d mixed strings (%d chars), each its own action\n",
                    strings, total_chars);
        std::printf("  %-36s %8.0f chars/s   exact: %d/%d\n", "ours: XTestInjector::execute(Type)",
                    total_chars / seconds, exact, strings);
    }
    return all_exact ? 0 : 2;
}
