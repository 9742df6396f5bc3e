#include "input/xtest_injector.hpp"

#include <X11/XKBlib.h>
#include <X11/extensions/XTest.h>
#include <X11/keysym.h>
#include <xkbcommon/xkbcommon.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>

namespace deskbox::input {
namespace {

using Clock = std::chrono::steady_clock;

struct DisplayCloser {
    void operator()(Display* d) const {
        if (d) XCloseDisplay(d);
    }
};
struct KeyboardFree {
    void operator()(XkbDescPtr desc) const {
        if (desc) XkbFreeKeyboard(desc, 0, True);
    }
};

constexpr int kModifierCount = 8;          // Shift, Lock, Control, Mod1..Mod5
constexpr KeySym kMaxKeysym = 0x1fffffff;  // keysyms are 29-bit values

std::string hex(unsigned long value) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%lx", value);
    return buf;
}

std::string describe_keysym(Keysym keysym) {
    std::string text = "keysym " + hex(keysym);
    char name[64];
    if (xkb_keysym_get_name(keysym, name, sizeof name) > 0) text += std::string(" (") + name + ")";
    return text;
}

// Decodes UTF-8 into code points. The model guarantees valid text; this still refuses bad
// input rather than typing garbage.
std::vector<char32_t> decode_utf8(const std::string& text) {
    std::vector<char32_t> out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size();) {
        const auto lead = static_cast<unsigned char>(text[i]);
        int extra = 0;
        char32_t cp = 0;
        char32_t min = 0;
        if (lead < 0x80) {
            cp = lead;
        } else if ((lead & 0xe0) == 0xc0) {
            extra = 1, cp = lead & 0x1f, min = 0x80;
        } else if ((lead & 0xf0) == 0xe0) {
            extra = 2, cp = lead & 0x0f, min = 0x800;
        } else if ((lead & 0xf8) == 0xf0) {
            extra = 3, cp = lead & 0x07, min = 0x10000;
        } else {
            throw ActionError("text", "invalid UTF-8 at byte " + std::to_string(i));
        }
        if (i + extra >= text.size()) {
            throw ActionError("text", "truncated UTF-8 at byte " + std::to_string(i));
        }
        for (int k = 1; k <= extra; ++k) {
            const auto cont = static_cast<unsigned char>(text[i + k]);
            if ((cont & 0xc0) != 0x80)
                throw ActionError("text", "invalid UTF-8 at byte " + std::to_string(i));
            cp = (cp << 6) | (cont & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            throw ActionError("text", "invalid UTF-8 at byte " + std::to_string(i));
        out.push_back(cp);
        i += 1 + extra;
    }
    return out;
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
    if (cp < 0x20 || (cp >= 0x80 && cp < 0xa0)) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
        throw ActionError("text", std::string("control character ") + buf + " cannot be typed");
    }
    // Latin-1 and legacy keysyms (EuroSign, Cyrillic...) where they exist, else 0x01000000+cp,
    // so layouts that carry the legacy keysym type it without remapping.
    const Keysym keysym = xkb_utf32_to_keysym(cp);
    if (keysym == 0) throw ActionError("text", "code point " + hex(cp) + " has no keysym");
    return keysym;
}

// Physical modifier keys worth pressing for a level, best first. Lock keys and Mode_switch
// (a group switch in XKB) are left out on purpose.
constexpr std::array<KeySym, 14> kPressableModifiers = {
    XK_Shift_L, XK_Shift_R, XK_Control_L,        XK_Control_R, XK_ISO_Level3_Shift,
    XK_Alt_L,   XK_Alt_R,   XK_ISO_Level5_Shift, XK_Meta_L,    XK_Meta_R,
    XK_Super_L, XK_Super_R, XK_Hyper_L,          XK_Hyper_R};

// One key press that produces a keysym: the keycode and the real modifiers to hold with it.
struct Stroke {
    KeyCode keycode = 0;
    unsigned mods = 0;
    unsigned spare_levels = 0;  // levels of a spare key this press uses (bit 0: plain, 1: Shift)
};

// A spare keycode. Each of its two levels (plain, Shift) holds its own keysym, so 2 keysyms
// per keycode are available without remapping.
struct SpareKey {
    KeyCode keycode = 0;
    std::array<Keysym, 2> keysyms{};                 // per level; 0 while free
    std::array<std::uint64_t, 2> last_use{};         // LRU order; 0 = never used
    std::array<Clock::time_point, 2> reusable_at{};  // see XTestInjector::Impl::note_key
    int pressed = 0;  // held down by the current action: never remapped meanwhile
};

// What a spare key is mapped to: a free level repeats the other, so no level is NoSymbol and a
// key used by one keysym produces it with or without Shift.
std::array<KeySym, 2> key_contents(const SpareKey& key) {
    return {key.keysyms[0] ? key.keysyms[0] : key.keysyms[1],
            key.keysyms[1] ? key.keysyms[1] : key.keysyms[0]};
}

}  // namespace

