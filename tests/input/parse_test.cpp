// Action JSON in three dialects -> one model. Payloads are shaped like what the agents send:
// Anthropic computer-use tool_use inputs, OpenAI computer_call actions, and deskbox's native form.
#include "input/parse.hpp"

#include <gtest/gtest.h>
#include <xkbcommon/xkbcommon-keysyms.h>

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "tests/input/expect_action_error.hpp"

namespace deskbox::input {

// Readable failure output for gtest.
inline void PrintTo(const Point& p, std::ostream* os) {
    *os << "(" << p.x << ", " << p.y << ")";
}
inline void PrintTo(const Action& a, std::ostream* os) {
    *os << to_native_json(a).dump();
}

namespace {

using nlohmann::json;

constexpr Keysym kCtrl = XKB_KEY_Control_L;
constexpr Keysym kShift = XKB_KEY_Shift_L;
constexpr Keysym kAlt = XKB_KEY_Alt_L;
constexpr Keysym kSuper = XKB_KEY_Super_L;

struct ValidCase {
    std::string json_text;
    Action expected;
};

void expect_parses(Dialect dialect, const std::vector<ValidCase>& cases) {
    for (const auto& c : cases) {
        SCOPED_TRACE(c.json_text);
        Action parsed;
        try {
            parsed = parse_action(json::parse(c.json_text), dialect);
        } catch (const ActionError& e) {
            ADD_FAILURE() << "unexpected error: " << e.what();
            continue;
        }
        EXPECT_EQ(parsed, c.expected);
    }
}

struct InvalidCase {
    std::string json_text;
    std::string field;
    std::string reason_part;
};

void expect_rejects(Dialect dialect, const std::vector<InvalidCase>& cases) {
    for (const auto& c : cases) {
        SCOPED_TRACE(c.json_text);
        const json object = json::parse(c.json_text);
        expect_error([&] { parse_action(object, dialect); }, c.field, c.reason_part);
        // The same object inside a batch: every field gets the actions[i] prefix.
        const json batch = {{"actions", {json{{"type", "screenshot"}}, object}}};
        if (dialect == Dialect::anthropic) {
            const json anthropic_batch = {{"actions", {json{{"action", "screenshot"}}, object}}};
            expect_error([&] { parse_actions(anthropic_batch, dialect); }, "actions[1]." + c.field,
                         c.reason_part);
        } else {
            expect_error([&] { parse_actions(batch, dialect); }, "actions[1]." + c.field,
                         c.reason_part);
        }
    }
}

// ------------------------------------------------------------------------------------------
// Native
// ------------------------------------------------------------------------------------------

TEST(NativeDialect, ParsesEveryActionType) {
    expect_parses(
        Dialect::native,
        {
            {R"({"type":"click","x":100,"y":200})", Click{Point{100, 200}, Button::left, 1, {}}},
            {R"({"type":"click"})", Click{std::nullopt, Button::left, 1, {}}},
            {R"({"type":"click","x":5,"y":6,"button":"right","count":2})",
             Click{Point{5, 6}, Button::right, 2, {}}},
            {R"({"type":"click","x":5,"y":6,"button":"middle","count":3,"hold_keys":["shift","ctrl"]})",
             Click{Point{5, 6}, Button::middle, 3, {kShift, kCtrl}}},
            {R"({"type":"click","x":0,"y":0,"button":"back"})",
             Click{Point{0, 0}, Button::back, 1, {}}},
            {R"({"type":"click","x":1,"y":1,"button":"forward"})",
             Click{Point{1, 1}, Button::forward, 1, {}}},
            {R"({"type":"click","x":10.0,"y":2e1})", Click{Point{10, 20}, Button::left, 1, {}}},
            {R"({"type":"click","x":null,"y":null,"hold_keys":null})",
             Click{std::nullopt, Button::left, 1, {}}},
            {R"({"type":"click","x":32767,"y":0})", Click{Point{32767, 0}, Button::left, 1, {}}},
            {R"({"type":"move","x":640,"y":400})", Move{{640, 400}}},
            {R"({"type":"mouse_down"})", MouseDown{Button::left, std::nullopt}},
            {R"({"type":"mouse_down","button":"right","x":3,"y":4})",
             MouseDown{Button::right, Point{3, 4}}},
            {R"({"type":"mouse_up","x":3,"y":4})", MouseUp{Button::left, Point{3, 4}}},
            {R"({"type":"drag","path":[[10,10],[200,300]]})",
             Drag{{{10, 10}, {200, 300}}, Button::left, {}}},
            {R"({"type":"drag","path":[[1,2],[3,4],[5,6]],"button":"middle","hold_keys":["alt"]})",
             Drag{{{1, 2}, {3, 4}, {5, 6}}, Button::middle, {kAlt}}},
            {R"({"type":"scroll","dy":3})", Scroll{std::nullopt, 0, 3, {}}},
            {R"({"type":"scroll","x":500,"y":400,"dx":-2,"dy":0})",
             Scroll{Point{500, 400}, -2, 0, {}}},
            {R"({"type":"scroll","x":1,"y":2,"dy":-1000,"hold_keys":["ctrl"]})",
             Scroll{Point{1, 2}, 0, -1000, {kCtrl}}},
            {R"({"type":"type","text":"Hello, world!"})", Type{"Hello, world!"}},
            {R"({"type":"type","text":"line 1\nline 2\tcol"})", Type{"line 1\nline 2\tcol"}},
            {R"({"type":"type","text":"héllo € 日本語 😀"})", Type{"héllo € 日本語 😀"}},
            {R"({"type":"type","text":""})", Type{""}},
            {R"({"type":"key","keys":"ctrl+shift+t"})",
             Key{{KeyChord{{kCtrl, kShift, XKB_KEY_t}}}}},
            {R"({"type":"key","keys":"ctrl+a Delete"})",
             Key{{KeyChord{{kCtrl, XKB_KEY_a}}, KeyChord{{XKB_KEY_Delete}}}}},
            {R"({"type":"key","keys":"ctrl++"})", Key{{KeyChord{{kCtrl, XKB_KEY_plus}}}}},
            {R"({"type":"hold_key","keys":"shift","duration_ms":500})",
             HoldKey{KeyChord{{kShift}}, 500}},
            {R"({"type":"hold_key","keys":"ctrl+alt","duration_ms":0})",
             HoldKey{KeyChord{{kCtrl, kAlt}}, 0}},
            {R"({"type":"wait","duration_ms":60000})", Wait{60000}},
            {R"({"type":"wait","duration_ms":0})", Wait{0}},
            {R"({"type":"cursor_position"})", CursorPosition{}},
            {R"({"type":"screenshot"})", Screenshot{}},
        });
}

TEST(NativeDialect, RejectsInvalidActions) {
    expect_rejects(
        Dialect::native,
        {
            // the type itself
            {R"({})", "type", "required (one of click, move, mouse_down"},
            {R"({"x":1})", "type", "required"},
            {R"({"type":null})", "type", "required"},
            {R"({"type":5})", "type", "expected a string, got number"},
            {R"({"type":"clik","x":1,"y":2})", "type",
             "unknown action 'clik' (expected one of click"},
            {R"({"type":"left_click"})", "type", "unknown action 'left_click'"},
            // unknown and misplaced fields
            {R"({"type":"click","x":1,"y":2,"extra":1})", "extra",
             "not a field of action 'click' (allowed: x, y, button, count, hold_keys, target)"},
            {R"({"type":"screenshot","x":1})", "x",
             "not a field of action 'screenshot' (it takes none)"},
            {R"({"type":"move","x":1,"y":2,"button":"left"})", "button",
             "not a field of action 'move'"},
            {R"({"type":"type","text":"a","keys":"b"})", "keys", "not a field of action 'type'"},
            // coordinates
            {R"({"type":"click","x":"10","y":5})", "x", "expected an integer, got string"},
            {R"({"type":"click","x":10.5,"y":5})", "x", "expected an integer, got 10.5"},
            {R"({"type":"click","x":true,"y":5})", "x", "expected an integer, got boolean"},
            {R"({"type":"click","x":[1],"y":5})", "x", "expected an integer, got array"},
            {R"({"type":"click","x":-1,"y":5})", "x", "must be between 0 and 32767, got -1"},
            {R"({"type":"click","x":5,"y":32768})", "y", "must be between 0 and 32767, got 32768"},
            {R"({"type":"click","x":5,"y":1e300})", "y", "must be between 0 and 32767"},
            {R"({"type":"click","x":18446744073709551615,"y":5})", "x",
             "must be between 0 and 32767"},
            {R"({"type":"click","x":10})", "y", "required when x is given"},
            {R"({"type":"click","y":10})", "x", "required when y is given"},
            {R"({"type":"click","x":null,"y":10})", "x", "required when y is given"},
            {R"({"type":"move","x":10})", "y", "required for action 'move'"},
            {R"({"type":"move"})", "x", "required for action 'move'"},
            {R"({"type":"mouse_up","x":10})", "y", "required when x is given"},
            // click details
            {R"({"type":"click","count":0})", "count", "must be between 1 and 3, got 0"},
            {R"({"type":"click","count":4})", "count", "must be between 1 and 3, got 4"},
            {R"({"type":"click","count":"2"})", "count", "expected an integer, got string"},
            {R"({"type":"click","button":"wheel"})", "button",
             "unknown button 'wheel' (expected left, right, middle, back or forward)"},
            {R"({"type":"click","button":"LEFT"})", "button", "unknown button 'LEFT'"},
            {R"({"type":"click","button":1})", "button", "expected a string, got number"},
            {R"({"type":"mouse_down","button":"side"})", "button", "unknown button 'side'"},
            // held keys
            {R"({"type":"click","hold_keys":"shift"})", "hold_keys",
             "expected an array, got string"},
            {R"({"type":"click","hold_keys":[123]})", "hold_keys[0]",
             "expected a string, got number"},
            {R"({"type":"click","hold_keys":["shift","bogus"]})", "hold_keys[1]",
             "unknown key 'bogus'"},
            {R"({"type":"click","hold_keys":["shift","Shift_L"]})", "hold_keys[1]",
             "key 'Shift_L' is already in the list"},
            {R"({"type":"scroll","dy":1,"hold_keys":["ctrl+shift"]})", "hold_keys[0]",
             "unknown key 'ctrl+shift'"},
            // drag
            {R"({"type":"drag"})", "path", "required for action 'drag'"},
            {R"({"type":"drag","path":"10,10 20,20"})", "path", "expected an array, got string"},
            {R"({"type":"drag","path":[]})", "path", "needs at least 2 points, got 0"},
            {R"({"type":"drag","path":[[1,2]]})", "path", "needs at least 2 points, got 1"},
            {R"({"type":"drag","path":[[1,2],[3]]})", "path[1]",
             "expected 2 numbers [x, y], got 1 elements"},
            {R"({"type":"drag","path":[[1,2],[3,4,5]]})", "path[1]", "got 3 elements"},
            {R"({"type":"drag","path":[[1,2],[3,"4"]]})", "path[1][1]",
             "expected an integer, got string"},
            {R"({"type":"drag","path":[[1,2],{"x":3,"y":4}]})", "path[1]",
             "expected an array [x, y], got object"},
            {R"({"type":"drag","path":[[1,2],[3,-4]]})", "path[1][1]",
             "must be between 0 and 32767"},
            {R"({"type":"drag","path":[[1,2],[3,4]],"button":"wheel"})", "button",
             "unknown button"},
            // scroll
            {R"({"type":"scroll"})", "dy", "dx and dy are both 0: nothing to scroll"},
            {R"({"type":"scroll","x":1,"y":2,"dx":0,"dy":0})", "dy", "nothing to scroll"},
            {R"({"type":"scroll","dy":1001})", "dy", "must be between -1000 and 1000, got 1001"},
            {R"({"type":"scroll","dx":-1001})", "dx", "must be between -1000 and 1000"},
            {R"({"type":"scroll","dy":0.5})", "dy", "expected an integer, got 0.5"},
            // type
            {R"({"type":"type"})", "text", "required for action 'type'"},
            {R"({"type":"type","text":5})", "text", "expected a string, got number"},
            {R"({"type":"type","text":["a"]})", "text", "expected a string, got array"},
            {R"({"type":"type","text":"a\r\nb"})", "text",
             "contains control character U+000D at byte 1; only \\n and \\t can be typed"},
            {R"({"type":"type","text":"a\u0000b"})", "text", "control character U+0000 at byte 1"},
            {R"({"type":"type","text":"\u001b[31mred"})", "text", "U+001B at byte 0"},
            {R"({"type":"type","text":"é\u007f"})", "text", "U+007F at byte 2"},
            {R"({"type":"type","text":"x\u0085"})", "text", "U+0085 at byte 1"},
            {R"({"type":"type","text":"bell\u0007"})", "text", "U+0007 at byte 4"},
            // key
            {R"({"type":"key"})", "keys", "required for action 'key'"},
            {R"({"type":"key","keys":["ctrl","c"]})", "keys", "expected a string, got array"},
            {R"({"type":"key","keys":""})", "keys", "no key given"},
            {R"({"type":"key","keys":"ctrl+"})", "keys", "ends with '+'"},
            {R"({"type":"key","keys":"ctrl+bogus"})", "keys", "unknown key 'bogus'"},
            {R"({"type":"key","keys":"ctrl + c"})", "keys", "'+' between spaces is ambiguous"},
            // hold_key
            {R"({"type":"hold_key","keys":"shift"})", "duration_ms",
             "required for action 'hold_key'"},
            {R"({"type":"hold_key","duration_ms":5})", "keys", "required"},
            {R"({"type":"hold_key","keys":"ctrl a","duration_ms":5})", "keys",
             "cannot contain spaces"},
            {R"({"type":"hold_key","keys":"shift","duration_ms":60001})", "duration_ms",
             "must be between 0 and 60000, got 60001"},
            {R"({"type":"hold_key","keys":"shift","duration_ms":-1})", "duration_ms",
             "must be between 0"},
            // wait
            {R"({"type":"wait"})", "duration_ms", "required for action 'wait'"},
            {R"({"type":"wait","duration_ms":1.5})", "duration_ms", "expected an integer, got 1.5"},
            {R"({"type":"wait","duration_ms":60001})", "duration_ms",
             "must be between 0 and 60000"},
            {R"({"type":"wait","duration_ms":"100"})", "duration_ms",
             "expected an integer, got string"},
        });
}

// parse_action(to_native_json(a)) == a for every action type, and the JSON itself is stable:
// to_native_json(parse_action(j)) == j for JSON in canonical form.
TEST(NativeDialect, RoundTripsEveryActionType) {
    const std::vector<Action> actions = {
        Click{Point{100, 200}, Button::left, 1, {}},
        Click{std::nullopt, Button::right, 3, {kShift, kCtrl, kAlt, kSuper}},
        Click{Point{0, 32767}, Button::forward, 2, {}},
        Click{Point{7, 8}, Button::back, 1, {XKB_KEY_Meta_L}},
        Move{{640, 400}},
        MouseDown{Button::left, std::nullopt},
        MouseDown{Button::middle, Point{1, 2}},
        MouseUp{Button::right, Point{3, 4}},
        MouseUp{Button::left, std::nullopt},
        Drag{{{0, 0}, {10, 10}, {20, 5}}, Button::left, {}},
        Drag{{{5, 5}, {6, 6}}, Button::right, {kShift}},
        Scroll{std::nullopt, 0, -5, {}},
        Scroll{Point{50, 60}, 3, 4, {kCtrl}},
        Click{std::nullopt, Button::left, 2, {}, Target{R"({"text":"OK"})"}},
        Move{{}, {}, Target{R"({"image":"iVBOR","threshold":0.8})"}},
        MouseDown{Button::left, std::nullopt, Target{R"({"text":"a"})"}},
        Scroll{std::nullopt, 0, 2, {}, Target{R"({"text":"list"})"}},
        Type{"multi\nline\ttext with ünïcødé and 😀"},
        Type{""},
        Key{{KeyChord{{kCtrl, kShift, XKB_KEY_t}}}},
        Key{{KeyChord{{kCtrl, XKB_KEY_a}}, KeyChord{{XKB_KEY_Delete}}, KeyChord{{XKB_KEY_plus}}}},
        Key{{KeyChord{{kCtrl, XKB_KEY_plus}}, KeyChord{{XKB_KEY_space}}}},
        Key{{KeyChord{{XKB_KEY_eacute}}, KeyChord{{0x10065e5}}, KeyChord{{XKB_KEY_EuroSign}}}},
        Key{{KeyChord{{XKB_KEY_A}}, KeyChord{{XKB_KEY_a}}}},
        HoldKey{KeyChord{{kShift}}, 1500},
        HoldKey{KeyChord{{kCtrl, kAlt, XKB_KEY_Delete}}, 0},
        KeyDown{kShift},
        KeyUp{XKB_KEY_eacute},
        Wait{0},
        Wait{60000},
        CursorPosition{},
        Screenshot{},
    };
    std::vector<std::string> covered;
    for (const Action& action : actions) {
        const json native = to_native_json(action);
        SCOPED_TRACE(native.dump());
        EXPECT_EQ(parse_action(native, Dialect::native), action);
        // Through text as well, the way it travels on the agent channel.
        const json reparsed = json::parse(native.dump());
        EXPECT_EQ(to_native_json(parse_action(reparsed, Dialect::native)), native);
        covered.push_back(action_type_name(action));
    }
    for (const char* type :
         {"click", "move", "mouse_down", "mouse_up", "drag", "scroll", "type", "key", "hold_key",
          "key_down", "key_up", "wait", "cursor_position", "screenshot"}) {
        EXPECT_NE(std::find(covered.begin(), covered.end(), type), covered.end()) << type;
    }
}

TEST(NativeDialect, WritesTheDocumentedShape) {
    EXPECT_EQ(
        to_native_json(Click{Point{1, 2}, Button::right, 2, {kShift}}),
        json::parse(
            R"({"type":"click","x":1,"y":2,"button":"right","count":2,"hold_keys":["Shift_L"]})"));
    EXPECT_EQ(to_native_json(Drag{{{1, 2}, {3, 4}}, Button::left, {}}),
              json::parse(R"({"type":"drag","path":[[1,2],[3,4]],"button":"left"})"));
    EXPECT_EQ(to_native_json(Scroll{std::nullopt, 0, 3, {}}),
              json::parse(R"({"type":"scroll","dx":0,"dy":3})"));
    EXPECT_EQ(to_native_json(Key{{KeyChord{{kCtrl, XKB_KEY_plus}}, KeyChord{{XKB_KEY_Return}}}}),
              json::parse(R"({"type":"key","keys":"Control_L+plus Return"})"));
    EXPECT_EQ(to_native_json(HoldKey{KeyChord{{kShift}}, 250}),
              json::parse(R"({"type":"hold_key","keys":"Shift_L","duration_ms":250})"));
    EXPECT_EQ(to_native_json(CursorPosition{}), json::parse(R"({"type":"cursor_position"})"));
    EXPECT_EQ(to_native_json(KeyDown{kShift}),
              json::parse(R"({"type":"key_down","key":"Shift_L"})"));
}

TEST(NativeDialect, KeyDownAndUpTakeExactlyOneKey) {
    EXPECT_EQ(parse_action(json{{"type", "key_up"}, {"key", "a"}}, Dialect::native),
              Action{KeyUp{XKB_KEY_a}});
    expect_error(
        [] {
            parse_action(json{{"type", "key_down"}, {"key", "ctrl+a"}}, Dialect::native);
        },
        "key", "expected one key");
    expect_error([] { parse_action(json{{"type", "key_down"}}, Dialect::native); }, "key", "");
}

TEST(NativeDialect, TextLimits) {
    const std::string at_limit(kMaxTextBytes, 'a');
    EXPECT_EQ(parse_action(json{{"type", "type"}, {"text", at_limit}}, Dialect::native),
              Action{Type{at_limit}});
    expect_error(
        [] {
            parse_action(json{{"type", "type"}, {"text", std::string(kMaxTextBytes + 1, 'a')}},
                         Dialect::native);
        },
        "text", "is 65537 bytes; at most 65536 allowed");
    // Invalid UTF-8 can only arrive in JSON built in code (the JSON parser checks text input).
    expect_error(
        [] {
            parse_action(json{{"type", "type"}, {"text", "ok\xc3("}}, Dialect::native);
        },
        "text", "is not valid UTF-8 (bad byte at offset 2)");
    expect_error(
        [] {
            parse_action(json{{"type", "type"}, {"text", "\xed\xa0\x80"}}, Dialect::native);
        },
        "text", "is not valid UTF-8 (bad byte at offset 0)");
    expect_error(
        [] {
            parse_action(json{{"type", "key"}, {"keys", std::string(kMaxTextBytes + 1, 'a')}},
                         Dialect::native);
        },
        "keys", "at most 65536 allowed");
}

TEST(NativeDialect, DragPathLimits) {
    json path = json::array();
    for (std::size_t i = 0; i < kMaxDragPoints; ++i) path.push_back({i % 100, i / 100});
    const Action drag = parse_action(json{{"type", "drag"}, {"path", path}}, Dialect::native);
    EXPECT_EQ(std::get<Drag>(drag).path.size(), kMaxDragPoints);
    EXPECT_EQ(std::get<Drag>(drag).path.back(), (Point{99, 99}));

    path.push_back({1, 1});
    expect_error(
        [&] {
            parse_action(json{{"type", "drag"}, {"path", path}}, Dialect::native);
        },
        "path", "has 10001 points; at most 10000 allowed");
}

TEST(NativeDialect, UnknownKeyErrorsStaySafeToPrint) {
    // A huge or binary key name is quoted short and never breaks JSON serialisation of the error.
    try {
        parse_action(json{{"type", "key"}, {"keys", std::string(5000, 'z')}}, Dialect::native);
        ADD_FAILURE() << "no error";
    } catch (const ActionError& e) {
        EXPECT_EQ(e.field(), "keys");
        EXPECT_LT(e.reason().size(), 120u);
        EXPECT_NO_THROW(json(e.reason()).dump());
    }
    try {
        parse_action(json{{"type", "click"}, {"hold_keys", {"\xff\xfe"}}}, Dialect::native);
        ADD_FAILURE() << "no error";
    } catch (const ActionError& e) {
        EXPECT_EQ(e.field(), "hold_keys[0]");
        EXPECT_NO_THROW(json(e.reason()).dump());
    }
}

// ------------------------------------------------------------------------------------------
// Anthropic computer use: the `input` of a computer tool_use block
// ------------------------------------------------------------------------------------------

TEST(AnthropicDialect, ParsesComputerUseActions) {
    expect_parses(
        Dialect::anthropic,
        {
            {R"({"action":"screenshot"})", Screenshot{}},
            {R"({"action":"cursor_position"})", CursorPosition{}},
            {R"({"action":"left_click","coordinate":[512,384]})",
             Click{Point{512, 384}, Button::left, 1, {}}},
            {R"({"action":"left_click"})", Click{std::nullopt, Button::left, 1, {}}},
            {R"({"action":"right_click","coordinate":[10,20]})",
             Click{Point{10, 20}, Button::right, 1, {}}},
            {R"({"action":"middle_click","coordinate":[10,20]})",
             Click{Point{10, 20}, Button::middle, 1, {}}},
            {R"({"action":"double_click","coordinate":[640,400]})",
             Click{Point{640, 400}, Button::left, 2, {}}},
            {R"({"action":"triple_click","coordinate":[640,400]})",
             Click{Point{640, 400}, Button::left, 3, {}}},
            // computer_20250124: modifier keys held during a click, in `text`
            {R"({"action":"left_click","coordinate":[500,300],"text":"shift"})",
             Click{Point{500, 300}, Button::left, 1, {kShift}}},
            {R"({"action":"left_click","coordinate":[500,300],"text":"ctrl+shift"})",
             Click{Point{500, 300}, Button::left, 1, {kCtrl, kShift}}},
            // ...or in `key`, as the reference implementation reads it
            {R"({"action":"double_click","coordinate":[5,6],"key":"ctrl"})",
             Click{Point{5, 6}, Button::left, 2, {kCtrl}}},
            {R"({"action":"left_click","coordinate":[5,6],"text":""})",
             Click{Point{5, 6}, Button::left, 1, {}}},
            {R"({"action":"left_click","coordinate":[5,6],"text":null})",
             Click{Point{5, 6}, Button::left, 1, {}}},
            {R"({"action":"left_click","coordinate":[100.0,200.0]})",
             Click{Point{100, 200}, Button::left, 1, {}}},
            {R"({"action":"left_click_drag","start_coordinate":[100,200],"coordinate":[300,400]})",
             Drag{{{100, 200}, {300, 400}}, Button::left, {}}},
            {R"({"action":"left_click_drag","start_coordinate":[1,2],"coordinate":[3,4],"text":"alt"})",
             Drag{{{1, 2}, {3, 4}}, Button::left, {kAlt}}},
            {R"({"action":"left_mouse_down"})", MouseDown{Button::left, std::nullopt}},
            {R"({"action":"left_mouse_down","coordinate":[7,8]})",
             MouseDown{Button::left, Point{7, 8}}},
            {R"({"action":"left_mouse_up"})", MouseUp{Button::left, std::nullopt}},
            {R"({"action":"left_mouse_up","coordinate":[9,10]})",
             MouseUp{Button::left, Point{9, 10}}},
            {R"({"action":"mouse_move","coordinate":[800,600]})", Move{{800, 600}}},
            {R"({"action":"scroll","coordinate":[640,400],"scroll_direction":"down","scroll_amount":3})",
             Scroll{Point{640, 400}, 0, 3, {}}},
            {R"({"action":"scroll","coordinate":[640,400],"scroll_direction":"up","scroll_amount":5})",
             Scroll{Point{640, 400}, 0, -5, {}}},
            {R"({"action":"scroll","scroll_direction":"left","scroll_amount":2})",
             Scroll{std::nullopt, -2, 0, {}}},
            {R"({"action":"scroll","coordinate":[1,2],"scroll_direction":"right","scroll_amount":10,"text":"shift"})",
             Scroll{Point{1, 2}, 10, 0, {kShift}}},
            {R"({"action":"scroll","coordinate":[1,2],"scroll_direction":"down","scroll_amount":1,"text":"ctrl"})",
             Scroll{Point{1, 2}, 0, 1, {kCtrl}}},
            {R"({"action":"type","text":"Hello, world!"})", Type{"Hello, world!"}},
            {R"({"action":"type","text":"ls -la\n"})", Type{"ls -la\n"}},
            {R"({"action":"type","text":"Grüße, 日本"})", Type{"Grüße, 日本"}},
            {R"({"action":"key","text":"ctrl+s"})", Key{{KeyChord{{kCtrl, XKB_KEY_s}}}}},
            {R"({"action":"key","text":"Return"})", Key{{KeyChord{{XKB_KEY_Return}}}}},
            {R"({"action":"key","text":"alt+Tab"})", Key{{KeyChord{{kAlt, XKB_KEY_Tab}}}}},
            {R"({"action":"key","text":"KP_0"})", Key{{KeyChord{{XKB_KEY_KP_0}}}}},
            {R"({"action":"key","text":"Up"})", Key{{KeyChord{{XKB_KEY_Up}}}}},
            {R"({"action":"key","text":"super+l"})", Key{{KeyChord{{kSuper, XKB_KEY_l}}}}},
            {R"({"action":"key","text":"ctrl+shift+t"})",
             Key{{KeyChord{{kCtrl, kShift, XKB_KEY_t}}}}},
            {R"({"action":"key","text":"Escape"})", Key{{KeyChord{{XKB_KEY_Escape}}}}},
            {R"({"action":"key","text":"ctrl+a BackSpace"})",
             Key{{KeyChord{{kCtrl, XKB_KEY_a}}, KeyChord{{XKB_KEY_BackSpace}}}}},
            {R"({"action":"key","text":"Page_Down"})", Key{{KeyChord{{XKB_KEY_Next}}}}},
            {R"({"action":"hold_key","text":"shift","duration":1.5})",
             HoldKey{KeyChord{{kShift}}, 1500}},
            {R"({"action":"hold_key","text":"ctrl+alt","duration":2})",
             HoldKey{KeyChord{{kCtrl, kAlt}}, 2000}},
            {R"({"action":"hold_key","text":"a","duration":0.0004})",
             HoldKey{KeyChord{{XKB_KEY_a}}, 0}},
            {R"({"action":"wait","duration":2})", Wait{2000}},
            {R"({"action":"wait","duration":0.25})", Wait{250}},
            {R"({"action":"wait","duration":60})", Wait{60000}},
            {R"({"action":"wait","duration":0})", Wait{0}},
        });
}

TEST(AnthropicDialect, RejectsInvalidActions) {
    expect_rejects(
        Dialect::anthropic,
        {
            {R"({})", "action", "required (one of screenshot, cursor_position, left_click"},
            {R"({"action":5})", "action", "expected a string, got number"},
            {R"({"action":"click","coordinate":[1,2]})", "action", "unknown action 'click'"},
            {R"({"type":"tool_use","id":"toolu_01","name":"computer","input":{"action":"screenshot"}})",
             "action", "send the tool_use block whole (with \"type\": \"tool_use\") or its input"},
            {R"({"action":"zoom","region":[0,0,400]})", "region",
             "expected [x0, y0, x1, y1], got 3"},
            {R"({"action":"zoom","region":[10,0,5,300]})", "region[2]", "x1=5 is left of x0=10"},
            {R"({"action":"zoom","region":[0,300,5,299]})", "region[3]", "y1=299 is above y0=300"},
            {R"({"action":"zoom"})", "region", "required for action 'zoom'"},
            {R"({"action":"left_click","type":"left_click"})", "type",
             "not a field of action 'left_click'"},
            {R"({"action":"screenshot","coordinate":[1,2]})", "coordinate", "it takes none"},
            {R"({"action":"cursor_position","text":"x"})", "text",
             "not a field of action 'cursor_position'"},
            // coordinate
            {R"({"action":"left_click","coordinate":[100]})", "coordinate",
             "expected 2 numbers [x, y], got 1 elements"},
            {R"({"action":"left_click","coordinate":[1,2,3]})", "coordinate", "got 3 elements"},
            {R"({"action":"left_click","coordinate":"100,200"})", "coordinate",
             "expected an array [x, y], got string"},
            {R"({"action":"left_click","coordinate":{"x":1,"y":2}})", "coordinate",
             "expected an array [x, y], got object"},
            {R"({"action":"left_click","coordinate":[-5,10]})", "coordinate[0]",
             "must be between 0 and 32767, got -5"},
            {R"({"action":"left_click","coordinate":[1,2.5]})", "coordinate[1]",
             "expected an integer, got 2.5"},
            {R"({"action":"left_click","coordinate":["1",2]})", "coordinate[0]",
             "expected an integer, got string"},
            {R"({"action":"mouse_move"})", "coordinate", "required for action 'mouse_move'"},
            {R"({"action":"mouse_move","coordinate":null})", "coordinate", "required"},
            {R"({"action":"mouse_move","coordinate":[1,2],"text":"shift"})", "text",
             "not a field of action 'mouse_move'"},
            // click modifiers
            {R"({"action":"left_click","coordinate":[1,2],"text":"bogus"})", "text",
             "unknown key 'bogus'"},
            {R"({"action":"left_click","text":"shift","key":"ctrl"})", "key", "not both"},
            {R"({"action":"right_click","text":"ctrl shift"})", "text", "cannot contain spaces"},
            {R"({"action":"left_click","scroll_amount":3})", "scroll_amount",
             "not a field of action 'left_click'"},
            {R"({"action":"left_click","duration":1})", "duration", "not a field"},
            // drag
            {R"({"action":"left_click_drag","start_coordinate":[1,2]})", "coordinate", "required"},
            {R"({"action":"left_click_drag","start_coordinate":[1],"coordinate":[3,4]})",
             "start_coordinate", "expected 2 numbers"},
            {R"({"action":"left_click_drag","start_coordinate":[1,2],"coordinate":[3,4],"key":"shift"})",
             "key", "not a field of action 'left_click_drag'"},
            {R"({"action":"left_mouse_down","text":"shift"})", "text",
             "not a field of action 'left_mouse_down'"},
            // scroll
            {R"({"action":"scroll","coordinate":[1,2],"scroll_direction":"sideways","scroll_amount":3})",
             "scroll_direction", "unknown direction 'sideways' (expected up, down, left or right)"},
            {R"({"action":"scroll","coordinate":[1,2],"scroll_direction":"DOWN","scroll_amount":3})",
             "scroll_direction", "unknown direction 'DOWN'"},
            {R"({"action":"scroll","coordinate":[1,2],"scroll_amount":3})", "scroll_direction",
             "required"},
            {R"({"action":"scroll","coordinate":[1,2],"scroll_direction":"down"})", "scroll_amount",
             "required"},
            {R"({"action":"scroll","scroll_direction":"down","scroll_amount":0})", "scroll_amount",
             "must be between 1 and 1000, got 0"},
            {R"({"action":"scroll","scroll_direction":"down","scroll_amount":-3})", "scroll_amount",
             "must be between 1 and 1000"},
            {R"({"action":"scroll","scroll_direction":"down","scroll_amount":1001})",
             "scroll_amount", "must be between 1 and 1000"},
            {R"({"action":"scroll","scroll_direction":"down","scroll_amount":"3"})",
             "scroll_amount", "expected an integer, got string"},
            {R"({"action":"scroll","scroll_direction":"down","scroll_amount":3,"text":"hyper"})",
             "text", "unknown key 'hyper'"},
            // type / key
            {R"({"action":"type"})", "text", "required for action 'type'"},
            {R"({"action":"type","text":42})", "text", "expected a string, got number"},
            {R"({"action":"type","text":"a\r\n"})", "text", "control character U+000D at byte 1"},
            {R"({"action":"type","text":"a","coordinate":[1,2]})", "coordinate",
             "not a field of action 'type'"},
            {R"({"action":"key"})", "text", "required for action 'key'"},
            {R"({"action":"key","text":""})", "text", "no key given"},
            {R"({"action":"key","text":"ctrl+"})", "text", "ends with '+'"},
            {R"({"action":"key","text":"ctrl+foo"})", "text", "unknown key 'foo'"},
            {R"({"action":"key","text":"Return","coordinate":[1,2]})", "coordinate",
             "not a field of action 'key'"},
            // hold_key / wait
            {R"({"action":"hold_key","text":"shift"})", "duration",
             "required for action 'hold_key'"},
            {R"({"action":"hold_key","duration":1})", "text", "required for action 'hold_key'"},
            {R"({"action":"hold_key","text":"shift","duration":100})", "duration",
             "must be between 0 and 60 seconds, got 100"},
            {R"({"action":"hold_key","text":"shift","duration":-1})", "duration",
             "must be between 0 and 60"},
            {R"({"action":"hold_key","text":"shift","duration":"1"})", "duration",
             "expected a number of seconds, got string"},
            {R"({"action":"hold_key","text":"a b","duration":1})", "text", "cannot contain spaces"},
            {R"({"action":"wait"})", "duration", "required for action 'wait'"},
            {R"({"action":"wait","duration":60.5})", "duration",
             "must be between 0 and 60 seconds, got 60.5"},
            {R"({"action":"wait","duration":true})", "duration",
             "expected a number of seconds, got boolean"},
        });
}

// ------------------------------------------------------------------------------------------
// OpenAI computer use: the `action` of a computer_call output item
// ------------------------------------------------------------------------------------------

TEST(OpenAiDialect, ParsesComputerCallActions) {
    expect_parses(
        Dialect::openai,
        {
            {R"({"type":"click","button":"left","x":156,"y":523})",
             Click{Point{156, 523}, Button::left, 1, {}}},
            {R"({"type":"click","button":"right","x":1,"y":2})",
             Click{Point{1, 2}, Button::right, 1, {}}},
            {R"({"type":"click","button":"wheel","x":1,"y":2})",
             Click{Point{1, 2}, Button::middle, 1, {}}},
            {R"({"type":"click","button":"back","x":1,"y":2})",
             Click{Point{1, 2}, Button::back, 1, {}}},
            {R"({"type":"click","button":"forward","x":1,"y":2})",
             Click{Point{1, 2}, Button::forward, 1, {}}},
            {R"({"type":"click","button":"left","x":1,"y":2,"keys":["SHIFT"]})",
             Click{Point{1, 2}, Button::left, 1, {kShift}}},
            {R"({"type":"click","button":"left","x":1,"y":2,"keys":["CTRL","ALT"]})",
             Click{Point{1, 2}, Button::left, 1, {kCtrl, kAlt}}},
            // Python SDK model_dump() writes unset optionals as null.
            {R"({"button":"left","type":"click","x":1,"y":2,"keys":null})",
             Click{Point{1, 2}, Button::left, 1, {}}},
            {R"({"type":"double_click","x":10,"y":20})", Click{Point{10, 20}, Button::left, 2, {}}},
            {R"({"type":"double_click","x":10,"y":20,"keys":["CMD"]})",
             Click{Point{10, 20}, Button::left, 2, {kSuper}}},
            // scroll: pixels -> wheel notches at 100 px per notch, at least one
            {R"({"type":"scroll","x":640,"y":400,"scroll_x":0,"scroll_y":500})",
             Scroll{Point{640, 400}, 0, 5, {}}},
            {R"({"type":"scroll","x":640,"y":400,"scroll_x":0,"scroll_y":-300})",
             Scroll{Point{640, 400}, 0, -3, {}}},
            {R"({"type":"scroll","x":1,"y":1,"scroll_x":0,"scroll_y":40})",
             Scroll{Point{1, 1}, 0, 1, {}}},
            {R"({"type":"scroll","x":1,"y":1,"scroll_x":0,"scroll_y":-1})",
             Scroll{Point{1, 1}, 0, -1, {}}},
            {R"({"type":"scroll","x":1,"y":1,"scroll_x":0,"scroll_y":149})",
             Scroll{Point{1, 1}, 0, 1, {}}},
            {R"({"type":"scroll","x":1,"y":1,"scroll_x":0,"scroll_y":150})",
             Scroll{Point{1, 1}, 0, 2, {}}},
            {R"({"type":"scroll","x":1,"y":1,"scroll_x":-250,"scroll_y":0})",
             Scroll{Point{1, 1}, -3, 0, {}}},
            {R"({"type":"scroll","x":1,"y":1,"scroll_x":249,"scroll_y":-50})",
             Scroll{Point{1, 1}, 2, -1, {}}},
            {R"({"type":"scroll","x":1,"y":1,"scroll_x":0,"scroll_y":100049})",
             Scroll{Point{1, 1}, 0, 1000, {}}},
            {R"({"type":"scroll","x":1,"y":1,"scroll_x":0,"scroll_y":300,"keys":["SHIFT"]})",
             Scroll{Point{1, 1}, 0, 3, {kShift}}},
            // keypress: one chord; capital letters are letter keys, not shift+letter
            {R"({"type":"keypress","keys":["CTRL","C"]})", Key{{KeyChord{{kCtrl, XKB_KEY_c}}}}},
            {R"({"type":"keypress","keys":["ENTER"]})", Key{{KeyChord{{XKB_KEY_Return}}}}},
            {R"({"type":"keypress","keys":["CTRL","SHIFT","T"]})",
             Key{{KeyChord{{kCtrl, kShift, XKB_KEY_t}}}}},
            {R"({"type":"keypress","keys":["ALT","F4"]})", Key{{KeyChord{{kAlt, XKB_KEY_F4}}}}},
            {R"({"type":"keypress","keys":["CMD","SPACE"]})",
             Key{{KeyChord{{kSuper, XKB_KEY_space}}}}},
            {R"({"type":"keypress","keys":["META"]})", Key{{KeyChord{{kSuper}}}}},
            {R"({"type":"keypress","keys":["SUPER"]})", Key{{KeyChord{{kSuper}}}}},
            {R"({"type":"keypress","keys":["ARROWLEFT"]})", Key{{KeyChord{{XKB_KEY_Left}}}}},
            {R"({"type":"keypress","keys":["ESC"]})", Key{{KeyChord{{XKB_KEY_Escape}}}}},
            {R"({"type":"keypress","keys":["PAGEDOWN"]})", Key{{KeyChord{{XKB_KEY_Next}}}}},
            {R"({"type":"keypress","keys":["BACKSPACE"]})", Key{{KeyChord{{XKB_KEY_BackSpace}}}}},
            {R"({"type":"keypress","keys":["TAB"]})", Key{{KeyChord{{XKB_KEY_Tab}}}}},
            {R"({"type":"keypress","keys":["DELETE"]})", Key{{KeyChord{{XKB_KEY_Delete}}}}},
            {R"({"type":"keypress","keys":["/"]})", Key{{KeyChord{{XKB_KEY_slash}}}}},
            {R"({"type":"keypress","keys":["CTRL","+"]})", Key{{KeyChord{{kCtrl, XKB_KEY_plus}}}}},
            {R"({"type":"keypress","keys":["ctrl","l"]})", Key{{KeyChord{{kCtrl, XKB_KEY_l}}}}},
            {R"({"type":"type","text":"hello world"})", Type{"hello world"}},
            {R"({"type":"type","text":"first\nsecond"})", Type{"first\nsecond"}},
            {R"({"type":"wait"})", Wait{1000}},
            {R"({"type":"screenshot"})", Screenshot{}},
            {R"({"type":"move","x":3,"y":4})", Move{{3, 4}}},
            {R"({"type":"move","x":3,"y":4,"keys":[]})", Move{{3, 4}}},
            {R"({"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4}]})",
             Drag{{{1, 2}, {3, 4}}, Button::left, {}}},
            {R"({"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4},{"x":5,"y":6}],"keys":["SHIFT"]})",
             Drag{{{1, 2}, {3, 4}, {5, 6}}, Button::left, {kShift}}},
        });
}

