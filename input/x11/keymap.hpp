// The keyboard mapping as XKB describes it, read from the X server: which keycode, pressed with
// which modifier keys, types a keysym in the current group, and which key to press for each
// modifier. Spare keycodes (spare_keycodes.hpp) are left out of both searches: the injector
// manages what they hold.
#pragma once

#include <X11/XKBlib.h>

#include <array>
#include <bitset>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "input/actions.hpp"

namespace deskbox::input::x11 {

// Shift, Lock, Control, Mod1..Mod5: the core modifier bits.
inline constexpr int kModifierCount = 8;

// One key press that produces a keysym: the keycode and the real modifiers to hold with it.
struct Stroke {
    KeyCode keycode = 0;
    unsigned mods = 0;
    unsigned spare_levels = 0;  // levels of a spare key this press uses (bit 0: plain, 1: Shift)
};

class Keymap {
  public:
    // Reads the mapping of the core keyboard of `display`, keeping the keycodes left out
    // before. Throws std::runtime_error if the server does not give it.
    void load(Display* display);

    int min_keycode() const { return xkb_->min_key_code; }
    int max_keycode() const { return xkb_->max_key_code; }
    // Every keysym of `keycode`, all groups and levels, NoSymbol included.
    std::vector<Keysym> keysyms(int keycode) const;
    // Whether `keycode` sets a modifier when pressed.
    bool is_modifier(int keycode) const { return xkb_->map->modmap[keycode] != 0; }

    // Keycodes the searches below skip from now on (the spare keycodes).
    void leave_out(const std::vector<std::uint8_t>& keycodes);

    // The key to press for modifier `bit` (ShiftMapIndex...), 0 if none can be (Lock never:
    // pressing CapsLock toggles it).
    KeyCode modifier_key(int bit) const { return modifier_keys_[bit]; }

    // A keycode + the modifiers to press with it that type `keysym` in `group` while `current`
    // modifiers are in effect; nullopt if no key of the layout can. Remembered until the next
    // load or leave_out.
    std::optional<Stroke> find(Keysym keysym, int group, unsigned current);

  private:
    struct KeyboardFree {
        void operator()(XkbDescPtr desc) const;
    };

    void find_modifier_keys();
    int effective_group(int keycode, int group) const;
    bool pressable(unsigned mods) const;
    std::optional<unsigned> mods_for_level(const XkbKeyTypeRec& type, int level,
                                           unsigned current) const;
    std::optional<Stroke> search(Keysym keysym, int group, unsigned current) const;

    std::unique_ptr<XkbDescRec, KeyboardFree> xkb_;
    std::bitset<256> left_out_;
    std::array<KeyCode, kModifierCount> modifier_keys_{};
    std::unordered_map<std::uint64_t, std::optional<Stroke>> found_;
};

}  // namespace deskbox::input::x11
