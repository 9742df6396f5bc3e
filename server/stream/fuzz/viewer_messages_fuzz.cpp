// libFuzzer target for what viewers send on the stream WebSocket: byte 0 bit 0 says whether the
// connection may control (else it only watches); the rest is messages, one per line, decoded
// in order by one PointerInput, as one session does. Beyond "no crash, no UB, no leak":
//   - a bad message says why, in valid UTF-8; a pong is a number echo that dumps strictly;
//   - a watch-only connection never produces input, a controlling one never "view_only";
//   - input stays on the screen, types valid UTF-8 within the text limit, releases only
//     buttons and keys it pressed and holds at most kMaxHeldKeys keys;
//   - release_all (the viewer leaving) lets go of exactly what is still held.
// The seed corpus (corpus/) is replayed by viewer_message_tests.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string_view>
#include <type_traits>

#include "common/utf8.hpp"
#include "server/stream/viewer_messages.hpp"

namespace {

using namespace deskbox;
using deskbox::server::ViewerRequest;

constexpr int kWidth = 320, kHeight = 200;

void check(bool condition, const char* what) {
    if (!condition) {
        std::fprintf(stderr, "viewer message invariant broken: %s\n", what);
        std::abort();
    }
}

bool on_screen(const input::Point& p) {
    return p.x >= 0 && p.y >= 0 && p.x < kWidth && p.y < kHeight;
}

// What the actions have pressed so far, checked as they come.
struct Held {
    std::set<input::Button> buttons;
    std::set<input::Keysym> keys;

    void apply(const input::Action& action) {
        std::visit(
            [&](const auto& a) {
                using T = std::decay_t<decltype(a)>;
                if constexpr (std::is_same_v<T, input::Move>) {
                    check(on_screen(a.to), "a move off the screen");
                } else if constexpr (std::is_same_v<T, input::Scroll>) {
                    check(!a.at || on_screen(*a.at), "a scroll off the screen");
                    check(a.dx != 0 || a.dy != 0, "a scroll of nothing");
                } else if constexpr (std::is_same_v<T, input::MouseDown>) {
                    check(buttons.insert(a.button).second, "a button pressed twice");
                } else if constexpr (std::is_same_v<T, input::MouseUp>) {
                    check(buttons.erase(a.button) == 1, "a button released that was not down");
                } else if constexpr (std::is_same_v<T, input::KeyDown>) {
                    check(a.key != 0, "key 0 pressed");
                    keys.insert(a.key);  // a repeat of a held key is a key repeat
                    check(keys.size() <= input::PointerInput::kMaxHeldKeys, "too many keys held");
                } else if constexpr (std::is_same_v<T, input::KeyUp>) {
                    check(keys.erase(a.key) == 1, "a key released that was not down");
                } else if constexpr (std::is_same_v<T, input::Type>) {
                    check(utf8::is_valid(a.text), "typed text is not UTF-8");
                    check(a.text.size() <= input::kMaxTextBytes, "typed text over the limit");
                } else {
                    check(false, "an action a viewer cannot send");
                }
            },
            action);
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const bool control = data[0] & 1;
    std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
    input::PointerInput pointer(input::dom_buttons(), kWidth, kHeight);
    Held held;
    while (true) {
        auto nl = rest.find('\n');
        std::string_view message = rest.substr(0, nl);
        ViewerRequest r = server::decode_viewer_message(message, pointer, control);
        switch (r.kind) {
            case ViewerRequest::Kind::bad:
                check(!r.error.empty() && utf8::is_valid(r.error), "a bad message without why");
                break;
            case ViewerRequest::Kind::pong:
                check(!r.reply.contains("t") || r.reply["t"].is_number(),
                      "a pong echoes a non-number");
                (void)r.reply.dump();  // strict: throws on anything not UTF-8
                break;
            case ViewerRequest::Kind::view_only:
                check(!control, "a controlling viewer told it only watches");
                break;
            case ViewerRequest::Kind::input:
                check(control, "a watching viewer's input went through");
                for (const auto& a : r.actions) held.apply(a);
                break;
            case ViewerRequest::Kind::keyframe:
                break;
        }
        if (nl == std::string_view::npos) break;
        rest.remove_prefix(nl + 1);
    }
    for (const auto& a : pointer.release_all()) held.apply(a);
    check(held.buttons.empty() && held.keys.empty(), "release_all left something held");
    return 0;
}
