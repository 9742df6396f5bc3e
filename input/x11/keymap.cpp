#include "input/x11/keymap.hpp"

#include <X11/keysym.h>

#include <algorithm>
#include <bit>
#include <stdexcept>

namespace deskbox::input::x11 {
namespace {

// Physical modifier keys worth pressing for a level, best first. Lock keys and Mode_switch
// (a group switch in XKB) are left out on purpose.
constexpr std::array<KeySym, 14> kPressableModifiers = {
    XK_Shift_L, XK_Shift_R, XK_Control_L,        XK_Control_R, XK_ISO_Level3_Shift,
    XK_Alt_L,   XK_Alt_R,   XK_ISO_Level5_Shift, XK_Meta_L,    XK_Meta_R,
    XK_Super_L, XK_Super_R, XK_Hyper_L,          XK_Hyper_R};

}  // namespace

void Keymap::KeyboardFree::operator()(XkbDescPtr desc) const {
    if (desc) XkbFreeKeyboard(desc, 0, True);
}

void Keymap::load(Display* display) {
    XkbDescPtr desc =
        XkbGetMap(display, XkbKeyTypesMask | XkbKeySymsMask | XkbModifierMapMask, XkbUseCoreKbd);
    if (!desc) throw std::runtime_error("XkbGetMap failed: cannot read the keyboard mapping");
    xkb_.reset(desc);
    found_.clear();
    find_modifier_keys();
}

std::vector<Keysym> Keymap::keysyms(int keycode) const {
    const int count = XkbKeyNumSyms(xkb_.get(), keycode);
    const KeySym* syms = XkbKeySymsPtr(xkb_.get(), keycode);
    return std::vector<Keysym>(syms, syms + count);
}

void Keymap::leave_out(const std::vector<std::uint8_t>& keycodes) {
    left_out_.reset();
    for (std::uint8_t keycode : keycodes) left_out_.set(keycode);
    found_.clear();
    find_modifier_keys();
}

void Keymap::find_modifier_keys() {
    modifier_keys_.fill(0);
    std::array<std::size_t, kModifierCount> best_rank;
    best_rank.fill(kPressableModifiers.size());
    for (int kc = min_keycode(); kc <= max_keycode(); ++kc) {
        const unsigned mask = xkb_->map->modmap[kc];
        if (!mask || left_out_[kc] || XkbKeyNumGroups(xkb_.get(), kc) == 0) continue;
        const KeySym sym = XkbKeySymEntry(xkb_.get(), kc, 0, 0);
        const auto rank = static_cast<std::size_t>(
            std::find(kPressableModifiers.begin(), kPressableModifiers.end(), sym) -
            kPressableModifiers.begin());
        for (int bit = 0; bit < kModifierCount; ++bit) {
            if ((mask & (1u << bit)) && bit != LockMapIndex && rank < best_rank[bit]) {
                best_rank[bit] = rank;
                modifier_keys_[bit] = static_cast<KeyCode>(kc);
            }
        }
    }
}

int Keymap::effective_group(int keycode, int group) const {
    const unsigned info = XkbKeyGroupInfo(xkb_.get(), keycode);
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

bool Keymap::pressable(unsigned mods) const {
    for (int bit = 0; bit < kModifierCount; ++bit) {
        if ((mods & (1u << bit)) && (bit == LockMapIndex || modifier_keys_[bit] == 0)) return false;
    }
    return true;
}

// The extra modifiers to press so that `type` selects `level` while `current` mods are
// already in effect; nullopt if that level cannot be reached by pressing keys.
std::optional<unsigned> Keymap::mods_for_level(const XkbKeyTypeRec& type, int level,
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

std::optional<Stroke> Keymap::find(Keysym keysym, int group, unsigned current) {
    const std::uint64_t key = std::uint64_t{keysym} | (std::uint64_t(group & 3) << 32) |
                              (std::uint64_t(current & 0xff) << 34);
    if (auto it = found_.find(key); it != found_.end()) return it->second;
    const auto stroke = search(keysym, group, current);
    found_.emplace(key, stroke);
    return stroke;
}

// The stroke needing the fewest extra modifiers, lowest keycode first.
std::optional<Stroke> Keymap::search(Keysym keysym, int group, unsigned current) const {
    std::optional<Stroke> best;
    for (int kc = min_keycode(); kc <= max_keycode(); ++kc) {
        if (left_out_[kc] || XkbKeyNumGroups(xkb_.get(), kc) == 0) continue;
        const int g = effective_group(kc, group);
        const XkbKeyTypeRec& type = *XkbKeyKeyType(xkb_.get(), kc, g);
        const int width = XkbKeyGroupWidth(xkb_.get(), kc, g);
        for (int level = 0; level < width; ++level) {
            if (XkbKeySymEntry(xkb_.get(), kc, level, g) != keysym) continue;
            const auto extra = mods_for_level(type, level, current);
            if (!extra) continue;
            if (!best || std::popcount(*extra) < std::popcount(best->mods))
                best = Stroke{static_cast<KeyCode>(kc), *extra};
        }
    }
    return best;
}

}  // namespace deskbox::input::x11