TEST(OpenAiDialect, RejectsInvalidActions) {
    expect_rejects(
        Dialect::openai,
        {
            {R"({"type":"computer_call","call_id":"call_1","action":{"type":"screenshot"}})",
             "type",
             "send the computer_call item whole (with \"type\": \"computer_call\") or its action"},
            {R"({"type":"left_click","x":1,"y":2})", "type",
             "unknown action 'left_click' (expected one of click"},
            {R"({"type":"click","x":1,"y":2})", "button", "required for action 'click'"},
            {R"({"type":"click","button":"middle","x":1,"y":2})", "button",
             "unknown button 'middle' (expected left, right, wheel, back or forward)"},
            {R"({"type":"click","button":"left","y":2})", "x", "required for action 'click'"},
            {R"({"type":"click","button":"left","x":1})", "y", "required"},
            {R"({"type":"click","button":"left","x":1.5,"y":2})", "x",
             "expected an integer, got 1.5"},
            {R"({"type":"click","button":"left","x":1,"y":2,"pending_safety_checks":[]})",
             "pending_safety_checks",
             "not a field of action 'click' (allowed: button, x, y, keys)"},
            {R"({"type":"click","button":"left","x":1,"y":2,"keys":"SHIFT"})", "keys",
             "expected an array, got string"},
            {R"({"type":"click","button":"left","x":1,"y":2,"keys":["CTRL+C"]})", "keys[0]",
             "unknown key 'CTRL+C' (one key per element"},
            {R"({"type":"double_click","x":1,"y":2,"button":"left"})", "button",
             "not a field of action 'double_click'"},
            {R"({"type":"scroll","x":1,"y":2,"scroll_x":0})", "scroll_y",
             "required for action 'scroll'"},
            {R"({"type":"scroll","scroll_x":0,"scroll_y":100})", "x", "required"},
            {R"({"type":"scroll","x":1,"y":2,"scroll_x":0,"scroll_y":0})", "scroll_y",
             "scroll_x and scroll_y are both 0: nothing to scroll"},
            {R"({"type":"scroll","x":1,"y":2,"scroll_x":0,"scroll_y":100050})", "scroll_y",
             "100050 px is 1001 wheel notches at 100 px per notch; at most 1000 allowed"},
            {R"({"type":"scroll","x":1,"y":2,"scroll_x":-200000,"scroll_y":0})", "scroll_x",
             "at most 1000"},
            {R"({"type":"scroll","x":1,"y":2,"scroll_x":0,"scroll_y":12.5})", "scroll_y",
             "expected an integer, got 12.5"},
            {R"({"type":"keypress"})", "keys", "required for action 'keypress'"},
            {R"({"type":"keypress","keys":[]})", "keys", "must name at least one key"},
            {R"({"type":"keypress","keys":"CTRL+C"})", "keys", "expected an array, got string"},
            {R"({"type":"keypress","keys":["CTRL","NOPE"]})", "keys[1]", "unknown key 'NOPE'"},
            {R"({"type":"keypress","keys":["CTRL","CONTROL"]})", "keys[1]", "already in the list"},
            {R"({"type":"keypress","keys":["CTRL",3]})", "keys[1]",
             "expected a string, got number"},
            {R"({"type":"type"})", "text", "required for action 'type'"},
            {R"({"type":"type","text":42})", "text", "expected a string, got number"},
            {R"({"type":"type","text":"tab\tok but not \u0008"})", "text",
             "control character U+0008"},
            {R"({"type":"wait","ms":500})", "ms", "not a field of action 'wait' (it takes none)"},
            {R"({"type":"screenshot","x":1})", "x", "it takes none"},
            {R"({"type":"move","x":1})", "y", "required for action 'move'"},
            {R"({"type":"drag"})", "path", "required for action 'drag'"},
            {R"({"type":"drag","path":[{"x":1,"y":2}]})", "path", "needs at least 2 points, got 1"},
            {R"({"type":"drag","path":[{"x":1,"y":2},{"x":3}]})", "path[1].y", "required"},
            {R"({"type":"drag","path":[{"x":1,"y":2},{"y":3}]})", "path[1].x", "required"},
            {R"({"type":"drag","path":[{"x":1,"y":2},[3,4]]})", "path[1]",
             "expected an object {x, y}, got array"},
            {R"({"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4,"z":5}]})", "path[1].z",
             "not a field of a path point (allowed: x, y)"},
            {R"({"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":"4"}]})", "path[1].y",
             "expected an integer, got string"},
            {R"({"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4}],"button":"left"})", "button",
             "not a field of action 'drag'"},
        });
}