struct XTestInjector::Impl {
    XTestInjectorOptions options;
    std::unique_ptr<Display, DisplayCloser> connection;
    Display* dpy = nullptr;
    int screen = 0;
    Window root = 0;
    int xkb_event_base = 0;
    std::unique_ptr<XkbDescRec, KeyboardFree> xkb;
    std::array<KeyCode, kModifierCount> modifier_keys{};
    std::vector<SpareKey> spares;
    std::array<int, 256> spare_index{};  // keycode -> index into spares, or -1
    std::unordered_map<std::uint64_t, std::optional<Stroke>> stroke_cache;
    std::uint64_t use_counter = 0;
    // When a client reading key presses at `options.client_key_cost` each would have read
    // everything we sent: a pessimistic model of the slowest client we wait for.
    Clock::time_point client_caught_up_at{};
    bool unsynced = false;  // events sent since the last XSync

    // ---- connection ----------------------------------------------------------------------

    void sync() {
        XSync(dpy, False);
        unsynced = false;
        settle_pointer();
    }

    // XSync says the server read our requests, not that it processed the device events they
    // make: while a client holds a synchronous grab (openbox grabs a click on a window to focus
    // it, then replays it), the server queues pointer events until that client lets them go,
    // and XQueryPointer, the next screenshot or the next action sees the pointer before them.
    // So wait, briefly and bounded, until the pointer is where we put it with the buttons we
    // hold.
    void settle_pointer() {
        constexpr unsigned kTracked = Button1Mask | Button2Mask | Button3Mask;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
        while (true) {
            Window root_return, child;
            int x = 0, y = 0, win_x, win_y;
            unsigned mask = 0;
            XQueryPointer(dpy, root, &root_return, &child, &x, &y, &win_x, &win_y, &mask);
            const bool placed =
                !expected_pointer || (expected_pointer->x == x && expected_pointer->y == y);
            if ((placed && (mask & kTracked) == (expected_buttons & kTracked)) ||
                std::chrono::steady_clock::now() >= deadline)
                return;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    // What our own events should have made of the pointer (settle_pointer waits for it).
    std::optional<Point> expected_pointer;
    unsigned expected_buttons = 0;  // core state bits of buttons 1-3 we hold down
    void fake_button(unsigned button, bool press) {
        XTestFakeButtonEvent(dpy, button, press ? True : False, 0);
        if (button >= 1 && button <= 3) {
            const unsigned bit = Button1Mask << (button - 1);
            expected_buttons = press ? (expected_buttons | bit) : (expected_buttons & ~bit);
        }
    }

    // ---- keymap --------------------------------------------------------------------------

    void load_keymap() {
        XkbDescPtr desc =
            XkbGetMap(dpy, XkbKeyTypesMask | XkbKeySymsMask | XkbModifierMapMask, XkbUseCoreKbd);
        if (!desc) throw std::runtime_error("XkbGetMap failed: cannot read the keyboard mapping");
        xkb.reset(desc);
        stroke_cache.clear();
        rescan_spares();
        find_modifier_keys();
    }

    bool key_is_empty(int keycode) const {
        const int count = XkbKeyNumSyms(xkb.get(), keycode);
        const KeySym* syms = XkbKeySymsPtr(xkb.get(), keycode);
        return std::all_of(syms, syms + count, [](KeySym s) { return s == NoSymbol; });
    }

    bool key_holds(int keycode, const std::array<KeySym, 2>& contents) const {
        const int count = XkbKeyNumSyms(xkb.get(), keycode);
        const KeySym* syms = XkbKeySymsPtr(xkb.get(), keycode);
        const auto has = [&](KeySym s) { return std::find(syms, syms + count, s) != syms + count; };
        return contents[0] != NoSymbol && has(contents[0]) && has(contents[1]) &&
               std::all_of(syms, syms + count, [&](KeySym s) {
                   return s == NoSymbol || s == contents[0] || s == contents[1];
               });
    }

    // Spare keycodes: empty ones, plus ours that still hold what we mapped. Keycode 8 is
    // skipped: it is evdev's KEY_RESERVED and some clients ignore it.
    void rescan_spares() {
        std::vector<SpareKey> next;
        for (int kc = std::max<int>(xkb->min_key_code, 9); kc <= xkb->max_key_code; ++kc) {
            const int old = spare_index[kc];
            const bool empty = key_is_empty(kc);
            if (old >= 0) {
                SpareKey key = spares[old];
                if (empty) {
                    key.keysyms = {};
                    next.push_back(key);
                } else if (key_holds(kc, key_contents(key))) {
                    next.push_back(key);
                }  // else someone else mapped it: no longer ours
            } else if (empty) {
                SpareKey key;
                key.keycode = static_cast<KeyCode>(kc);
                next.push_back(key);
            }
        }
        spares = std::move(next);
        spare_index.fill(-1);
        for (std::size_t i = 0; i < spares.size(); ++i)
            spare_index[spares[i].keycode] = static_cast<int>(i);
    }

    void find_modifier_keys() {
        modifier_keys.fill(0);
        std::array<std::size_t, kModifierCount> best_rank;
        best_rank.fill(kPressableModifiers.size());
        for (int kc = xkb->min_key_code; kc <= xkb->max_key_code; ++kc) {
            const unsigned mask = xkb->map->modmap[kc];
            if (!mask || spare_index[kc] >= 0 || XkbKeyNumGroups(xkb.get(), kc) == 0) continue;
            const KeySym sym = XkbKeySymEntry(xkb.get(), kc, 0, 0);
            const auto rank = static_cast<std::size_t>(
                std::find(kPressableModifiers.begin(), kPressableModifiers.end(), sym) -
                kPressableModifiers.begin());
            for (int bit = 0; bit < kModifierCount; ++bit) {
                if ((mask & (1u << bit)) && bit != LockMapIndex && rank < best_rank[bit]) {
                    best_rank[bit] = rank;
                    modifier_keys[bit] = static_cast<KeyCode>(kc);
                }
            }
        }
    }

    // Picks up keymap changes made by others (setxkbmap, xmodmap) since the last action.
    void refresh_keymap_if_changed() {
        bool changed = false;
        while (XPending(dpy) > 0) {
            XEvent event;
            XNextEvent(dpy, &event);
            if (event.type == xkb_event_base) {
                const auto& xkb_event = reinterpret_cast<const XkbEvent&>(event);
                if (xkb_event.any.xkb_type == XkbNewKeyboardNotify ||
                    xkb_event.any.xkb_type == XkbMapNotify)
                    changed = true;
            } else if (event.type == MappingNotify) {
                changed = true;
            }
        }
        if (changed) load_keymap();
    }

    // The keyboard state now, after applying keymap changes that arrived before it.
    XkbStateRec prepare_keyboard() {
        XkbStateRec state{};
        if (XkbGetState(dpy, XkbUseCoreKbd, &state) != Success)
            throw std::runtime_error("XkbGetState failed: cannot read the keyboard state");
        refresh_keymap_if_changed();
        return state;
    }

    int effective_group(int keycode, int group) const {
        const unsigned info = XkbKeyGroupInfo(xkb.get(), keycode);
        const int count = XkbNumGroups(info);
        if (group < count) return group;
        switch (XkbOutOfRangeGroupAction(info)) {
            case XkbClampIntoRange:
                return count - 1;
            case XkbRedirectIntoRange: {
                const int target = XkbOutOfRangeGroupNumber(info);
                return target < count ? target : 0;
            }
            default:
                return group % count;
        }
    }

    bool pressable(unsigned mods) const {
        for (int bit = 0; bit < kModifierCount; ++bit) {
            if ((mods & (1u << bit)) && (bit == LockMapIndex || modifier_keys[bit] == 0))
                return false;
        }
        return true;
    }

    // The extra modifiers to press so that `type` selects `level` while `current` mods are
    // already in effect; nullopt if that level cannot be reached by pressing keys.
    std::optional<unsigned> mods_for_level(const XkbKeyTypeRec& type, int level,
                                           unsigned current) const {
        const unsigned relevant = type.mods.mask;
        const auto level_of = [&](unsigned mods) {
            for (int i = 0; i < type.map_count; ++i) {
                const XkbKTMapEntryRec& entry = type.map[i];
                if (entry.active && entry.mods.mask == mods) return static_cast<int>(entry.level);
            }
            return 0;
        };
        const unsigned now = current & relevant;
        if (level_of(now) == level) return 0u;
        std::optional<unsigned> best;
        for (int i = 0; i < type.map_count; ++i) {
            const XkbKTMapEntryRec& entry = type.map[i];
            if (!entry.active || entry.level != level) continue;
            const unsigned wanted = entry.mods.mask;
            if ((wanted & now) != now) continue;  // cannot take away what is already in effect
            const unsigned extra = wanted & ~now;
            if (!pressable(extra) || level_of(wanted) != level) continue;
            if (!best || std::popcount(extra) < std::popcount(*best)) best = extra;
        }
        return best;
    }

    // A keycode + modifiers of the current keymap producing `keysym` in `group`. Spare keycodes
    // are not searched: they are managed by map_spares.
    std::optional<Stroke> find_on_keyboard(Keysym keysym, int group, unsigned current) {
        const std::uint64_t key = std::uint64_t{keysym} | (std::uint64_t(group & 3) << 32) |
                                  (std::uint64_t(current & 0xff) << 34);
        if (auto it = stroke_cache.find(key); it != stroke_cache.end()) return it->second;

        std::optional<Stroke> best;
        for (int kc = xkb->min_key_code; kc <= xkb->max_key_code; ++kc) {
            if (spare_index[kc] >= 0 || XkbKeyNumGroups(xkb.get(), kc) == 0) continue;
            const int g = effective_group(kc, group);
            const XkbKeyTypeRec& type = *XkbKeyKeyType(xkb.get(), kc, g);
            const int width = XkbKeyGroupWidth(xkb.get(), kc, g);
            for (int level = 0; level < width; ++level) {
                if (XkbKeySymEntry(xkb.get(), kc, level, g) != keysym) continue;
                const auto extra = mods_for_level(type, level, current);
                if (!extra) continue;
                if (!best || std::popcount(*extra) < std::popcount(best->mods))
                    best = Stroke{static_cast<KeyCode>(kc), *extra};
            }
        }
        stroke_cache.emplace(key, best);
        return best;
    }

    // ---- spare keycodes ------------------------------------------------------------------
    // A position is one level of one spare key: key index * 2 + level. "Whole key" use maps
    // both levels to the same keysym, so a held Shift cannot change it (chords, and text typed
    // while the user holds a modifier we could not lift).

    int usable_levels() const { return modifier_keys[ShiftMapIndex] ? 2 : 1; }

    std::optional<std::size_t> find_position(Keysym keysym, bool whole_key, int levels) const {
        for (int level = 0; level < levels; ++level) {
            for (std::size_t i = 0; i < spares.size(); ++i) {
                const bool match =
                    whole_key ? key_contents(spares[i]) == std::array<KeySym, 2>{keysym, keysym}
                              : spares[i].keysyms[level] == keysym;
                if (match) return i * 2 + level;
            }
        }
        return std::nullopt;
    }

    Stroke spare_stroke(std::size_t position, bool whole_key) const {
        const SpareKey& key = spares[position / 2];
        if (whole_key) return Stroke{key.keycode, 0, 0b11};
        const unsigned level = position % 2;
        return Stroke{key.keycode, level ? unsigned{ShiftMask} : 0u, 1u << level};
    }

    // Gives every keysym of `wanted` (distinct, missing from the layout, at most the free
    // capacity) a spare position: those already mapped keep theirs, the others take the least
    // recently used positions not needed. Clients look keysyms up when they *read* an event,
    // so a position only changes once the model says clients have read its last event (plus a
    // margin); contiguous keycodes change in one request, so a client refreshes its keymap once
    // per batch instead of once per key.
    void map_spares(const std::vector<Keysym>& wanted, bool whole_key) {
        const int levels = whole_key ? 1 : usable_levels();
        std::vector<bool> needed(spares.size() * 2, false);
        std::vector<Keysym> missing;
        for (Keysym keysym : wanted) {
            if (auto position = find_position(keysym, whole_key, levels)) {
                needed[*position] = true;
                if (whole_key) needed[*position + 1] = true;
            } else {
                missing.push_back(keysym);
            }
        }
        if (missing.empty()) return;

        std::vector<std::size_t> free;
        for (std::size_t i = 0; i < spares.size(); ++i) {
            if (spares[i].pressed > 0) continue;
            for (int level = 0; level < (whole_key ? 2 : levels); ++level) {
                if (whole_key && (needed[2 * i] || needed[2 * i + 1])) break;
                if (!needed[2 * i + level]) free.push_back(2 * i + level);
                if (whole_key) break;
            }
        }
        if (free.size() < missing.size()) {
            const Keysym keysym = missing[free.size()];
            if (spares.empty()) {
                throw std::runtime_error(describe_keysym(keysym) +
                                         " is not on the keyboard and the keymap has no spare "
                                         "keycode to map it to");
            }
            throw std::runtime_error(describe_keysym(keysym) + " is not on the keyboard and all " +
                                     std::to_string(spares.size()) +
                                     " spare keycodes are held down by this action");
        }
        const auto age = [&](std::size_t position) {
            const SpareKey& key = spares[position / 2];
            return whole_key ? std::max(key.last_use[0], key.last_use[1])
                             : key.last_use[position % 2];
        };
        std::stable_sort(free.begin(), free.end(),
                         [&](std::size_t a, std::size_t b) { return age(a) < age(b); });

        Clock::time_point ready{};
        std::vector<std::size_t> changed;
        for (std::size_t i = 0; i < missing.size(); ++i) {
            const std::size_t position = free[i];
            SpareKey& key = spares[position / 2];
            if (whole_key) {
                ready = std::max({ready, key.reusable_at[0], key.reusable_at[1]});
                key.keysyms = {missing[i], missing[i]};
                key.last_use = {++use_counter, use_counter};
            } else {
                const std::size_t level = position % 2;
                ready = std::max(ready, key.reusable_at[level]);
                key.keysyms[level] = missing[i];
                key.last_use[level] = ++use_counter;
            }
            changed.push_back(position / 2);
        }
        write_spares(std::move(changed), ready);
    }

    // Writes the contents of spare keys (indices) once `ready`.
    void write_spares(std::vector<std::size_t> keys, Clock::time_point ready) {
        if (keys.empty()) return;
        if (ready > Clock::now()) {
            if (unsynced) sync();
            std::this_thread::sleep_until(ready);
        }
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        std::vector<KeySym> syms;
        for (std::size_t i = 0; i < keys.size();) {
            std::size_t end = i + 1;
            while (end < keys.size() &&
                   spares[keys[end]].keycode == spares[keys[end - 1]].keycode + 1)
                ++end;
            syms.clear();
            for (std::size_t k = i; k < end; ++k) {
                const auto contents = key_contents(spares[keys[k]]);
                syms.insert(syms.end(), contents.begin(), contents.end());
            }
            XChangeKeyboardMapping(dpy, spares[keys[i]].keycode, 2, syms.data(),
                                   static_cast<int>(end - i));
            i = end;
        }
        unsynced = true;
    }

    static void check_keysym(Keysym keysym) {
        if (keysym == NoSymbol || keysym > kMaxKeysym)
            throw std::runtime_error(describe_keysym(keysym) + " is not a valid keysym");
    }

    // A key of a chord: from the layout, else a whole spare key (so Shift in the chord does
    // not pick another keysym).
    Stroke resolve_chord_key(Keysym keysym, int group) {
        check_keysym(keysym);
        if (auto stroke = find_on_keyboard(keysym, group, 0)) return *stroke;
        map_spares({keysym}, true);
        return spare_stroke(*find_position(keysym, true, 1), true);
    }

    // Types text keysyms. `current`: modifiers in effect that could not be lifted. Runs whose
    // missing keysyms fit in the spare positions are mapped in one batch, then typed.
    void type_keysyms(const std::vector<Keysym>& keysyms, int group, unsigned current) {
        const bool whole_key = current != 0;
        const int levels = whole_key ? 1 : usable_levels();
        std::vector<std::optional<Stroke>> on_keyboard;
        on_keyboard.reserve(keysyms.size());
        for (Keysym keysym : keysyms) {
            check_keysym(keysym);
            on_keyboard.push_back(find_on_keyboard(keysym, group, current));
        }
        const std::size_t capacity = spares.size() * static_cast<std::size_t>(levels);
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
            map_spares(run, whole_key);
            for (std::size_t i = begin; i < end; ++i) {
                const Stroke stroke =
                    on_keyboard[i]
                        ? *on_keyboard[i]
                        : spare_stroke(*find_position(keysyms[i], whole_key, levels), whole_key);
                Presses presses(*this);
                press_stroke(presses, modifier_keys, stroke);
                presses.release_all();
            }
            begin = end;
        }
    }

    // Every key press advances the client model; a spare key's levels become reusable when
    // the model has read the release, plus the margin.
    void note_key(KeyCode keycode, bool down, unsigned spare_levels) {
        unsynced = true;
        if (down) {
            client_caught_up_at =
                std::max(client_caught_up_at, Clock::now()) + options.client_key_cost;
        }
        if (const int i = spare_index[keycode]; i >= 0) {
            SpareKey& key = spares[i];
            key.pressed += down ? 1 : -1;
            for (int level = 0; level < 2; ++level) {
                if (spare_levels != 0 && !(spare_levels & (1u << level))) continue;
                key.last_use[level] = ++use_counter;
                key.reusable_at[level] = client_caught_up_at + options.spare_reuse_interval;
            }
        }
    }

    // ---- pointer -------------------------------------------------------------------------

    Size screen_size() const {
        Window root_return;
        int x, y;
        unsigned width, height, border, depth;
        XGetGeometry(dpy, root, &root_return, &x, &y, &width, &height, &border, &depth);
        return Size{static_cast<int>(width), static_cast<int>(height)};
    }

    // Coordinates must be on the screen: XTest would clamp them silently.
    void check_on_screen(const Action& action) const {
        Size size{DisplayWidth(dpy, screen), DisplayHeight(dpy, screen)};
        bool refreshed = false;
        for_each_point(action, [&](const Point& point, std::size_t index) {
            for (int axis = 0; axis < 2; ++axis) {
                const int value = axis == 0 ? point.x : point.y;
                int limit = axis == 0 ? size.width : size.height;
                if (value >= 0 && value < limit) continue;
                if (!refreshed) {  // the screen may have been resized since we connected
                    size = screen_size(), refreshed = true;
                    limit = axis == 0 ? size.width : size.height;
                    if (value >= 0 && value < limit) continue;
                }
                throw ActionError(coordinate_field(action, index, axis, Dialect::native),
                                  std::to_string(value) + " is outside the screen (0.." +
                                      std::to_string(limit - 1) + ")");
            }
        });
    }

    void move(const Point& point) {
        XTestFakeMotionEvent(dpy, screen, point.x, point.y, 0);
        expected_pointer = point;
    }

    // Keys and buttons pressed by one action, released in reverse order when the action ends or
    // throws, so nothing stays held down.
    class Presses {
      public:
        explicit Presses(Impl& impl) : impl_(impl) {}
        ~Presses() {
            if (!held_.empty()) {
                release_all();
                impl_.sync();
            }
        }
        Presses(const Presses&) = delete;
        Presses& operator=(const Presses&) = delete;

        void key(KeyCode keycode, unsigned spare_levels = 0) {
            XTestFakeKeyEvent(impl_.dpy, keycode, True, 0);
            impl_.note_key(keycode, true, spare_levels);
            held_.push_back({false, keycode, spare_levels});
        }
        void button(Button button) { this->button(static_cast<unsigned>(button)); }
        void button(unsigned button) {
            impl_.fake_button(button, true);
            held_.push_back({true, button, 0});
        }
        bool holds_key(KeyCode keycode) const {
            return std::any_of(held_.begin(), held_.end(),
                               [&](const Held& h) { return !h.is_button && h.code == keycode; });
        }
        void release_last() {
            const Held held = held_.back();
            held_.pop_back();
            release(held);
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
        void release(const Held& held) {
            if (held.is_button) {
                impl_.fake_button(held.code, false);
            } else {
                XTestFakeKeyEvent(impl_.dpy, held.code, False, 0);
                impl_.note_key(static_cast<KeyCode>(held.code), false, held.spare_levels);
            }
        }

        Impl& impl_;
        std::vector<Held> held_;
    };

    // Keys left down by KeyDown actions, until their KeyUp (or the injector ends).
    std::map<Keysym, std::unique_ptr<Presses>> held_keys;
    bool holds_key(KeyCode keycode) const {
        return std::any_of(held_keys.begin(), held_keys.end(),
                           [&](const auto& held) { return held.second->holds_key(keycode); });
    }

    // While text is typed, modifiers the user holds or has locked (Shift held, CapsLock on)
    // would change what each key produces; they are lifted for the action and put back after.
    class NeutralModifiers {
      public:
        NeutralModifiers(Impl& impl, const XkbStateRec& state)
            : impl_(impl), locked_(state.locked_mods), residual_(state.mods) {
            bool changed = false;
            if (locked_) {
                XkbLockModifiers(impl_.dpy, XkbUseCoreKbd, locked_, 0);
                changed = true;
            }
            if (state.latched_mods) {
                XkbLatchModifiers(impl_.dpy, XkbUseCoreKbd, state.latched_mods, 0);
                changed = true;
            }
            if (state.base_mods) {
                char keys[32];
                XQueryKeymap(impl_.dpy, keys);
                for (int kc = impl_.xkb->min_key_code; kc <= impl_.xkb->max_key_code; ++kc) {
                    const bool down = keys[kc / 8] & (1 << (kc % 8));
                    if (down && impl_.xkb->map->modmap[kc]) {
                        XTestFakeKeyEvent(impl_.dpy, kc, False, 0);
                        released_.push_back(static_cast<KeyCode>(kc));
                    }
                }
                changed = true;
            }
            if (changed) {
                // Whatever could not be lifted (a key held on another device) is still in effect.
                XkbStateRec now{};
                XkbGetState(impl_.dpy, XkbUseCoreKbd, &now);
                residual_ = now.mods;
            }
        }
        ~NeutralModifiers() {
            for (KeyCode kc : released_) XTestFakeKeyEvent(impl_.dpy, kc, True, 0);
            if (locked_) XkbLockModifiers(impl_.dpy, XkbUseCoreKbd, locked_, locked_);
            if (locked_ || !released_.empty()) impl_.sync();
        }
        NeutralModifiers(const NeutralModifiers&) = delete;
        NeutralModifiers& operator=(const NeutralModifiers&) = delete;

        unsigned residual() const { return residual_; }

      private:
        Impl& impl_;
        unsigned locked_;
        unsigned residual_;
        std::vector<KeyCode> released_;
    };

    static void press_stroke(Presses& presses,
                             const std::array<KeyCode, kModifierCount>& modifier_keys,
                             const Stroke& stroke) {
        for (int bit = 0; bit < kModifierCount; ++bit) {
            if ((stroke.mods & (1u << bit)) && !presses.holds_key(modifier_keys[bit]))
                presses.key(modifier_keys[bit]);
        }
        if (!presses.holds_key(stroke.keycode)) presses.key(stroke.keycode, stroke.spare_levels);
    }
};

namespace {

void check_duration(int ms, int max, const char* field) {
    if (ms < 0 || ms > max)
        throw ActionError(field,
                          "must be 0.." + std::to_string(max) + ", got " + std::to_string(ms));
}

template <class... Ts>
struct Overloaded : Ts... {
    using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace

XTestInjector::XTestInjector(Display* display, XTestInjectorOptions options)
    : impl_(std::make_unique<Impl>()) {
    Impl& impl = *impl_;
    impl.options = options;
    impl.spare_index.fill(-1);
    const char* name = display ? DisplayString(display) : nullptr;
    impl.connection.reset(XOpenDisplay(name));
    if (!impl.connection)
        throw std::runtime_error(std::string("cannot open X display ") + (name ? name : "(null)"));
    impl.dpy = impl.connection.get();
    impl.screen = DefaultScreen(impl.dpy);
    impl.root = RootWindow(impl.dpy, impl.screen);

    int event_base, error_base, major, minor;
    if (!XTestQueryExtension(impl.dpy, &event_base, &error_base, &major, &minor))
        throw std::runtime_error("the X server has no XTest extension");
    int opcode, xkb_error;
    major = XkbMajorVersion, minor = XkbMinorVersion;
    if (!XkbQueryExtension(impl.dpy, &opcode, &impl.xkb_event_base, &xkb_error, &major, &minor))
        throw std::runtime_error("the X server has no XKEYBOARD extension");
    XkbSelectEvents(impl.dpy, XkbUseCoreKbd, XkbNewKeyboardNotifyMask | XkbMapNotifyMask,
                    XkbNewKeyboardNotifyMask | XkbMapNotifyMask);
    // Our events must get through even while another client grabs the server.
    XTestGrabControl(impl.dpy, True);
    impl.load_keymap();
    XSync(impl.dpy, False);
}

XTestInjector::~XTestInjector() {
    Impl& impl = *impl_;
    try {
        impl.held_keys.clear();  // released while their keycodes still mean what they meant
        impl.sync();
        impl.refresh_keymap_if_changed();  // a new keymap may have taken our keycodes back
        // Emptied like any remap: only once clients have read the last events using them.
        std::vector<std::size_t> used;
        Clock::time_point ready{};
        for (std::size_t i = 0; i < impl.spares.size(); ++i) {
            SpareKey& key = impl.spares[i];
            if (key.keysyms == std::array<Keysym, 2>{}) continue;
            ready = std::max({ready, key.reusable_at[0], key.reusable_at[1]});
            key.keysyms = {};
            used.push_back(i);
        }
        impl.write_spares(std::move(used), ready);
        impl.sync();
    } catch (...) {
        // Destruction must not throw; the keymap keeps the extra keysyms at worst.
    }
}

std::vector<KeyCode> XTestInjector::spare_keycodes() const {
    std::vector<KeyCode> out;
    for (const auto& slot : impl_->spares) out.push_back(slot.keycode);
    return out;
}

Point XTestInjector::cursor_position() {
    Impl& impl = *impl_;
    Window root_return, child;
    int root_x = 0, root_y = 0, win_x, win_y;
    unsigned mask;
    XQueryPointer(impl.dpy, impl.root, &root_return, &child, &root_x, &root_y, &win_x, &win_y,
                  &mask);
    return Point{root_x, root_y};
}

nlohmann::json XTestInjector::execute(const Action& action) {
    Impl& impl = *impl_;
    const auto group_for = [&](const std::vector<Keysym>& keys) {
        return keys.empty() ? 0 : static_cast<int>(impl.prepare_keyboard().group);
    };
    const auto press_keys = [&](Impl::Presses& presses, const std::vector<Keysym>& keys,
                                int group) {
        for (Keysym keysym : keys)
            Impl::press_stroke(presses, impl.modifier_keys, impl.resolve_chord_key(keysym, group));
    };
    const auto scroll_button = [](int notches, unsigned negative, unsigned positive) {
        return notches < 0 ? negative : positive;
    };

    impl.check_on_screen(action);
    return std::visit(
        Overloaded{
            [&](const Click& click) -> nlohmann::json {
                if (click.count < 1 || click.count > 3)
                    throw ActionError("count",
                                      "must be 1, 2 or 3, got " + std::to_string(click.count));
                const int group = group_for(click.hold_keys);
                Impl::Presses presses(impl);
                press_keys(presses, click.hold_keys, group);
                if (click.at) impl.move(*click.at);
                for (int i = 0; i < click.count; ++i) {
                    presses.button(click.button);
                    presses.release_last();
                }
                presses.release_all();
                impl.sync();
                return nlohmann::json::object();
            },
            [&](const Move& move) -> nlohmann::json {
                const int group = group_for(move.hold_keys);
                Impl::Presses presses(impl);
                press_keys(presses, move.hold_keys, group);
                impl.move(move.to);
                presses.release_all();
                impl.sync();
                return nlohmann::json::object();
            },
            [&](const MouseDown& down) -> nlohmann::json {
                if (down.at) impl.move(*down.at);
                // Deliberately left pressed: mouse_up releases it.
                impl.fake_button(static_cast<unsigned>(down.button), true);
                impl.sync();
                return nlohmann::json::object();
            },
            [&](const MouseUp& up) -> nlohmann::json {
                if (up.at) impl.move(*up.at);
                impl.fake_button(static_cast<unsigned>(up.button), false);
                impl.sync();
                return nlohmann::json::object();
            },
            [&](const Drag& drag) -> nlohmann::json {
                if (drag.path.size() < 2)
                    throw ActionError(
                        "path", "needs at least 2 points, got " + std::to_string(drag.path.size()));
                if (drag.path.size() > kMaxDragPoints)
                    throw ActionError(
                        "path", "has more than " + std::to_string(kMaxDragPoints) + " points");
                const int group = group_for(drag.hold_keys);
                Impl::Presses presses(impl);
                press_keys(presses, drag.hold_keys, group);
                impl.move(drag.path.front());
                presses.button(drag.button);
                for (std::size_t i = 1; i < drag.path.size(); ++i) impl.move(drag.path[i]);
                presses.release_all();
                impl.sync();
                return nlohmann::json::object();
            },
            [&](const Scroll& scroll) -> nlohmann::json {
                if (std::abs(scroll.dx) > kMaxScrollNotches)
                    throw ActionError(
                        "dx", "more than " + std::to_string(kMaxScrollNotches) + " notches");
                if (std::abs(scroll.dy) > kMaxScrollNotches)
                    throw ActionError(
                        "dy", "more than " + std::to_string(kMaxScrollNotches) + " notches");
                const int group = group_for(scroll.hold_keys);
                Impl::Presses presses(impl);
                press_keys(presses, scroll.hold_keys, group);
                if (scroll.at) impl.move(*scroll.at);
                // X wheel buttons: 4 up, 5 down, 6 left, 7 right; one click per notch.
                const unsigned vertical = scroll_button(scroll.dy, 4, 5);
                for (int i = 0; i < std::abs(scroll.dy); ++i) {
                    presses.button(vertical);
                    presses.release_last();
                }
                const unsigned horizontal = scroll_button(scroll.dx, 6, 7);
                for (int i = 0; i < std::abs(scroll.dx); ++i) {
                    presses.button(horizontal);
                    presses.release_last();
                }
                presses.release_all();
                impl.sync();
                return nlohmann::json::object();
            },
            [&](const Type& type) -> nlohmann::json {
                if (type.text.size() > kMaxTextBytes)
                    throw ActionError("text",
                                      "longer than " + std::to_string(kMaxTextBytes) + " bytes");
                const auto code_points = decode_utf8(type.text);
                std::vector<Keysym> keysyms;  // all checked before the first key goes down
                keysyms.reserve(code_points.size());
                for (std::size_t i = 0; i < code_points.size(); ++i) {
                    // CR LF is one line break, like the "\n" it stands for.
                    if (code_points[i] == U'\r' && i + 1 < code_points.size() &&
                        code_points[i + 1] == U'\n')
                        continue;
                    keysyms.push_back(keysym_for_text(code_points[i]));
                }
                if (keysyms.empty()) return nlohmann::json::object();
                const XkbStateRec state = impl.prepare_keyboard();
                Impl::NeutralModifiers neutral(impl, state);
                impl.type_keysyms(keysyms, state.group, neutral.residual());
                impl.sync();
                return nlohmann::json::object();
            },
            [&](const Key& key) -> nlohmann::json {
                if (key.chords.empty()) return nlohmann::json::object();
                const int group = static_cast<int>(impl.prepare_keyboard().group);
                for (const KeyChord& chord : key.chords) {
                    Impl::Presses presses(impl);
                    press_keys(presses, chord.keys, group);
                    presses.release_all();
                }
                impl.sync();
                return nlohmann::json::object();
            },
            [&](const HoldKey& hold) -> nlohmann::json {
                check_duration(hold.duration_ms, kMaxHoldMs, "duration_ms");
                const int group = group_for(hold.keys.keys);
                Impl::Presses presses(impl);
                press_keys(presses, hold.keys.keys, group);
                impl.sync();  // held from now, not from whenever the buffer is flushed
                std::this_thread::sleep_for(std::chrono::milliseconds(hold.duration_ms));
                presses.release_all();
                impl.sync();
                return nlohmann::json::object();
            },
            [&](const KeyDown& down) -> nlohmann::json {
                // A repeat (the key is down already) is a release and a press, as X's own
                // autorepeat sends them.
                impl.held_keys.erase(down.key);
                const Stroke stroke = impl.resolve_chord_key(
                    down.key, static_cast<int>(impl.prepare_keyboard().group));
                auto presses = std::make_unique<Impl::Presses>(impl);
                // Modifiers the stroke needs that a held key already holds (the human's Shift)
                // stay as they are, so releasing this key does not release them.
                for (int bit = 0; bit < kModifierCount; ++bit) {
                    const KeyCode modifier = impl.modifier_keys[bit];
                    if ((stroke.mods & (1u << bit)) && !impl.holds_key(modifier))
                        presses->key(modifier);
                }
                presses->key(stroke.keycode, stroke.spare_levels);
                impl.held_keys.emplace(down.key, std::move(presses));
                impl.sync();
                return nlohmann::json::object();
            },
            [&](const KeyUp& up) -> nlohmann::json {
                impl.held_keys.erase(up.key);  // the Presses release it and sync
                return nlohmann::json::object();
            },
            [&](const Wait& wait) -> nlohmann::json {
                check_duration(wait.duration_ms, kMaxWaitMs, "duration_ms");
                std::this_thread::sleep_for(std::chrono::milliseconds(wait.duration_ms));
                return nlohmann::json::object();
            },
            [&](const CursorPosition&) -> nlohmann::json {
                const Point point = cursor_position();
                return nlohmann::json{{"x", point.x}, {"y", point.y}};
            },
            [&](const Screenshot&) -> nlohmann::json {
                return nlohmann::json::object();  // the caller captures the screen
            },
            [&](const Zoom&) -> nlohmann::json {
                return nlohmann::json::object();  // the caller captures the region
            },
        },
        action);
}

}  // namespace deskbox::input
