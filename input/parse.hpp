// Parsing and validating action JSON in the three dialects agents speak, into the one model.
//
// All dialects:
// - Unknown fields are errors, and so are fields that do not belong to the action type.
// - A JSON null counts as an absent optional field (SDKs that dump optional fields write null).
// - Coordinates are numbers with an integral value (10 and 10.0 are fine, 10.5 is an error),
//   0..32767 (X11 coordinates are 16-bit). Whether they are on the screen is checked afterwards,
//   by validate_on_screen or CoordinateScaler, because the parser does not know the screen.
// - Text to type: valid UTF-8, at most kMaxTextBytes. '\n' and '\t' are allowed (Return, Tab);
//   every other control character (C0, DEL, C1) is rejected, '\r' included, so "\r\n" never
//   silently types two Returns.
// - Key strings are xdotool style (keynames.hpp): "ctrl+shift+t", "ctrl+a Delete", "ctrl++".
//
// native: {"type":"click",...} as the OpenAPI document's Native* schemas say; keys by X keysym
//   name or alias, case-sensitive first ("A" is the keysym A). to_native_json writes canonical
//   names. A drag with "from_pointer": true presses where the pointer is (path: 1.. points).
// anthropic (computer_20241022 / 20250124 / 20251124 tool_use input): {"action":...}.
//   Clicks, left_click_drag and scroll hold the modifier keys in `text` ("shift"); clicks also
//   accept them in `key`, as anthropic-quickstarts reads them. duration is seconds (fractional).
//   scroll_direction + scroll_amount become notches. left_click_drag without start_coordinate
//   (computer_20241022) drags from wherever the pointer is when it runs (Drag::from_pointer).
//   `zoom` (computer_20251124) takes region [x0, y0, x1, y1], corners inclusive, and answers
//   with an image of that region; a far corner on the screen's far edge (x1 == width, as models
//   write the bottom-right quarter [960, 600, 1280, 800]) means up to the last pixel.
// anthropic, computer toolset (computer_toolset_20260801): a tool_use block per action,
//   {"type":"tool_use","id","name":<member>,"toolset_name":"computer","input":{...}}, the
//   input as the SDKs' Computer*Input types: the actions above without `action`, except that
//   clicks take modifiers only in `text`, left_click_drag needs start_coordinate,
//   left_mouse_down / left_mouse_up take nothing (they act where the pointer is), and `key`
//   takes `repeat` (1.., the keys pressed that many times).
// openai (computer-use-preview computer_call.action): {"type":...}. button "wheel" is middle.
//   keypress is one chord; keys are one name per element, and a single capital letter is the
//   letter key ("CTRL","C" = ctrl+c, not ctrl+shift+c). scroll_x/scroll_y are pixels: notches =
//   round(px / 100) halves away from zero, at least 1 for any nonzero px. `wait` is 1000 ms
//   (the sample app's default). `keys` on any pointer action (move too) are held around it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "input/actions.hpp"

namespace deskbox::input {

// Dialect (native, anthropic, openai) is declared in actions.hpp.

// "native" | "anthropic" | "openai" (case-insensitive); throws ActionError{"dialect", ...}.
Dialect parse_dialect(std::string_view name);

// One action object. `field_prefix` is prepended to field paths in errors ("actions[3]").
// Throws ActionError naming the offending field and the reason. Unknown keys are errors.
Action parse_action(const nlohmann::json& object, Dialect dialect,
                    const std::string& field_prefix = "");

// A request body: either one action object or {"actions":[...]} (at most kMaxBatchActions).
std::vector<Action> parse_actions(const nlohmann::json& body, Dialect dialect);

// What the actions endpoint takes: one action, {"actions":[...]}, or the model's whole output
// item -- Anthropic's tool_use block {"type":"tool_use","id","name","input":{action}} or
// OpenAI's computer_call item {"type":"computer_call","call_id","action":{...}} (the GA
// computer tool's batch: "actions":[...]). `call_id` is the item's id, for the answer to quote;
// `fields[i]` is where action i sat in the body ("input", "actions[2]", "" for a bare one).
// Anthropic also: a computer toolset block (above), or the list of one turn's tool_use blocks
// ([block, ...], all toolset members or all tool-version blocks: "[2].input"). Those are
// answered block by block: `tool_uses[i]` is block i, whose action is actions[i]; every such
// block needs its id. Empty for the other forms.
struct ActionRequest {
    std::vector<Action> actions;
    std::vector<std::string> fields;
    std::string call_id;
    std::vector<ToolUse> tool_uses;
};
ActionRequest parse_action_request(const nlohmann::json& body, Dialect dialect);

// The native JSON form of an action; parse_action(to_native_json(a), native) == a.
nlohmann::json to_native_json(const Action& action);

// A zoom whose far corner lies on the far edges of a screen of `screen` size (x1 == width,
// y1 == height) is taken up to the last pixel (x1 = width - 1); a corner beyond them is an
// ActionError naming it ("region[2]"). Other actions are left as they are. Before
// validate_on_screen or CoordinateScaler::to_screen, with the size the client sees.
void close_zoom_at_edge(Action& action, Size screen, const std::string& field_prefix = "");

// Checks every coordinate lies on a screen of `screen` size (0 <= x < width, 0 <= y < height).
// Throws ActionError with field `field_prefix` + the dialect's name for the coordinate
// (coordinate_field: "x", "coordinate[0]", "path[3][1]"...). Never clamps.
void validate_on_screen(const Action& action, Size screen, const std::string& field_prefix = "",
                        Dialect dialect = Dialect::native);

}  // namespace deskbox::input