// ------------------------------------------------------------------------------------------
// Request bodies, dialect names, type names
// ------------------------------------------------------------------------------------------

TEST(ParseActions, AcceptsOneActionOrABatch) {
    EXPECT_EQ(parse_actions(json::parse(R"({"type":"screenshot"})"), Dialect::native),
              std::vector<Action>{Screenshot{}});
    EXPECT_EQ(parse_actions(json::parse(R"({"actions":[{"action":"mouse_move","coordinate":[1,2]},
                                                       {"action":"left_click"},
                                                       {"action":"type","text":"hi\n"}]})"),
                            Dialect::anthropic),
              (std::vector<Action>{Move{{1, 2}}, Click{std::nullopt, Button::left, 1, {}},
                                   Type{"hi\n"}}));
    EXPECT_EQ(parse_actions(json::parse(R"({"actions":[]})"), Dialect::openai),
              std::vector<Action>{});

    json full = {{"actions", json::array()}};
    for (std::size_t i = 0; i < kMaxBatchActions; ++i)
        full["actions"].push_back({{"type", "wait"}});
    EXPECT_EQ(parse_actions(full, Dialect::openai).size(), kMaxBatchActions);
}

TEST(ParseActions, RejectsBadBodies) {
    const std::vector<InvalidCase> cases = {
        {R"([{"type":"screenshot"}])", "body",
         "expected an action object or {\"actions\": [...]}, got array"},
        {R"("screenshot")", "body", "got string"},
        {R"(null)", "body", "got null"},
        {R"({"actions":{}})", "actions", "expected an array, got object"},
        {R"({"actions":null})", "actions", "expected an array, got null"},
        {R"({"actions":[],"dialect":"native"})", "dialect", "not allowed next to 'actions'"},
        {R"({"actions":[5]})", "actions[0]", "expected an action object, got number"},
        {R"({"actions":[{"type":"screenshot"},{"type":"click","x":"a","y":1}]})", "actions[1].x",
         "expected an integer, got string"},
        {R"({"actions":[{"type":"wait","duration_ms":1},{"type":"wait","duration_ms":2},{"type":"bogus"}]})",
         "actions[2].type", "unknown action 'bogus'"},
        {R"({"actions":[{"type":"drag","path":[[1,2],[3,"x"]]}]})", "actions[0].path[1][1]",
         "expected an integer"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.json_text);
        const json body = json::parse(c.json_text);
        expect_error([&] { parse_actions(body, Dialect::native); }, c.field, c.reason_part);
    }
    expect_error(
        [] {
            parse_actions(
                json::parse(R"({"actions":[{"action":"left_click","coordinate":[1,-2]}]})"),
                Dialect::anthropic);
        },
        "actions[0].coordinate[1]", "must be between 0 and 32767");

    json too_many = {{"actions", json::array()}};
    for (std::size_t i = 0; i <= kMaxBatchActions; ++i)
        too_many["actions"].push_back({{"type", "wait"}});
    expect_error([&] { parse_actions(too_many, Dialect::openai); }, "actions",
                 "has 1001 actions; at most 1000 allowed");

    expect_error([] { parse_action(json::array(), Dialect::native); }, "body",
                 "expected an action object, got array");
    expect_error([] { parse_action(json(3), Dialect::native, "actions[7]"); }, "actions[7]",
                 "got number");
}

