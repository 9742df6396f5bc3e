// Key names agents send ("enter", "ctrl", "cmd", "PageDown", "arrowleft", X keysym names...)
// resolved to X keysyms, case-insensitively, without needing an X display (xkbcommon).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "input/actions.hpp"

namespace deskbox::input {

// One key name -> keysym; nullopt if unknown. Tried in order: the exact X keysym name ("A",
// "Return", "Meta_L", "0x61", "U65E5"), a single character ("+", "é", "日"), the aliases agents
// send, case-insensitively ("enter", "CTRL", "cmd" -> Super_L, "pgdn"), then the X name in any
// case ("backspace").
std::optional<Keysym> keysym_from_name(std::string_view name);

// "ctrl+shift+t" -> chord; throws ActionError{field, "unknown key 'xyz'"}.
KeyChord parse_chord(std::string_view text, const std::string& field);

// xdotool-style sequence: "ctrl+a Delete" -> two chords.
std::vector<KeyChord> parse_key_sequence(std::string_view text, const std::string& field);

// Canonical name for a keysym ("Return", "Control_L", "a"), used in native JSON.
std::string keysym_name(Keysym keysym);

// A keysym for an error message: "keysym 0xff0d (Return)", or just the hex for a value that
// names no keysym.
std::string describe_keysym(Keysym keysym);

// The keysym that types a Unicode code point: the legacy keysym where X has one (Latin-1 direct,
// "EuroSign", "hebrew_aleph"...), else 0x01000000 + cp (xkb_utf32_to_keysym). '\n' and '\r' give
// Return (newline is Return in deskbox), '\t' Tab. Returns 0 (NoSymbol) for code points nothing
// can type: other C0/C1 controls, surrogates, values above U+10FFFF.
Keysym keysym_for_codepoint(char32_t codepoint);

}  // namespace deskbox::input
