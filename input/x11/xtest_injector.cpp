#include "input/x11/xtest_injector.hpp"

#include <X11/XKBlib.h>
#include <X11/keysym.h>
#include <xkbcommon/xkbcommon.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/utf8.hpp"
#include "input/keynames.hpp"
#include "input/x11/keymap.hpp"
#include "input/x11/spare_keycodes.hpp"
#include "input/x11/xtest_connection.hpp"
#include "x11/error_trap.hpp"

namespace deskbox::input {
namespace {

using x11::Keymap;
using x11::kModifierCount;
using x11::SpareKeycodes;
using x11::Stroke;
using x11::XTestConnection;

constexpr Keysym kMaxKeysym = 0x1fffffff;  // keysyms are 29-bit values
// Fewest missing keysyms a remap maps (waiting for their places if it must): each remap makes
// every client refresh its keymap, so remaps of one keysym each would cost them more than the
// waits they save (a simulation of the client model: 4 keeps 90 % of the gain at 1/4 the
// remaps of 1).
constexpr std::size_t kMinRemapBatch = 4;

// The model guarantees valid text; this still refuses bad input rather than typing garbage.
std::u32string decode_text(const std::string& text) {
    std::size_t offset = 0;
    auto code_points = utf8::code_points(text, &offset);
    if (code_points) return std::move(*code_points);
    bool truncated = false;
    utf8::sequence_length(text, offset, &truncated);
    throw ActionError("text", std::string(truncated ? "truncated" : "invalid") + " UTF-8 at byte " +
                                  std::to_string(offset));
}

// The keysym that types one character of text.
Keysym keysym_for_text(char32_t cp) {
    switch (cp) {
        case U'\n':
        case U'\r':
            return XK_Return;
        case U'\t':
            return XK_Tab;
        case 0x08:
            return XK_BackSpace;
        case 0x1b:
            return XK_Escape;
        case 0x7f:
            return XK_Delete;
        default:
            break;
    }
    char buf[24];
    if (cp < 0x20 || (cp >= 0x80 && cp < 0xa0)) {
        std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
        throw ActionError("text", std::string("control character ") + buf + " cannot be typed");
    }
    // Latin-1 and legacy keysyms (EuroSign, Cyrillic...) where they exist, else 0x01000000+cp,
    // so layouts that carry the legacy keysym type it without remapping.
    const Keysym keysym = xkb_utf32_to_keysym(cp);
    if (keysym == 0) {
        std::snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(cp));
        throw ActionError("text", std::string("code point ") + buf + " has no keysym");
    }
    return keysym;
}

// The keysyms that type `text`, all checked before the first key goes down.
std::vector<Keysym> text_keysyms(const std::string& text) {
    if (text.size() > kMaxTextBytes)
        throw ActionError("text", "longer than " + std::to_string(kMaxTextBytes) + " bytes");
    const std::u32string code_points = decode_text(text);
    std::vector<Keysym> keysyms;
    keysyms.reserve(code_points.size());
    for (std::size_t i = 0; i < code_points.size(); ++i) {
        // CR LF is one line break, like the "\n" it stands for.
        if (code_points[i] == U'\r' && i + 1 < code_points.size() && code_points[i + 1] == U'\n')
            continue;
        keysyms.push_back(keysym_for_text(code_points[i]));
    }
    return keysyms;
}

void check_keysym(Keysym keysym) {
    if (keysym == NoSymbol || keysym > kMaxKeysym)
        throw std::runtime_error(describe_keysym(keysym) + " is not a valid keysym");
}

void check_duration(int ms, int max, const char* field) {
    if (ms < 0 || ms > max)
        throw ActionError(field,
                          "must be 0.." + std::to_string(max) + ", got " + std::to_string(ms));
}

// Keys and buttons pressed by one action, released in reverse order when the action ends or
// throws, so nothing stays held down. Every key event goes to the spare keycodes' client model.
class Presses {
  public:
    Presses(XTestConnection& x, SpareKeycodes& spares) : x_(x), spares_(spares) {}
    ~Presses() {
        if (!held_.empty()) {
            release_all();
            x_.sync();
        }
    }
    Presses(const Presses&) = delete;
    Presses& operator=(const Presses&) = delete;