TEST(ParseDialect, AcceptsTheThreeNamesInAnyCase) {
    EXPECT_EQ(parse_dialect("native"), Dialect::native);
    EXPECT_EQ(parse_dialect("anthropic"), Dialect::anthropic);
    EXPECT_EQ(parse_dialect("Anthropic"), Dialect::anthropic);
    EXPECT_EQ(parse_dialect("openai"), Dialect::openai);
    EXPECT_EQ(parse_dialect("OPENAI"), Dialect::openai);
    expect_error([] { parse_dialect("claude"); }, "dialect",
                 "unknown dialect 'claude' (expected native, anthropic or openai)");
    expect_error([] { parse_dialect(""); }, "dialect", "unknown dialect ''");
}

TEST(ActionTypeName, NamesEveryAlternative) {
    const std::vector<std::pair<Action, std::string>> cases = {
        {Click{}, "click"},
        {Move{}, "move"},
        {MouseDown{}, "mouse_down"},
        {MouseUp{}, "mouse_up"},
        {Drag{}, "drag"},
        {Scroll{}, "scroll"},
        {Type{}, "type"},
        {Key{}, "key"},
        {HoldKey{}, "hold_key"},
        {KeyDown{}, "key_down"},
        {KeyUp{}, "key_up"},
        {Wait{}, "wait"},
        {CursorPosition{}, "cursor_position"},
        {Screenshot{}, "screenshot"},
        {Zoom{}, "zoom"},
    };
    ASSERT_EQ(cases.size(), std::variant_size_v<Action>);
    for (const auto& [action, name] : cases) EXPECT_EQ(action_type_name(action), name);
}

