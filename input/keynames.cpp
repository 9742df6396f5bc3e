#include "input/keynames.hpp"

#include <xkbcommon/xkbcommon.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/utf8.hpp"

namespace deskbox::input {

namespace {

constexpr Keysym kNoSymbol = 0;
constexpr Keysym kReturn = 0xff0d;
constexpr Keysym kTab = 0xff09;
constexpr Keysym kUnicodeKeysymOffset = 0x01000000;

// No keysym name is longer than this; longer input is rejected before it reaches xkbcommon.
constexpr std::size_t kMaxKeyNameBytes = 64;
// A chord is pressed all at once; real shortcuts use at most four or five keys.
constexpr std::size_t kMaxChordKeys = 16;

std::string ascii_lower(std::string_view text) {
    std::string out(text);
    for (char& c : out) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
}

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string_view trim(std::string_view text) {
    while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
    while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
    return text;
}

// Names agents send that are not X keysym names (or are, but only case-insensitively with a
// different meaning). Keys are lower case; values are exact X keysym names.
// "meta", "cmd", "win" and "super" all mean the key with the logo on it: on an X desktop that key
// sends Super_L, and that is what Playwright's "Meta" and macOS's Command mean to agents.
// X's Meta_L (rarely bound by anything) is still reachable by its exact name "Meta_L".
const std::unordered_map<std::string, Keysym>& alias_table() {
    static const auto table = [] {
        constexpr std::pair<const char*, const char*> kAliases[] = {
            {"enter", "Return"},
            {"return", "Return"},
            {"ctrl", "Control_L"},
            {"control", "Control_L"},
            {"lctrl", "Control_L"},
            {"rctrl", "Control_R"},
            {"shift", "Shift_L"},
            {"lshift", "Shift_L"},
            {"rshift", "Shift_R"},
            {"alt", "Alt_L"},
            {"lalt", "Alt_L"},
            {"ralt", "Alt_R"},
            {"option", "Alt_L"},
            {"opt", "Alt_L"},
            {"altgr", "ISO_Level3_Shift"},
            {"meta", "Super_L"},
            {"cmd", "Super_L"},
            {"command", "Super_L"},
            {"super", "Super_L"},
            {"win", "Super_L"},
            {"windows", "Super_L"},
            {"esc", "Escape"},
            {"escape", "Escape"},
            {"del", "Delete"},
            {"delete", "Delete"},
            {"backspace", "BackSpace"},
            {"tab", "Tab"},
            {"space", "space"},
            {"spacebar", "space"},
            {"pageup", "Prior"},
            {"page_up", "Prior"},
            {"pgup", "Prior"},
            {"pagedown", "Next"},
            {"page_down", "Next"},
            {"pgdn", "Next"},
            {"home", "Home"},
            {"end", "End"},
            {"insert", "Insert"},
            {"ins", "Insert"},
            {"arrowleft", "Left"},
            {"left", "Left"},
            {"arrowright", "Right"},
            {"right", "Right"},
            {"arrowup", "Up"},
            {"up", "Up"},
            {"arrowdown", "Down"},
            {"down", "Down"},
            {"capslock", "Caps_Lock"},
            {"caps", "Caps_Lock"},
            {"numlock", "Num_Lock"},
            {"scrolllock", "Scroll_Lock"},
            {"printscreen", "Print"},
            {"print", "Print"},
            {"prtsc", "Print"},
            {"prtscr", "Print"},
            {"pause", "Pause"},
            {"menu", "Menu"},
            {"contextmenu", "Menu"},
            {"apps", "Menu"},
            {"minus", "minus"},
            {"hyphen", "minus"},
            {"plus", "plus"},
            {"equal", "equal"},
            {"equals", "equal"},
            {"comma", "comma"},
            {"period", "period"},
            {"dot", "period"},
            {"slash", "slash"},
            {"backslash", "backslash"},
            {"semicolon", "semicolon"},
            {"colon", "colon"},
            {"apostrophe", "apostrophe"},
            {"quote", "apostrophe"},
            {"backquote", "grave"},
            {"backtick", "grave"},
            {"grave", "grave"},
            {"bracketleft", "bracketleft"},
            {"bracketright", "bracketright"},
            {"volumeup", "XF86AudioRaiseVolume"},
            {"volumedown", "XF86AudioLowerVolume"},
            {"volumemute", "XF86AudioMute"},
            {"mute", "XF86AudioMute"},
        };
        std::unordered_map<std::string, Keysym> map;
        for (const auto& [alias, keysym_name] : kAliases) {
            map.emplace(alias, xkb_keysym_from_name(keysym_name, XKB_KEYSYM_NO_FLAGS));
        }
        return map;
    }();
    return table;
}

}  // namespace

Keysym keysym_for_codepoint(char32_t codepoint) {
    if (codepoint == U'\n' || codepoint == U'\r') return kReturn;
    if (codepoint == U'\t') return kTab;
    if (codepoint < 0x20 || (codepoint >= 0x7f && codepoint < 0xa0)) return kNoSymbol;
    if (codepoint > 0x10ffff || (codepoint >= 0xd800 && codepoint <= 0xdfff)) return kNoSymbol;
    const Keysym keysym = xkb_utf32_to_keysym(codepoint);
    return keysym != kNoSymbol ? keysym : kUnicodeKeysymOffset + codepoint;
}

std::optional<Keysym> keysym_from_name(std::string_view name) {
    if (name.empty() || name.size() > kMaxKeyNameBytes) return std::nullopt;
    if (name.find('\0') != std::string_view::npos) return std::nullopt;
    const std::string name_string(name);

    // Exact X names first, so "a" and "A", or "Meta_L" and "meta", stay distinct.
    if (Keysym exact = xkb_keysym_from_name(name_string.c_str(), XKB_KEYSYM_NO_FLAGS)) return exact;

    // One character stands for itself: "+", "é", "€", "日".
    if (auto codepoints = utf8::code_points(name); codepoints && codepoints->size() == 1) {
        if (Keysym keysym = keysym_for_codepoint(codepoints->front())) return keysym;
        return std::nullopt;
    }

    const std::string lower = ascii_lower(name);
    const auto& aliases = alias_table();
    if (auto it = aliases.find(lower); it != aliases.end()) return it->second;

    if (Keysym keysym = xkb_keysym_from_name(name_string.c_str(), XKB_KEYSYM_CASE_INSENSITIVE)) {
        return keysym;
    }
    return std::nullopt;
}

KeyChord parse_chord(std::string_view text, const std::string& field) {
    text = trim(text);
    if (text.empty()) throw ActionError(field, "no key given");
    if (std::any_of(text.begin(), text.end(), is_space)) {
        throw ActionError(field,
                          "a key combination cannot contain spaces: " + quote_for_error(text) +
                              " (join keys with '+', e.g. 'ctrl+shift+t')");
    }
    KeyChord chord;
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::string_view name;
        if (text[pos] == '+') {
            // A '+' where a key name starts is the plus key itself: "+" or "ctrl++".
            name = text.substr(pos, 1);
            pos += 1;
        } else {
            const std::size_t end = std::min(text.find('+', pos), text.size());
            name = text.substr(pos, end - pos);
            pos = end;
        }
        const auto keysym = keysym_from_name(name);
        if (!keysym) throw ActionError(field, "unknown key " + quote_for_error(name));
        if (std::find(chord.keys.begin(), chord.keys.end(), *keysym) != chord.keys.end()) {
            throw ActionError(field, "key " + quote_for_error(name) + " appears twice in " +
                                         quote_for_error(text));
        }
        chord.keys.push_back(*keysym);
        if (chord.keys.size() > kMaxChordKeys) {
            throw ActionError(
                field, "more than " + std::to_string(kMaxChordKeys) + " keys in one combination");
        }
        if (pos == text.size()) break;
        // Only a '+' separator may follow a key.
        if (text[pos] != '+') {
            throw ActionError(field, "expected '+' after key " + quote_for_error(name) + " in " +
                                         quote_for_error(text));
        }
        pos += 1;
        if (pos == text.size()) {
            throw ActionError(field, quote_for_error(text) +
                                         " ends with '+' (for the plus key write '+' or 'plus')");
        }
    }
    return chord;
}