    void key(KeyCode keycode, unsigned spare_levels = 0) {
        x_.key(keycode, true);
        spares_.note_key(keycode, true, spare_levels);
        held_.push_back({false, keycode, spare_levels});
    }
    void button(Button button) { this->button(static_cast<unsigned>(button)); }
    void button(unsigned button) {
        x_.button(button, true);
        held_.push_back({true, button, 0});
    }
    bool holds_key(KeyCode keycode) const {
        return std::any_of(held_.begin(), held_.end(),
                           [&](const Held& h) { return !h.is_button && h.code == keycode; });
    }
    void release_last() {
        const Held held = held_.back();
        held_.pop_back();
        if (held.is_button) {
            x_.button(held.code, false);
        } else {
            x_.key(static_cast<KeyCode>(held.code), false);
            spares_.note_key(held.code, false, held.spare_levels);
        }
    }
    void release_all() {
        while (!held_.empty()) release_last();
    }

  private:
    struct Held {
        bool is_button;
        unsigned code;
        unsigned spare_levels;
    };
    XTestConnection& x_;
    SpareKeycodes& spares_;
    std::vector<Held> held_;
};

// While text is typed, modifiers the user holds or has locked (Shift held, CapsLock on) would
// change what each key produces; they are lifted for the action and put back after.
class NeutralModifiers {
  public:
    NeutralModifiers(XTestConnection& x, const Keymap& keymap, const XkbStateRec& state)
        : x_(x), locked_(state.locked_mods), residual_(state.mods) {
        Display* dpy = x_.display();
        if (locked_) XkbLockModifiers(dpy, XkbUseCoreKbd, locked_, 0);
        if (state.latched_mods) XkbLatchModifiers(dpy, XkbUseCoreKbd, state.latched_mods, 0);
        if (state.base_mods) {
            char keys[32];
            XQueryKeymap(dpy, keys);
            for (int kc = keymap.min_keycode(); kc <= keymap.max_keycode(); ++kc) {
                const bool down = keys[kc / 8] & (1 << (kc % 8));
                if (down && keymap.is_modifier(kc)) {
                    x_.key(static_cast<KeyCode>(kc), false);
                    released_.push_back(static_cast<KeyCode>(kc));
                }
            }
        }
        if (locked_ || state.latched_mods || state.base_mods) {
            // Whatever could not be lifted (a key held on another device) is still in effect.
            XkbStateRec now{};
            XkbGetState(dpy, XkbUseCoreKbd, &now);
            residual_ = now.mods;
        }
    }
    ~NeutralModifiers() {
        for (KeyCode kc : released_) x_.key(kc, true);
        if (locked_) XkbLockModifiers(x_.display(), XkbUseCoreKbd, locked_, locked_);
        if (locked_ || !released_.empty()) x_.sync();
    }
    NeutralModifiers(const NeutralModifiers&) = delete;
    NeutralModifiers& operator=(const NeutralModifiers&) = delete;

    // The modifiers still in effect.
    unsigned residual() const { return residual_; }

  private:
    XTestConnection& x_;
    unsigned locked_;
    unsigned residual_;
    std::vector<KeyCode> released_;
};

}  // namespace

struct XTestInjector::Impl {
    XTestConnection x;
    Keymap keymap;
    SpareKeycodes spares;
    // Keys left down by KeyDown actions, until their KeyUp (or the injector ends).
    std::map<Keysym, std::unique_ptr<Presses>> held_keys;

    Impl(const std::string& display_name, const XTestInjectorOptions& options)
        : x(display_name),
          spares(x11::ClientModel{options.spare_reuse_interval, options.client_key_cost}) {
        load_keymap();
        XSync(x.display(), False);
    }

    // ---- keyboard ------------------------------------------------------------------------

    void load_keymap() {
        keymap.load(x.display());
        spares.rescan(keymap.min_keycode(), keymap.max_keycode(),
                      [this](int keycode) { return keymap.keysyms(keycode); });
        keymap.leave_out(spares.keycodes());
        spares.set_usable_levels(keymap.modifier_key(ShiftMapIndex) ? 2 : 1);
    }

    // Picks up keymap changes made by others (setxkbmap, xmodmap) since the last action.
    void refresh_keymap_if_changed() {
        if (x.keymap_changed()) load_keymap();
    }

    // The keyboard state now, after applying keymap changes that arrived before it.
    XkbStateRec prepare_keyboard() {
        const XkbStateRec state = x.keyboard_state();
        refresh_keymap_if_changed();
        return state;
    }