// ------------------------------------------------------------------------------------------
// Screen bounds
// ------------------------------------------------------------------------------------------

TEST(ValidateOnScreen, AcceptsEveryPointOnTheScreen) {
    const Size screen{1920, 1080};
    const std::vector<Action> on_screen = {
        Click{Point{0, 0}, Button::left, 1, {}},
        Click{Point{1919, 1079}, Button::left, 1, {}},
        Click{std::nullopt, Button::left, 1, {}},
        Move{{1919, 0}},
        MouseDown{Button::left, Point{0, 1079}},
        MouseUp{Button::left, std::nullopt},
        Drag{{{0, 0}, {1919, 1079}, {960, 540}}, Button::left, {}},
        Scroll{Point{1, 1}, 0, 1, {}},
        Type{"no coordinates"},
        Screenshot{},
    };
    for (const Action& action : on_screen) {
        SCOPED_TRACE(to_native_json(action).dump());
        EXPECT_NO_THROW(validate_on_screen(action, screen));
    }
}

TEST(ValidateOnScreen, NamesTheFieldInTheAgentsDialect) {
    const Size screen{1920, 1080};
    struct Case {
        Action action;
        Dialect dialect;
        std::string prefix;
        std::string field;
        std::string reason_part;
    };
    const std::vector<Case> cases = {
        {Click{Point{1920, 5}, Button::left, 1, {}}, Dialect::native, "", "x",
         "x=1920 is outside the 1920x1080 screen (x must be 0..1919)"},
        {Click{Point{5, 1080}, Button::left, 1, {}}, Dialect::native, "actions[3]", "actions[3].y",
         "y=1080 is outside the 1920x1080 screen (y must be 0..1079)"},
        {Move{{2000, 2000}}, Dialect::openai, "", "x", "x=2000"},
        {Scroll{Point{10, 5000}, 0, 1, {}}, Dialect::openai, "actions[0]", "actions[0].y",
         "y=5000"},
        {Click{Point{1920, 5}, Button::left, 1, {}}, Dialect::anthropic, "", "coordinate[0]",
         "x=1920"},
        {MouseUp{Button::left, Point{1, 1080}}, Dialect::anthropic, "", "coordinate[1]", "y=1080"},
        {Drag{{{5000, 1}, {2, 2}}, Button::left, {}}, Dialect::anthropic, "", "start_coordinate[0]",
         "x=5000"},
        {Drag{{{1, 1}, {2, 1500}}, Button::left, {}}, Dialect::anthropic, "actions[1]",
         "actions[1].coordinate[1]", "y=1500"},
        {Drag{{{1, 1}, {2, 2}, {3, 1080}}, Button::left, {}}, Dialect::native, "", "path[2][1]",
         "y=1080"},
        {Drag{{{1, 1}, {2, 2}, {1920, 3}}, Button::left, {}}, Dialect::openai, "", "path[2].x",
         "x=1920"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(to_native_json(c.action).dump());
        expect_error([&] { validate_on_screen(c.action, screen, c.prefix, c.dialect); }, c.field,
                     c.reason_part);
    }
}

// Parsing then bounds-checking an Anthropic batch names the field the agent wrote.
TEST(ValidateOnScreen, WorksOnParsedBatches) {
    const auto actions =
        parse_actions(json::parse(R"({"actions":[{"action":"left_click","coordinate":[10,10]},
                                    {"action":"left_click_drag","start_coordinate":[0,0],"coordinate":[1024,10]}]})"),
                      Dialect::anthropic);
    ASSERT_EQ(actions.size(), 2u);
    const Size screen{1024, 768};
    EXPECT_NO_THROW(validate_on_screen(actions[0], screen, "actions[0]", Dialect::anthropic));
    expect_error([&] { validate_on_screen(actions[1], screen, "actions[1]", Dialect::anthropic); },
                 "actions[1].coordinate[0]", "x=1024 is outside the 1024x768 screen");
}

