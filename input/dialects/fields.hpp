// What the three dialect parsers share (internal to input/; the contract is input/parse.hpp):
// field paths for errors, value readers that validate as they read, the view of one action
// object (Fields) and the table row that maps an action name to its parser (ActionSpec).
// Every reader takes the full field path ("actions[3].path[2][0]") for its errors.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "input/actions.hpp"

namespace deskbox::input::dialects {

using json = nlohmann::json;

// ---- field paths and error words ----

// "prefix.name", or "name" without a prefix.
std::string join(const std::string& prefix, std::string_view name);
// "field[index]".
std::string indexed(const std::string& field, std::size_t index);
// "got <json type>".
std::string got(const json& value);
// "a, b, c".
std::string join_names(const std::vector<std::string_view>& names);

// ---- value readers ----

// An integral number (10.0 counts) in [min, max].
long long read_integer(const json& value, const std::string& field, long long min, long long max);
// 0..32767 (X11 coordinates are 16-bit).
int read_coordinate(const json& value, const std::string& field);
const std::string& read_string(const json& value, const std::string& field);
const json& read_array(const json& value, const std::string& field);
// Text to type: valid UTF-8, at most kMaxTextBytes, no control characters but \n and \t.
std::string read_typed_text(const json& value, const std::string& field);
// A key string ("ctrl+a Delete"), bounded like typed text.
const std::string& read_key_string(const json& value, const std::string& field);

// OpenAI writes key names in capitals ("CTRL", "C"); a capital letter there means the letter key,
// not "shift+letter", so single ASCII capitals are lowered. Native names stay case-sensitive
// ("A" is the keysym A, as in xdotool).
enum class KeyCase { exact, openai };
// An array of key names held together (native hold_keys, OpenAI keys): at most 16, no repeats.
std::vector<Keysym> read_key_list(const json& value, const std::string& field, KeyCase key_case);

// [x, y] as a two-element array: Anthropic coordinates, native drag path points.
Point read_pair(const json& value, const std::string& field);
// [x0, y0, x1, y1]: the top-left and bottom-right corners, both inclusive.
Zoom read_region(const json& value, const std::string& field);
// A number of seconds (fractional) in [0, max_ms / 1000], as milliseconds.
int seconds_to_ms(const json& value, const std::string& field, int max_ms);

// ---- one action object ----

// The object being parsed, the field prefix and the action name, for lookups and errors.
class Fields {
  public:
    Fields(const json& object, const std::string& prefix, std::string_view action)
        : object_(object), prefix_(prefix), action_(action) {}

    std::string field(std::string_view name) const { return join(prefix_, name); }
    std::string_view action() const { return action_; }

    // nullptr when absent or null.
    const json* optional(const char* name) const {
        const auto it = object_.find(name);
        return it == object_.end() || it->is_null() ? nullptr : &*it;
    }
    const json& required(const char* name) const {
        if (const json* value = optional(name)) return *value;
        throw ActionError(field(name), "required for action '" + std::string(action_) + "'");
    }

  private:
    const json& object_;
    const std::string& prefix_;
    std::string_view action_;
};

// A required key string field: an xdotool sequence ("ctrl+a Delete"), or one chord ("ctrl+c").
std::vector<KeyChord> read_key_sequence(const Fields& f, const char* name);
KeyChord read_chord(const Fields& f, const char* name);

// Required "x" and "y" (native move, every OpenAI pointer action).
Point read_required_xy(const Fields& f);
// Required "path": min_points..kMaxDragPoints points, each read by `read_point`.
using PointReader = Point (*)(const json& value, const std::string& field);
std::vector<Point> read_path(const Fields& f, PointReader read_point, std::size_t min_points = 2);
// The "type" action: the same in every dialect ({"text": ...}).
Action read_type_action(const Fields& f);
// The "zoom" action, native and Anthropic ({"region": [x0, y0, x1, y1]}).
Action read_zoom_action(const Fields& f);

// One row of a dialect's table: an action name, the fields it takes besides the discriminator
// ("type" or "action"), and its parser, which may assume no other field is present.
struct ActionSpec {
    std::string_view name;
    std::vector<std::string_view> fields;
    std::function<Action(const Fields&)> parse;
};

// The tables, one file each (native.cpp, anthropic.cpp, openai.cpp).
const std::vector<ActionSpec>& native_specs();
const std::vector<ActionSpec>& anthropic_specs();
// The computer toolset's members (anthropic.cpp): one tool_use block each, `name` the member.
const std::vector<ActionSpec>& anthropic_toolset_specs();
const std::vector<ActionSpec>& openai_specs();

}  // namespace deskbox::input::dialects
