// Claude's computer toolset (computer_toolset_20260801): one tool_use block per action, whose
// name is the member, alone or as one turn's list; the older drag from the pointer; a zoom to the
// screen's far edge; and the tool_results that answer the blocks. Payloads are shaped like the
// Anthropic SDKs' Computer*ToolUseBlock / Computer*Input types.
#include <gtest/gtest.h>
#include <xkbcommon/xkbcommon-keysyms.h>

#include <functional>
#include <string>
#include <vector>

#include "input/dialects/replies.hpp"
#include "input/parse.hpp"
#include "tests/input/expect_action_error.hpp"

namespace deskbox::input {
namespace {

using nlohmann::json;

ActionRequest parse(const std::string& text) {
    return parse_action_request(json::parse(text), Dialect::anthropic);
}

void expect_refused(const std::string& text, const std::string& field,
                    const std::string& reason_part) {
    SCOPED_TRACE(text);
    expect_error([&] { parse(text); }, field, reason_part);
}

// A recorded turn's shape: several members, as the Messages API returns them.
const char* const kTurn = R"([
  {"type":"tool_use","id":"toolu_01","name":"left_click","toolset_name":"computer",
   "caller":{"type":"direct"},"input":{"coordinate":[640,360],"text":"shift"}},
  {"type":"tool_use","id":"toolu_02","name":"type","toolset_name":"computer",
   "input":{"text":"hello\n"}},
  {"type":"tool_use","id":"toolu_03","name":"key","toolset_name":"computer",
   "input":{"text":"ctrl+a BackSpace","repeat":3}},
  {"type":"tool_use","id":"toolu_04","name":"zoom","toolset_name":"computer",
   "input":{"region":[960,600,1280,800]}},
  {"type":"tool_use","id":"toolu_05","name":"screenshot","toolset_name":"computer","input":{}}
])";

TEST(Toolset, ATurnsBlocksBecomeOneActionEachInOrder) {
    const ActionRequest request = parse(kTurn);
    ASSERT_EQ(request.actions.size(), 5u);
    EXPECT_EQ(request.fields, (std::vector<std::string>{"[0].input", "[1].input", "[2].input",
                                                        "[3].input", "[4].input"}));
    ASSERT_EQ(request.tool_uses.size(), 5u);
    EXPECT_EQ(request.tool_uses[0], (ToolUse{"toolu_01", "left_click", true}));
    EXPECT_EQ(request.tool_uses[4], (ToolUse{"toolu_05", "screenshot", true}));
    const auto& click = std::get<Click>(request.actions[0]);
    EXPECT_EQ(click.at, (Point{640, 360}));
    EXPECT_EQ(click.hold_keys, std::vector<Keysym>{XKB_KEY_Shift_L});
    EXPECT_EQ(std::get<Type>(request.actions[1]).text, "hello\n");
    const auto& key = std::get<Key>(request.actions[2]);
    ASSERT_EQ(key.chords.size(), 6u) << "two chords pressed three times";
    EXPECT_EQ(key.chords[4], key.chords[0]);
    EXPECT_EQ(key.chords[5].keys, std::vector<Keysym>{XKB_KEY_BackSpace});
    EXPECT_EQ(std::get<Zoom>(request.actions[3]), (Zoom{{960, 600}, {1280, 800}}))
        << "the far edge is closed against the screen later (close_zoom_at_edge)";
    EXPECT_TRUE(std::holds_alternative<Screenshot>(request.actions[4]));
}