// ---- whole model output items, zoom, keys held on a move ----

TEST(ActionRequest, TakesAnthropicToolUseBlocksWhole) {
    auto request =
        parse_action_request(json::parse(R"({"type":"tool_use","id":"toolu_01A","name":"computer",
                       "input":{"action":"left_click","coordinate":[10,20],"text":"shift"}})"),
                             Dialect::anthropic);
    EXPECT_EQ(request.call_id, "toolu_01A");
    ASSERT_EQ(request.actions.size(), 1u);
    EXPECT_EQ(request.fields, std::vector<std::string>{"input"});
    const auto& click = std::get<Click>(request.actions[0]);
    EXPECT_EQ(click.at, (Point{10, 20}));
    EXPECT_EQ(click.hold_keys.size(), 1u);
    expect_error(
        [] {
            parse_action_request(
                json::parse(
                    R"({"type":"tool_use","id":"t","input":{"action":"left_click","coordinate":[1]}})"),
                Dialect::anthropic);
        },
        "input.coordinate", "");
    expect_error(
        [] {
            parse_action_request(
                json::parse(R"({"type":"tool_use","id":"t","extra":1,"input":{}})"),
                Dialect::anthropic);
        },
        "extra", "not a field of a tool_use block");
    expect_error(
        [] {
            parse_action_request(json::parse(R"({"type":"tool_use","id":"t"})"),
                                 Dialect::anthropic);
        },
        "input", "required in a tool_use block");
}

