// Key names: X keysym names, the aliases agents send, single characters, chords and sequences.
// Expected values come from xkbcommon's own keysym header, not from the code under test.
#include "input/keynames.hpp"

#include <gtest/gtest.h>
#include <xkbcommon/xkbcommon-keysyms.h>

#include <string>
#include <vector>

#include "common/utf8.hpp"

namespace deskbox::input {
namespace {

struct NameCase {
    std::string name;
    Keysym expected;
};

// Every name an agent plausibly sends, with the keysym it must press.
const std::vector<NameCase> kNames = {
    // Exact X names (case-sensitive first: "a" and "A" are different keysyms).
    {"a", XKB_KEY_a},
    {"A", XKB_KEY_A},
    {"Return", XKB_KEY_Return},
    {"Control_L", XKB_KEY_Control_L},
    {"Control_R", XKB_KEY_Control_R},
    {"Meta_L", XKB_KEY_Meta_L},
    {"Super_R", XKB_KEY_Super_R},
    {"KP_0", XKB_KEY_KP_0},
    {"KP_Enter", XKB_KEY_KP_Enter},
    {"Page_Up", XKB_KEY_Prior},
    {"BackSpace", XKB_KEY_BackSpace},
    {"XF86AudioMute", XKB_KEY_XF86AudioMute},
    {"eacute", XKB_KEY_eacute},
    {"U65E5", 0x10065e5},
    {"1", XKB_KEY_1},
    // Aliases, any case.
    {"enter", XKB_KEY_Return},
    {"Enter", XKB_KEY_Return},
    {"ENTER", XKB_KEY_Return},
    {"return", XKB_KEY_Return},
    {"ctrl", XKB_KEY_Control_L},
    {"CTRL", XKB_KEY_Control_L},
    {"Ctrl", XKB_KEY_Control_L},
    {"control", XKB_KEY_Control_L},
    {"rctrl", XKB_KEY_Control_R},
    {"shift", XKB_KEY_Shift_L},
    {"SHIFT", XKB_KEY_Shift_L},
    {"alt", XKB_KEY_Alt_L},
    {"ALT", XKB_KEY_Alt_L},
    {"option", XKB_KEY_Alt_L},
    {"OPTION", XKB_KEY_Alt_L},
    {"altgr", XKB_KEY_ISO_Level3_Shift},
    // The logo key: Super_L whatever the agent calls it.
    {"meta", XKB_KEY_Super_L},
    {"META", XKB_KEY_Super_L},
    {"cmd", XKB_KEY_Super_L},
    {"CMD", XKB_KEY_Super_L},
    {"command", XKB_KEY_Super_L},
    {"super", XKB_KEY_Super_L},
    {"SUPER", XKB_KEY_Super_L},
    {"win", XKB_KEY_Super_L},
    {"windows", XKB_KEY_Super_L},
    {"esc", XKB_KEY_Escape},
    {"ESC", XKB_KEY_Escape},
    {"escape", XKB_KEY_Escape},
    {"del", XKB_KEY_Delete},
    {"delete", XKB_KEY_Delete},
    {"DELETE", XKB_KEY_Delete},
    {"backspace", XKB_KEY_BackSpace},
    {"BACKSPACE", XKB_KEY_BackSpace},
    {"tab", XKB_KEY_Tab},
    {"TAB", XKB_KEY_Tab},
    {"space", XKB_KEY_space},
    {"SPACE", XKB_KEY_space},
    {"pageup", XKB_KEY_Prior},
    {"page_up", XKB_KEY_Prior},
    {"PGUP", XKB_KEY_Prior},
    {"PAGEUP", XKB_KEY_Prior},
    {"pagedown", XKB_KEY_Next},
    {"page_down", XKB_KEY_Next},
    {"pgdn", XKB_KEY_Next},
    {"PAGEDOWN", XKB_KEY_Next},
    {"home", XKB_KEY_Home},
    {"HOME", XKB_KEY_Home},
    {"end", XKB_KEY_End},
    {"END", XKB_KEY_End},
    {"insert", XKB_KEY_Insert},
    {"arrowleft", XKB_KEY_Left},
    {"ARROWLEFT", XKB_KEY_Left},
    {"left", XKB_KEY_Left},
    {"Left", XKB_KEY_Left},
    {"arrowright", XKB_KEY_Right},
    {"ARROWRIGHT", XKB_KEY_Right},
    {"right", XKB_KEY_Right},
    {"arrowup", XKB_KEY_Up},
    {"ARROWUP", XKB_KEY_Up},
    {"up", XKB_KEY_Up},
    {"arrowdown", XKB_KEY_Down},
    {"ARROWDOWN", XKB_KEY_Down},
    {"down", XKB_KEY_Down},
    {"f1", XKB_KEY_F1},
    {"F1", XKB_KEY_F1},
    {"F12", XKB_KEY_F12},
    {"f24", XKB_KEY_F24},
    {"capslock", XKB_KEY_Caps_Lock},
    {"CAPSLOCK", XKB_KEY_Caps_Lock},
    {"printscreen", XKB_KEY_Print},
    {"print", XKB_KEY_Print},
    {"minus", XKB_KEY_minus},
    {"plus", XKB_KEY_plus},
    {"equal", XKB_KEY_equal},
    {"comma", XKB_KEY_comma},
    {"period", XKB_KEY_period},
    {"slash", XKB_KEY_slash},
    {"backslash", XKB_KEY_backslash},
    {"semicolon", XKB_KEY_semicolon},
    {"apostrophe", XKB_KEY_apostrophe},
    {"backquote", XKB_KEY_grave},
    {"menu", XKB_KEY_Menu},
    {"numlock", XKB_KEY_Num_Lock},
    // X names written in another case.
    {"backSPACE", XKB_KEY_BackSpace},
    {"caps_lock", XKB_KEY_Caps_Lock},
    {"kp_enter", XKB_KEY_KP_Enter},
    // Single characters stand for themselves.
    {"+", XKB_KEY_plus},
    {"/", XKB_KEY_slash},
    {"\\", XKB_KEY_backslash},
    {" ", XKB_KEY_space},
    {"é", XKB_KEY_eacute},
    {"€", XKB_KEY_EuroSign},
    {"日", 0x10065e5},
    {"😀", 0x101f600},
    {"\n", XKB_KEY_Return},  // newline is Return
    {"\t", XKB_KEY_Tab},
};

TEST(KeysymFromName, ResolvesNamesAliasesAndCharacters) {
    for (const auto& c : kNames) {
        SCOPED_TRACE("name '" + c.name + "'");
        const auto keysym = keysym_from_name(c.name);
        ASSERT_TRUE(keysym.has_value());
        EXPECT_EQ(*keysym, c.expected) << "got " << keysym_name(*keysym);
    }
}

TEST(KeysymFromName, RejectsUnknownNames) {
    const std::vector<std::string> unknown = {
        "",
        "ctrlx",
        "NoSymbol",       // xkbcommon's name for "no key"
        "control shift",  // two names
        "ctrl+c",         // a chord is not a key name
        "\x01",           // control characters have no key
        std::string("a\0b", 3),
        std::string(200, 'x'),
        "\xff",  // not UTF-8
        "U+00E9",
    };
    for (const auto& name : unknown) {
        SCOPED_TRACE("name '" + name + "'");
        EXPECT_FALSE(keysym_from_name(name).has_value());
    }
}

TEST(KeysymForCodepoint, MapsLatin1LegacyAndUnicode) {
    struct Case {
        char32_t cp;
        Keysym expected;
    };
    const std::vector<Case> cases = {
        {U'a', XKB_KEY_a},
        {U'Z', XKB_KEY_Z},
        {U' ', XKB_KEY_space},
        {U'~', XKB_KEY_asciitilde},
        {0xa0, XKB_KEY_nobreakspace},
        {0xe9, XKB_KEY_eacute},
        {0xff, XKB_KEY_ydiaeresis},
        {0x20ac, XKB_KEY_EuroSign},      // legacy keysym preferred
        {0x05d0, XKB_KEY_hebrew_aleph},  // legacy keysym preferred
        {0x65e5, 0x10065e5},             // no legacy keysym: Unicode keysym
        {0x1f600, 0x101f600},            // outside the BMP
        {0x10fffd, 0x110fffd},           // last plane
        {U'\n', XKB_KEY_Return},         // newline is Return in deskbox
        {U'\r', XKB_KEY_Return},
        {U'\t', XKB_KEY_Tab},
        {0x00, XKB_KEY_NoSymbol},
        {0x07, XKB_KEY_NoSymbol},
        {0x1b, XKB_KEY_NoSymbol},
        {0x7f, XKB_KEY_NoSymbol},
        {0x85, XKB_KEY_NoSymbol},
        {0xd800, XKB_KEY_NoSymbol},
        {0xdfff, XKB_KEY_NoSymbol},
        {0x110000, XKB_KEY_NoSymbol},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(testing::Message() << "U+" << std::hex << static_cast<unsigned>(c.cp));
        EXPECT_EQ(keysym_for_codepoint(c.cp), c.expected);
    }
}

TEST(KeysymName, GivesCanonicalXNames) {
    struct Case {
        Keysym keysym;
        std::string name;
    };
    const std::vector<Case> cases = {
        {XKB_KEY_Return, "Return"}, {XKB_KEY_Control_L, "Control_L"}, {XKB_KEY_a, "a"},
        {XKB_KEY_A, "A"},           {XKB_KEY_plus, "plus"},           {XKB_KEY_space, "space"},
        {XKB_KEY_Prior, "Prior"},   {XKB_KEY_Super_L, "Super_L"},     {XKB_KEY_eacute, "eacute"},
        {0x10065e5, "U65E5"},       {XKB_KEY_EuroSign, "EuroSign"},
    };
    for (const auto& c : cases) {
        EXPECT_EQ(keysym_name(c.keysym), c.name);
    }
}

// The native JSON names keys by keysym_name; reading them back must give the same keysym.
TEST(KeysymName, RoundTripsThroughKeysymFromName) {
    std::vector<Keysym> keysyms;
    for (Keysym k = 0x20; k <= 0x7e; ++k) keysyms.push_back(k);
    for (Keysym k = 0xa0; k <= 0xff; ++k) keysyms.push_back(k);
    for (Keysym k = 0xff08; k <= 0xffff; ++k) keysyms.push_back(k);  // function keys, modifiers
    for (char32_t cp : {0x20acu, 0x5d0u, 0x65e5u, 0x1f600u, 0x100u, 0x3b1u}) {
        keysyms.push_back(keysym_for_codepoint(cp));
    }
    int checked = 0;
    for (Keysym k : keysyms) {
        const std::string name = keysym_name(k);
        // Skip unnamed gaps in the function-key block (names are hex like "0x0000ff0c").
        if (name.rfind("0x", 0) == 0) continue;
        SCOPED_TRACE(name);
        const auto back = keysym_from_name(name);
        ASSERT_TRUE(back.has_value());
        EXPECT_EQ(*back, k);
        ++checked;
    }
    EXPECT_GT(checked, 250);
}

// ---- chords and sequences ----

struct ChordCase {
    std::string text;
    std::vector<Keysym> keys;
};

TEST(ParseChord, ParsesCombinations) {
    const std::vector<ChordCase> cases = {
        {"ctrl+shift+t", {XKB_KEY_Control_L, XKB_KEY_Shift_L, XKB_KEY_t}},
        {"Return", {XKB_KEY_Return}},
        {"alt+Tab", {XKB_KEY_Alt_L, XKB_KEY_Tab}},
        {"ctrl+s", {XKB_KEY_Control_L, XKB_KEY_s}},
        {"super+l", {XKB_KEY_Super_L, XKB_KEY_l}},
        {"CTRL+ALT+DELETE", {XKB_KEY_Control_L, XKB_KEY_Alt_L, XKB_KEY_Delete}},
        {"ctrl++", {XKB_KEY_Control_L, XKB_KEY_plus}},
        {"ctrl+plus", {XKB_KEY_Control_L, XKB_KEY_plus}},
        {"+", {XKB_KEY_plus}},
        {"ctrl+shift++", {XKB_KEY_Control_L, XKB_KEY_Shift_L, XKB_KEY_plus}},
        {"ctrl+-", {XKB_KEY_Control_L, XKB_KEY_minus}},
        {"ctrl+é", {XKB_KEY_Control_L, XKB_KEY_eacute}},
        {"  ctrl+c  ", {XKB_KEY_Control_L, XKB_KEY_c}},
        {"KP_0", {XKB_KEY_KP_0}},
        {"shift+F10", {XKB_KEY_Shift_L, XKB_KEY_F10}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE("'" + c.text + "'");
        EXPECT_EQ(parse_chord(c.text, "keys").keys, c.keys);
    }
}

struct ErrorCase {
    std::string text;
    std::string reason_part;
};

void expect_chord_error(const ErrorCase& c, bool sequence) {
    SCOPED_TRACE("'" + c.text + "'");
    try {
        if (sequence) {
            parse_key_sequence(c.text, "actions[4].text");
        } else {
            parse_chord(c.text, "actions[4].text");
        }
        ADD_FAILURE() << "no error";
    } catch (const ActionError& e) {
        EXPECT_EQ(e.field(), "actions[4].text");
        EXPECT_NE(e.reason().find(c.reason_part), std::string::npos) << e.reason();
    }
}

TEST(ParseChord, RejectsBadCombinations) {
    const std::vector<ErrorCase> cases = {
        {"", "no key given"},
        {"   ", "no key given"},
        {"ctrl+", "ends with '+'"},
        {"++", "ends with '+'"},
        {"ctrl+bogus", "unknown key 'bogus'"},
        {"bogus", "unknown key 'bogus'"},
        {"ctrl+ctrl", "appears twice"},
        {"ctrl+Control_L", "appears twice"},
        {"ctrl a", "cannot contain spaces"},
        {"shift++a", "expected '+' after key '+'"},
        {"a+b+c+d+e+f+g+h+i+j+k+l+m+n+o+p+q", "more than 16 keys"},
        {"ctrl+\xff", "unknown key <invalid UTF-8>"},
    };
    for (const auto& c : cases) expect_chord_error(c, false);
}

TEST(ParseKeySequence, SplitsChordsOnWhitespace) {
    struct Case {
        std::string text;
        std::vector<KeyChord> chords;
    };
    const std::vector<Case> cases = {
        {"ctrl+a Delete", {{{XKB_KEY_Control_L, XKB_KEY_a}}, {{XKB_KEY_Delete}}}},
        {"Return", {{{XKB_KEY_Return}}}},
        {"  Return  ", {{{XKB_KEY_Return}}}},
        {"ctrl+a  ctrl+c\tctrl+v",
         {{{XKB_KEY_Control_L, XKB_KEY_a}},
          {{XKB_KEY_Control_L, XKB_KEY_c}},
          {{XKB_KEY_Control_L, XKB_KEY_v}}}},
        {"+", {{{XKB_KEY_plus}}}},
        {"ctrl++ ctrl+minus",
         {{{XKB_KEY_Control_L, XKB_KEY_plus}}, {{XKB_KEY_Control_L, XKB_KEY_minus}}}},
        {"Down Down Return", {{{XKB_KEY_Down}}, {{XKB_KEY_Down}}, {{XKB_KEY_Return}}}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE("'" + c.text + "'");
        EXPECT_EQ(parse_key_sequence(c.text, "keys"), c.chords);
    }
}

TEST(ParseKeySequence, RejectsBadSequences) {
    const std::vector<ErrorCase> cases = {
        {"", "no key given"},
        {" \t ", "no key given"},
        {"ctrl + a", "'+' between spaces is ambiguous"},
        {"a +", "'+' between spaces is ambiguous"},
        {"ctrl+a bogus", "unknown key 'bogus'"},
        {"ctrl+a ctrl+", "ends with '+'"},
    };
    for (const auto& c : cases) expect_chord_error(c, true);
}

TEST(QuoteForError, IsShortPrintableAndValidUtf8) {
    EXPECT_EQ(quote_for_error("bogus"), "'bogus'");
    EXPECT_EQ(quote_for_error("a\nb"), "'a\\x0ab'");
    EXPECT_EQ(quote_for_error("\xff"), "<invalid UTF-8>");
    const std::string long_text = std::string(47, 'x') + "日日";  // 47 + 6 bytes
    const std::string quoted = quote_for_error(long_text);
    EXPECT_EQ(quoted, "'" + std::string(47, 'x') + "...'");  // never cuts inside 日
    EXPECT_TRUE(utf8::is_valid(quoted));
}

}  // namespace
}  // namespace deskbox::input