std::vector<KeyChord> parse_key_sequence(std::string_view text, const std::string& field) {
    std::vector<KeyChord> chords;
    std::size_t pos = 0;
    while (pos < text.size()) {
        while (pos < text.size() && is_space(text[pos])) ++pos;
        std::size_t end = pos;
        while (end < text.size() && !is_space(text[end])) ++end;
        if (end == pos) break;
        const std::string_view token = text.substr(pos, end - pos);
        // "ctrl + a" would otherwise press ctrl, then plus, then a: almost surely not what was
        // meant. A lone "+" is only the plus key when it is the whole sequence.
        if (token == "+" && trim(text) != "+") {
            throw ActionError(field, "'+' between spaces is ambiguous in " + quote_for_error(text) +
                                         "; write 'ctrl+a' (no spaces), or 'plus' for the "
                                         "plus key");
        }
        chords.push_back(parse_chord(token, field));
        pos = end;
    }
    if (chords.empty()) throw ActionError(field, "no key given");
    return chords;
}

std::string keysym_name(Keysym keysym) {
    std::array<char, 64> buffer{};
    if (xkb_keysym_get_name(keysym, buffer.data(), buffer.size()) > 0) return buffer.data();
    // Not a valid keysym: the hex form is still what xkb_keysym_from_name reads back.
    std::snprintf(buffer.data(), buffer.size(), "0x%08x", static_cast<unsigned>(keysym));
    return buffer.data();
}

std::string describe_keysym(Keysym keysym) {
    std::array<char, 64> buffer{};
    std::snprintf(buffer.data(), buffer.size(), "0x%lx", static_cast<unsigned long>(keysym));
    std::string text = std::string("keysym ") + buffer.data();
    if (xkb_keysym_get_name(keysym, buffer.data(), buffer.size()) > 0)
        text += std::string(" (") + buffer.data() + ")";
    return text;
}

}  // namespace deskbox::input