TEST(ActionRequest, TakesOpenAiComputerCallItemsWithOneActionOrABatch) {
    auto one = parse_action_request(
        json::parse(R"({"type":"computer_call","id":"cu_1","call_id":"call_9","status":"completed",
                       "pending_safety_checks":[],"action":{"type":"move","x":5,"y":6,"keys":["SHIFT"]}})"),
        Dialect::openai);
    EXPECT_EQ(one.call_id, "call_9");
    ASSERT_EQ(one.actions.size(), 1u);
    const auto& move = std::get<Move>(one.actions[0]);
    EXPECT_EQ(move.to, (Point{5, 6}));
    EXPECT_EQ(move.hold_keys.size(), 1u) << "keys on a pointer action are held";
    auto batch =
        parse_action_request(json::parse(R"({"type":"computer_call","call_id":"call_2","actions":[
                       {"type":"click","button":"left","x":1,"y":2,"keys":["CTRL"]},
                       {"type":"type","text":"hi"},{"type":"screenshot"}]})"),
                             Dialect::openai);
    EXPECT_EQ(batch.call_id, "call_2");
    ASSERT_EQ(batch.actions.size(), 3u);
    EXPECT_EQ(batch.fields[2], "actions[2]");
    EXPECT_EQ(std::get<Click>(batch.actions[0]).hold_keys.size(), 1u);
    expect_error(
        [] {
            parse_action_request(
                json::parse(
                    R"({"type":"computer_call","call_id":"c","actions":[{"type":"type","text":"a"},{"type":"click","x":1}]})"),
                Dialect::openai);
        },
        "actions[1].button", "required");
    expect_error(
        [] {
            parse_action_request(
                json::parse(
                    R"({"type":"computer_call","call_id":"c","action":{"type":"wait"},"actions":[]})"),
                Dialect::openai);
        },
        "actions", "not both");
    expect_error(
        [] {
            parse_action_request(json::parse(R"({"type":"computer_call","call_id":"c"})"),
                                 Dialect::openai);
        },
        "action", "required in a computer_call item");
    // A bare action and a plain batch are what they were.
    auto bare = parse_action_request(json::parse(R"({"type":"wait"})"), Dialect::openai);
    EXPECT_TRUE(bare.call_id.empty());
    EXPECT_EQ(bare.fields, std::vector<std::string>{""});
}