TEST(Toolset, EveryMemberParsesFromItsBlock) {
    const std::vector<std::pair<std::string, std::string>> members = {
        {"screenshot", "{}"},
        {"cursor_position", "{}"},
        {"left_click", R"({"coordinate":[1,2]})"},
        {"right_click", "{}"},
        {"middle_click", R"({"coordinate":[1,2]})"},
        {"double_click", R"({"coordinate":[1,2],"text":"ctrl"})"},
        {"triple_click", R"({"coordinate":[1,2]})"},
        {"left_click_drag", R"({"start_coordinate":[1,2],"coordinate":[30,40]})"},
        {"left_mouse_down", "{}"},
        {"left_mouse_up", "{}"},
        {"mouse_move", R"({"coordinate":[5,6]})"},
        {"scroll", R"({"coordinate":[5,6],"scroll_direction":"down","scroll_amount":3})"},
        {"type", R"({"text":"x"})"},
        {"key", R"({"text":"Return"})"},
        {"hold_key", R"({"text":"shift","duration":1})"},
        {"wait", R"({"duration":0.5})"},
        {"zoom", R"({"region":[0,0,10,10]})"},
    };
    for (const auto& [name, input] : members) {
        SCOPED_TRACE(name);
        const ActionRequest one = parse(R"({"type":"tool_use","id":"toolu_9","name":")" + name +
                                        R"(","toolset_name":"computer","input":)" + input + "}");
        ASSERT_EQ(one.actions.size(), 1u);
        EXPECT_EQ(one.call_id, "toolu_9");
        EXPECT_EQ(one.fields, std::vector<std::string>{"input"});
        EXPECT_EQ(one.tool_uses, (std::vector<ToolUse>{{"toolu_9", name, true}}));
    }
    const auto down = parse(R"({"type":"tool_use","id":"t","name":"left_mouse_down",
                                "toolset_name":"computer","input":{}})");
    EXPECT_EQ(std::get<MouseDown>(down.actions[0]).at, std::nullopt) << "where the pointer is";
}

TEST(Toolset, BadBlocksAreRefusedNamingTheBlockAndField) {
    const std::string head = R"({"type":"tool_use","id":"t","toolset_name":"computer",)";
    expect_refused(head + R"("name":"fly","input":{}})", "name",
                   "unknown computer toolset member 'fly' (expected one of screenshot,");
    expect_refused(head + R"("input":{}})", "name", "required: the member");
    expect_refused(head + R"("name":"left_click"})", "input", "required in a tool_use block");
    expect_refused(head + R"("name":"left_click","input":[1,2]})", "input",
                   "expected the member's input object, got array");
    expect_refused(head + R"("name":"left_click","input":{"action":"left_click"}})", "input.action",
                   "not a field of action 'left_click'");
    expect_refused(head + R"("name":"left_click","input":{"coordinate":[1,2],"key":"shift"}})",
                   "input.key", "not a field of action 'left_click' (allowed: coordinate, text)");
    expect_refused(head + R"("name":"left_click","input":{"coordinate":"1,2"}})",
                   "input.coordinate", "");
    expect_refused(head + R"("name":"left_click_drag","input":{"coordinate":[1,2]}})",
                   "input.start_coordinate", "required for action 'left_click_drag'");
    expect_refused(head + R"("name":"left_mouse_down","input":{"coordinate":[1,2]}})",
                   "input.coordinate", "it takes none");
    expect_refused(head + R"("name":"key","input":{"text":"a","repeat":0}})", "input.repeat", "");
    expect_refused(head + R"("name":"key","input":{"text":"a","repeat":"2"}})", "input.repeat", "");
    expect_refused(head + R"("name":"key","input":{"text":"a b","repeat":9000}})", "input.repeat",
                   "more than 10000 presses");
    expect_refused(head + R"("name":"type","input":{}})", "input.text", "required");
    expect_refused(head + R"("name":"screenshot","input":{},"extra":1})", "extra",
                   "not a field of a computer toolset tool_use block");
    expect_refused(R"({"type":"tool_use","name":"screenshot","toolset_name":"computer",
                       "input":{}})",
                   "id", "required: the block's tool_result answers it by id");
    expect_refused(R"({"type":"tool_use","id":"t","name":"navigate","toolset_name":"browser",
                       "input":{}})",
                   "toolset_name", "unknown toolset 'browser'");
    expect_refused(R"({"type":"tool_use","id":"t","name":"x","toolset_name":7,"input":{}})",
                   "toolset_name", "");
}