    int group_for(const std::vector<Keysym>& keys) {
        return keys.empty() ? 0 : static_cast<int>(prepare_keyboard().group);
    }

    // Writes spare keycode changes, first waiting until clients have read the events that
    // used the keycodes before (what was sent is flushed so that they can).
    void write(const x11::SpareRemap& remap) {
        if (remap.wait_until) {
            if (x.unsynced()) x.sync();
            std::this_thread::sleep_until(*remap.wait_until);
        }
        for (const auto& run : remap.runs) x.change_mapping(run.first_keycode, run.keysyms);
    }

    static Stroke spare_stroke(const x11::SparePlace& place) {
        const unsigned shift = place.level ? unsigned{ShiftMask} : 0u;
        return Stroke{place.keycode, place.whole_key ? 0u : shift, place.levels()};
    }

    // A key of a chord: from the layout, else a whole spare key (so Shift in the chord does
    // not pick another keysym).
    Stroke resolve_chord_key(Keysym keysym, int group) {
        check_keysym(keysym);
        if (auto stroke = keymap.find(keysym, group, 0)) return *stroke;
        write(spares.map({keysym}, true));
        return spare_stroke(*spares.find(keysym, true));
    }

    void press_stroke(Presses& presses, const Stroke& stroke) const {
        for (int bit = 0; bit < kModifierCount; ++bit) {
            const KeyCode modifier = keymap.modifier_key(bit);
            if ((stroke.mods & (1u << bit)) && !presses.holds_key(modifier)) presses.key(modifier);
        }
        if (!presses.holds_key(stroke.keycode)) presses.key(stroke.keycode, stroke.spare_levels);
    }

    void press_keys(Presses& presses, const std::vector<Keysym>& keys, int group) {
        for (Keysym keysym : keys) press_stroke(presses, resolve_chord_key(keysym, group));
    }

    bool held_by_key_down(KeyCode keycode) const {
        return std::any_of(held_keys.begin(), held_keys.end(),
                           [&](const auto& held) { return held.second->holds_key(keycode); });
    }

    // Types text keysyms. `current`: modifiers in effect that could not be lifted (then spare
    // keys are used whole, so they cannot change what they type). The keysyms the next stretch
    // needs (as many as the spare keycodes hold) are mapped in one batch as far as places are
    // reusable now, at least kMinRemapBatch of them; typing goes on up to the first keysym not
    // mapped yet. So a place still waiting for the modelled client delays only the keysym that
    // needs it, not the whole batch (the corpus in bench/input/action_bench: 497 -> 731
    // chars/s in a simulation of the model, a few more remaps).
    void type_keysyms(const std::vector<Keysym>& keysyms, int group, unsigned current) {
        const bool whole_key = current != 0;
        std::vector<std::optional<Stroke>> on_keyboard;
        on_keyboard.reserve(keysyms.size());
        for (Keysym keysym : keysyms) {
            check_keysym(keysym);
            on_keyboard.push_back(keymap.find(keysym, group, current));
        }
        const std::size_t capacity = spares.capacity(whole_key);
        for (std::size_t begin = 0; begin < keysyms.size();) {
            std::vector<Keysym> run;
            std::size_t end = begin;
            for (; end < keysyms.size(); ++end) {
                if (on_keyboard[end] ||
                    std::find(run.begin(), run.end(), keysyms[end]) != run.end())
                    continue;
                if (run.size() == capacity && !run.empty()) break;
                run.push_back(keysyms[end]);
            }
            write(spares.map(run, whole_key, kMinRemapBatch));
            std::size_t typed = begin;
            for (; typed < end; ++typed) {
                std::optional<Stroke> stroke = on_keyboard[typed];
                if (!stroke) {
                    const auto place = spares.find(keysyms[typed], whole_key);
                    if (!place) break;  // not mapped yet: the next batch maps it first
                    stroke = spare_stroke(*place);
                }
                Presses presses(x, spares);
                press_stroke(presses, *stroke);
                presses.release_all();
            }
            begin = typed;
        }
    }

    // ---- actions -------------------------------------------------------------------------