TEST(Zoom, ParsesInEveryDialectThatHasItAndRoundTrips) {
    const Zoom expected{{100, 50}, {499, 349}};
    EXPECT_EQ(
        std::get<Zoom>(parse_action(json::parse(R"({"action":"zoom","region":[100,50,499,349]})"),
                                    Dialect::anthropic)),
        expected);
    Action native =
        parse_action(json::parse(R"({"type":"zoom","region":[100,50,499,349]})"), Dialect::native);
    EXPECT_EQ(std::get<Zoom>(native), expected);
    EXPECT_EQ(parse_action(to_native_json(native), Dialect::native), native);
    Action held = Move{{3, 4}, {0xffe1}};
    EXPECT_EQ(parse_action(to_native_json(held), Dialect::native), held);
    // Off-screen corners name the region element.
    expect_error(
        [&] {
            validate_on_screen(native, {400, 400}, "", Dialect::anthropic);
        },
        "region[2]", "x=499 is outside the 400x400 screen");
}

}  // namespace
}  // namespace deskbox::input

namespace deskbox::input {
namespace {

TEST(NativeDialect, TargetsReplaceCoordinatesAndAreAimedLater) {
    Action click = parse_action(nlohmann::json::parse(R"({"type":"click","target":{"text":"OK"}})"),
                                Dialect::native);
    const Target* target = target_of(click);
    ASSERT_NE(target, nullptr);
    EXPECT_EQ(nlohmann::json::parse(target->json), nlohmann::json({{"text", "OK"}}));
    EXPECT_FALSE(std::get<Click>(click).at);
    aim(click, Point{30, 40});
    EXPECT_EQ(target_of(click), nullptr);
    EXPECT_EQ(std::get<Click>(click).at, (Point{30, 40}));
    // A move needs x/y or a target.
    Action move = parse_action(nlohmann::json::parse(R"({"type":"move","target":{"text":"a"}})"),
                               Dialect::native);
    aim(move, Point{1, 2});
    EXPECT_EQ(std::get<Move>(move).to, (Point{1, 2}));
    EXPECT_EQ(to_native_json(move), nlohmann::json::parse(R"({"type":"move","x":1,"y":2})"));
    auto field_of = [](const char* text) {
        try {
            parse_action(nlohmann::json::parse(text), Dialect::native);
        } catch (const ActionError& e) {
            return e.field();
        }
        return std::string("(accepted)");
    };
    EXPECT_EQ(field_of(R"({"type":"click","x":3,"target":{"text":"a"}})"), "x");
    EXPECT_EQ(field_of(R"({"type":"scroll","dy":1,"y":3,"target":{"text":"a"}})"), "y");
    EXPECT_EQ(field_of(R"({"type":"click","target":"OK"})"), "target");
    EXPECT_EQ(field_of(R"({"type":"drag","path":[[0,0],[1,1]],"target":{"text":"a"}})"), "target");
    EXPECT_EQ(field_of(R"({"type":"move"})"), "x");
    // Actions without a target have none, and aim() leaves them alone.
    Action key =
        parse_action(nlohmann::json::parse(R"({"type":"key","keys":"a"})"), Dialect::native);
    EXPECT_EQ(target_of(key), nullptr);
}

}  // namespace
}  // namespace deskbox::input