TEST(Toolset, ListsAreOneTurnOfOneToolAndEveryBlockIsNamedByItsIndex) {
    const std::string click =
        R"({"type":"tool_use","id":"a","name":"left_click","toolset_name":"computer","input":{}})";
    expect_refused("[]", "body", "an empty list of tool_use blocks");
    expect_refused("[" + click + R"(,{"type":"text","text":"hi"}])", "[1].type",
                   "expected a tool_use block, got type '\"text\"'");
    expect_refused("[" + click + ",7]", "[1]", "expected a tool_use block, got number");
    expect_refused("[" + click + "," + click + "]", "[1].id", "the id of an earlier block");
    expect_refused("[" + click +
                       R"(,{"type":"tool_use","id":"b","name":"computer",
                            "input":{"action":"screenshot"}}])",
                   "[1].input.action", "a list mixes computer toolset blocks");
    expect_refused("[" + click +
                       R"(,{"type":"tool_use","id":"b","name":"mouse_move",
                            "toolset_name":"computer","input":{"coordinate":[1]}}])",
                   "[1].input.coordinate", "");
    expect_refused(R"([{"type":"tool_use","name":"computer","input":{"action":"screenshot"}}])",
                   "[0].id", "required");
    // A list of tool-version blocks (parallel tool use) is answered block by block too.
    const ActionRequest legacy = parse(
        R"([{"type":"tool_use","id":"a","name":"computer","toolset_name":null,"caller":{"type":"direct"},
             "input":{"action":"mouse_move","coordinate":[3,4]}},
            {"type":"tool_use","id":"b","name":"computer","input":{"action":"cursor_position"}}])");
    EXPECT_EQ(legacy.tool_uses,
              (std::vector<ToolUse>{{"a", "mouse_move", false}, {"b", "cursor_position", false}}));
}

TEST(Toolset, EarlierFormsStayAsTheyWere) {
    const ActionRequest block = parse(R"({"type":"tool_use","id":"toolu_1","name":"computer",
        "caller":{"type":"direct"},"input":{"action":"left_click","coordinate":[1,2],"key":"shift"}})");
    EXPECT_EQ(block.call_id, "toolu_1");
    EXPECT_TRUE(block.tool_uses.empty()) << "answered as before, with one tool_result";
    EXPECT_TRUE(parse(R"({"action":"key","text":"a"})").tool_uses.empty());
    expect_refused(R"({"action":"key","text":"a","repeat":2})", "repeat",
                   "not a field of action 'key'");
}

TEST(DragFromPointer, TheOlderLeftClickDragStartsWhereThePointerIs) {
    const Action drag = parse_action(
        json::parse(R"({"action":"left_click_drag","coordinate":[300,400],"text":"shift"})"),
        Dialect::anthropic);
    const auto& d = std::get<Drag>(drag);
    EXPECT_TRUE(d.from_pointer);
    EXPECT_EQ(d.path, std::vector<Point>{(Point{300, 400})});
    EXPECT_EQ(d.hold_keys, std::vector<Keysym>{XKB_KEY_Shift_L});
    // Native JSON carries it to the agent and back.
    const json native = to_native_json(drag);
    EXPECT_EQ(native["from_pointer"], true);
    EXPECT_EQ(native["path"], json::parse("[[300,400]]"));
    EXPECT_EQ(parse_action(native, Dialect::native), drag);
    EXPECT_FALSE(to_native_json(Drag{{{1, 2}, {3, 4}}, Button::left, {}}).contains("from_pointer"));
    expect_error(
        [] { parse_action(json::parse(R"({"type":"drag","path":[[1,2]]})"), Dialect::native); },
        "path", "needs at least 2 points, got 1");
    expect_error(
        [] {
            parse_action(json::parse(R"({"type":"drag","from_pointer":true,"path":[]})"),
                         Dialect::native);
        },
        "path", "needs at least 1 point, got 0");
    expect_error(
        [] {
            parse_action(json::parse(R"({"type":"drag","from_pointer":1,"path":[[1,2]]})"),
                         Dialect::native);
        },
        "from_pointer", "expected true or false");
    // Off the screen, the error names what the agent sent.
    expect_error(
        [&] {
            validate_on_screen(drag, {200, 200}, "input", Dialect::anthropic);
        },
        "input.coordinate[0]", "x=300 is outside the 200x200 screen");
}