    // Coordinates must be on the screen: XTest would clamp them silently.
    void check_on_screen(const Action& action) const {
        Size size = x.known_screen_size();
        bool refreshed = false;
        for_each_point(action, [&](const Point& point, std::size_t index) {
            for (int axis = 0; axis < 2; ++axis) {
                const int value = axis == 0 ? point.x : point.y;
                int limit = axis == 0 ? size.width : size.height;
                if (value >= 0 && value < limit) continue;
                if (!refreshed) {  // the screen may have been resized since we connected
                    size = x.current_screen_size(), refreshed = true;
                    limit = axis == 0 ? size.width : size.height;
                    if (value >= 0 && value < limit) continue;
                }
                throw ActionError(coordinate_field(action, index, axis, Dialect::native),
                                  std::to_string(value) + " is outside the screen (0.." +
                                      std::to_string(limit - 1) + ")");
            }
        });
    }

    nlohmann::json run(const Click& click) {
        if (click.count < 1 || click.count > 3)
            throw ActionError("count", "must be 1, 2 or 3, got " + std::to_string(click.count));
        const int group = group_for(click.hold_keys);
        Presses presses(x, spares);
        press_keys(presses, click.hold_keys, group);
        if (click.at) x.move(*click.at);
        for (int i = 0; i < click.count; ++i) {
            presses.button(click.button);
            presses.release_last();
        }
        presses.release_all();
        x.sync();
        return nlohmann::json::object();
    }

    nlohmann::json run(const Move& move) {
        const int group = group_for(move.hold_keys);
        Presses presses(x, spares);
        press_keys(presses, move.hold_keys, group);
        x.move(move.to);
        presses.release_all();
        x.sync();
        return nlohmann::json::object();
    }

    nlohmann::json run(const MouseDown& down) {
        if (down.at) x.move(*down.at);
        x.button(static_cast<unsigned>(down.button), true);  // mouse_up releases it
        x.sync();
        return nlohmann::json::object();
    }

    nlohmann::json run(const MouseUp& up) {
        if (up.at) x.move(*up.at);
        x.button(static_cast<unsigned>(up.button), false);
        x.sync();
        return nlohmann::json::object();
    }

    nlohmann::json run(const Drag& drag) {
        const std::size_t min_points = drag.from_pointer ? 1 : 2;
        if (drag.path.size() < min_points)
            throw ActionError("path", "needs at least " + std::to_string(min_points) +
                                          " point(s), got " + std::to_string(drag.path.size()));
        if (drag.path.size() > kMaxDragPoints)
            throw ActionError("path",
                              "has more than " + std::to_string(kMaxDragPoints) + " points");
        const int group = group_for(drag.hold_keys);
        Presses presses(x, spares);
        press_keys(presses, drag.hold_keys, group);
        // From the pointer: pressed where it is, then along the whole path.
        const std::size_t first = drag.from_pointer ? 0 : 1;
        if (!drag.from_pointer) x.move(drag.path.front());
        presses.button(drag.button);
        for (std::size_t i = first; i < drag.path.size(); ++i) x.move(drag.path[i]);
        presses.release_all();
        x.sync();
        return nlohmann::json::object();
    }

    nlohmann::json run(const Scroll& scroll) {
        if (std::abs(scroll.dx) > kMaxScrollNotches)
            throw ActionError("dx", "more than " + std::to_string(kMaxScrollNotches) + " notches");
        if (std::abs(scroll.dy) > kMaxScrollNotches)
            throw ActionError("dy", "more than " + std::to_string(kMaxScrollNotches) + " notches");
        const int group = group_for(scroll.hold_keys);
        Presses presses(x, spares);
        press_keys(presses, scroll.hold_keys, group);
        if (scroll.at) x.move(*scroll.at);
        // X wheel buttons: 4 up, 5 down, 6 left, 7 right; one click per notch.
        const auto turn = [&](int notches, unsigned negative, unsigned positive) {
            for (int i = 0; i < std::abs(notches); ++i) {
                presses.button(notches < 0 ? negative : positive);
                presses.release_last();
            }
        };
        turn(scroll.dy, 4, 5);
        turn(scroll.dx, 6, 7);
        presses.release_all();
        x.sync();
        return nlohmann::json::object();
    }