TEST(ZoomEdge, AFarCornerOnTheScreensEdgeIsTheLastPixelAndBeyondIsNamed) {
    Action zoom = Zoom{{960, 600}, {1280, 800}};
    close_zoom_at_edge(zoom, {1280, 800}, "input");
    EXPECT_EQ(std::get<Zoom>(zoom), (Zoom{{960, 600}, {1279, 799}}));
    EXPECT_NO_THROW(validate_on_screen(zoom, {1280, 800}, "input", Dialect::anthropic));
    Action inside = Zoom{{0, 0}, {99, 99}};
    close_zoom_at_edge(inside, {1280, 800});
    EXPECT_EQ(std::get<Zoom>(inside), (Zoom{{0, 0}, {99, 99}}));
    Action beyond = Zoom{{960, 600}, {1281, 800}};
    expect_error(
        [&] {
            close_zoom_at_edge(beyond, {1280, 800}, "[3].input");
        },
        "[3].input.region[2]",
        "x1=1281 is beyond the 1280x800 screen (a zoom's far corner may be at most "
        "1280, the screen's edge)");
    Action low = Zoom{{0, 0}, {10, 801}};
    expect_error([&] { close_zoom_at_edge(low, {1280, 800}); }, "region[3]", "y1=801");
    Click at_edge;
    at_edge.at = Point{1280, 800};
    Action click = at_edge;
    close_zoom_at_edge(click, {1280, 800});
    EXPECT_EQ(std::get<Click>(click).at, (Point{1280, 800})) << "only zooms";
}

TEST(ToolResults, OneToolResultPerBlockInOrderWithImagesWhereTheToolReturnsThem) {
    const std::vector<ToolUse> uses = {{"toolu_1", "left_click", true},
                                       {"toolu_2", "cursor_position", true},
                                       {"toolu_3", "zoom", true}};
    const json results = json::parse(R"([{}, {"x": 10, "y": 20},
        {"type":"zoom","format":"png","width":2,"height":1,"base64_image":"Wk9PTQ=="}])");
    const json answer = action_reply(Dialect::anthropic, "", results, std::nullopt, uses);
    EXPECT_EQ(answer["results"], results);
    EXPECT_FALSE(answer.contains("tool_result"));
    EXPECT_FALSE(answer.contains("screenshot"));
    const json expected = json::parse(R"([
      {"type":"tool_result","tool_use_id":"toolu_1","toolset_name":"computer",
       "content":[{"type":"text","text":"left_click: done"}]},
      {"type":"tool_result","tool_use_id":"toolu_2","toolset_name":"computer",
       "content":[{"type":"text","text":"X=10,Y=20"}]},
      {"type":"tool_result","tool_use_id":"toolu_3","toolset_name":"computer",
       "content":[{"type":"image","source":{"type":"base64","media_type":"image/png",
                                            "data":"Wk9PTQ=="}}]}])");
    EXPECT_EQ(answer["tool_results"], expected);

    // With ?screenshot=true the screen after them ends the last block's content.
    const PngImage shot{"U0NSRUVO", 4, 3};
    const json with_shot = action_reply(Dialect::anthropic, "", json::array({json::object()}), shot,
                                        {{"a", "mouse_move", false}});
    EXPECT_EQ(with_shot["screenshot"]["base64_image"], "U0NSRUVO");
    const json items = with_shot["tool_results"];
    ASSERT_EQ(items.size(), 1u);
    EXPECT_FALSE(items[0].contains("toolset_name")) << "a tool-version block";
    ASSERT_EQ(items[0]["content"].size(), 2u);
    EXPECT_EQ(items[0]["content"][1]["source"]["data"], "U0NSRUVO");
    EXPECT_FALSE(with_shot.contains("tool_result"));
}

}  // namespace
}  // namespace deskbox::input