    nlohmann::json run(const Type& type) {
        const std::vector<Keysym> keysyms = text_keysyms(type.text);
        if (keysyms.empty()) return nlohmann::json::object();
        const XkbStateRec state = prepare_keyboard();
        NeutralModifiers neutral(x, keymap, state);
        type_keysyms(keysyms, state.group, neutral.residual());
        x.sync();
        return nlohmann::json::object();
    }

    nlohmann::json run(const Key& key) {
        if (key.chords.empty()) return nlohmann::json::object();
        const int group = static_cast<int>(prepare_keyboard().group);
        for (const KeyChord& chord : key.chords) {
            Presses presses(x, spares);
            press_keys(presses, chord.keys, group);
            presses.release_all();
        }
        x.sync();
        return nlohmann::json::object();
    }

    nlohmann::json run(const HoldKey& hold) {
        check_duration(hold.duration_ms, kMaxHoldMs, "duration_ms");
        const int group = group_for(hold.keys.keys);
        Presses presses(x, spares);
        press_keys(presses, hold.keys.keys, group);
        x.sync();  // held from now, not from whenever the buffer is flushed
        std::this_thread::sleep_for(std::chrono::milliseconds(hold.duration_ms));
        presses.release_all();
        x.sync();
        return nlohmann::json::object();
    }

    nlohmann::json run(const KeyDown& down) {
        // A repeat (the key is down already) is a release and a press, as X's own autorepeat
        // sends them.
        held_keys.erase(down.key);
        const Stroke stroke =
            resolve_chord_key(down.key, static_cast<int>(prepare_keyboard().group));
        auto presses = std::make_unique<Presses>(x, spares);
        // Modifiers the stroke needs that a held key already holds (the human's Shift) stay as
        // they are, so releasing this key does not release them.
        for (int bit = 0; bit < kModifierCount; ++bit) {
            const KeyCode modifier = keymap.modifier_key(bit);
            if ((stroke.mods & (1u << bit)) && !held_by_key_down(modifier)) presses->key(modifier);
        }
        presses->key(stroke.keycode, stroke.spare_levels);
        held_keys.emplace(down.key, std::move(presses));
        x.sync();
        return nlohmann::json::object();
    }

    nlohmann::json run(const KeyUp& up) {
        held_keys.erase(up.key);  // the Presses release it and sync
        return nlohmann::json::object();
    }

    nlohmann::json run(const Wait& wait) {
        check_duration(wait.duration_ms, kMaxWaitMs, "duration_ms");
        std::this_thread::sleep_for(std::chrono::milliseconds(wait.duration_ms));
        return nlohmann::json::object();
    }

    nlohmann::json run(const CursorPosition&) {
        const Point point = x.cursor_position();
        return nlohmann::json{{"x", point.x}, {"y", point.y}};
    }

    // The caller captures the screen or the region.
    nlohmann::json run(const Screenshot&) { return nlohmann::json::object(); }
    nlohmann::json run(const Zoom&) { return nlohmann::json::object(); }
};

XTestInjector::XTestInjector(const std::string& display_name, XTestInjectorOptions options)
    : impl_(std::make_unique<Impl>(display_name, options)) {}

XTestInjector::~XTestInjector() {
    Impl& impl = *impl_;
    try {
        impl.held_keys.clear();  // released while their keycodes still mean what they meant
        impl.x.sync();
        impl.refresh_keymap_if_changed();  // a new keymap may have taken our keycodes back
        // Emptied like any remap: only once clients have read the last events using them.
        impl.write(impl.spares.clear());
        impl.x.sync();
    } catch (...) {
        // Destruction must not throw; the keymap keeps the extra keysyms at worst.
    }
}

std::vector<KeyCode> XTestInjector::spare_keycodes() const {
    const auto keycodes = impl_->spares.keycodes();
    return std::vector<KeyCode>(keycodes.begin(), keycodes.end());
}

Point XTestInjector::cursor_position() {
    return impl_->x.cursor_position();
}

nlohmann::json XTestInjector::execute(const Action& action) {
    // Every action ends with a sync (or a round trip), so its errors have arrived when it
    // returns; the trap then costs no extra round trip.
    deskbox::x11::XErrorTrap trap(impl_->x.display());
    impl_->check_on_screen(action);
    nlohmann::json result =
        std::visit([this](const auto& alternative) { return impl_->run(alternative); }, action);
    if (trap.caught()) throw std::runtime_error("X error during the action: " + trap.first_error());
    return result;
}

}  // namespace deskbox::input
