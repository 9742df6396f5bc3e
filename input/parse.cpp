// Dialect dispatch, request bodies and envelopes, and the on-screen check. The dialect rules are
// documented in parse.hpp; each dialect's table of actions is in input/dialects/.
#include "input/parse.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "input/dialects/fields.hpp"
#include "input/keynames.hpp"

namespace deskbox::input {

namespace {

using dialects::ActionSpec;
using dialects::got;
using dialects::indexed;
using dialects::join;
using dialects::join_names;
using dialects::read_array;
using dialects::read_string;
using nlohmann::json;

const std::vector<ActionSpec>& specs_for(Dialect dialect) {
    switch (dialect) {
        case Dialect::native:
            return dialects::native_specs();
        case Dialect::anthropic:
            return dialects::anthropic_specs();
        case Dialect::openai:
            return dialects::openai_specs();
    }
    return dialects::native_specs();
}

std::string spec_names(const std::vector<ActionSpec>& specs) {
    std::vector<std::string_view> names;
    for (const auto& spec : specs) names.push_back(spec.name);
    return join_names(names);
}

const ActionSpec* find_spec(const std::vector<ActionSpec>& specs, std::string_view name) {
    const auto spec = std::find_if(specs.begin(), specs.end(),
                                   [&](const ActionSpec& s) { return s.name == name; });
    return spec == specs.end() ? nullptr : &*spec;
}

// `object`'s fields but `skip` must be the spec's (unknown ones are errors); then it is parsed.
Action parse_with_spec(const json& object, const ActionSpec& spec, const std::string& prefix,
                       std::string_view skip) {
    for (const auto& [key, _] : object.items()) {
        if (!skip.empty() && key == skip) continue;
        if (std::find(spec.fields.begin(), spec.fields.end(), key) == spec.fields.end()) {
            throw ActionError(
                join(prefix, key),
                "not a field of action '" + std::string(spec.name) + "'" +
                    (spec.fields.empty() ? std::string(" (it takes none)")
                                         : " (allowed: " + join_names(spec.fields) + ")"));
        }
    }
    return spec.parse(dialects::Fields(object, prefix, spec.name));
}

// A helpful word when a whole envelope was sent instead of the action inside it.
std::string envelope_hint(const json& object, Dialect dialect) {
    if (dialect == Dialect::anthropic && object.contains("input")) {
        return "; send the tool_use block whole (with \"type\": \"tool_use\") or its input";
    }
    if (dialect == Dialect::openai && object.contains("action")) {
        return "; send the computer_call item whole (with \"type\": \"computer_call\") or "
               "its action";
    }
    return "";
}

}  // namespace

Dialect parse_dialect(std::string_view name) {
    std::string lower(name);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (lower == "native") return Dialect::native;
    if (lower == "anthropic") return Dialect::anthropic;
    if (lower == "openai") return Dialect::openai;
    throw ActionError("dialect", "unknown dialect " + quote_for_error(name) +
                                     " (expected native, anthropic or openai)");
}

Action parse_action(const json& object, Dialect dialect, const std::string& field_prefix) {
    if (!object.is_object()) {
        throw ActionError(field_prefix.empty() ? "body" : field_prefix,
                          "expected an action object, " + got(object));
    }
    const char* discriminator = dialect == Dialect::anthropic ? "action" : "type";
    const std::string discriminator_field = join(field_prefix, discriminator);
    const auto& specs = specs_for(dialect);

    const auto it = object.find(discriminator);
    if (it == object.end() || it->is_null()) {
        throw ActionError(discriminator_field, "required (one of " + spec_names(specs) + ")" +
                                                   envelope_hint(object, dialect));
    }
    const std::string& name = read_string(*it, discriminator_field);
    const ActionSpec* spec = find_spec(specs, name);
    if (!spec) {
        throw ActionError(discriminator_field, "unknown action " + quote_for_error(name) +
                                                   " (expected one of " + spec_names(specs) + ")" +
                                                   envelope_hint(object, dialect));
    }
    return parse_with_spec(object, *spec, field_prefix, discriminator);
}

namespace {

// The fields of a model's output item besides the action(s), which are only carried along.
void check_envelope_fields(const json& body, const std::vector<std::string_view>& allowed,
                           const char* item, const std::string& prefix = "") {
    for (const auto& [key, _] : body.items())
        if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
            throw ActionError(join(prefix, key), std::string("not a field of a ") + item +
                                                     " (allowed: " + join_names(allowed) + ")");
}

std::string optional_id(const json& body, const char* name, const std::string& prefix = "") {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return {};
    const std::string field = join(prefix, name);
    const std::string& id = read_string(*it, field);
    if (id.size() > 256) throw ActionError(field, "longer than 256 bytes");
    return id;
}

// A computer toolset member's block names its toolset; a tool version's block does not.
bool is_toolset_block(const json& block, const std::string& prefix) {
    const auto it = block.find("toolset_name");
    if (it == block.end() || it->is_null()) return false;
    const std::string field = join(prefix, "toolset_name");
    const std::string& name = read_string(*it, field);
    if (name != "computer")
        throw ActionError(field, "unknown toolset " + quote_for_error(name) +
                                     " (deskbox runs the computer toolset)");
    return true;
}

// A toolset block's action: `name` is the member, `input` its fields.
Action read_toolset_member(const json& block, const std::string& prefix, ToolUse& use) {
    check_envelope_fields(
        block, {"type", "id", "name", "toolset_name", "input", "caller", "cache_control"},
        "computer toolset tool_use block", prefix);
    const auto& specs = dialects::anthropic_toolset_specs();
    const std::string name_field = join(prefix, "name");
    const auto name = block.find("name");
    if (name == block.end() || name->is_null())
        throw ActionError(name_field, "required: the member (one of " + spec_names(specs) + ")");
    use.name = read_string(*name, name_field);
    const ActionSpec* spec = find_spec(specs, use.name);
    if (!spec)
        throw ActionError(name_field, "unknown computer toolset member " +
                                          quote_for_error(use.name) + " (expected one of " +
                                          spec_names(specs) + ")");
    const std::string input_field = join(prefix, "input");
    const json& input = block.at("input");
    if (!input.is_object())
        throw ActionError(input_field, "expected the member's input object, " + got(input));
    return parse_with_spec(input, *spec, input_field, {});
}

// One tool_use block at `prefix` ("" alone, "[2]" in a list): its action; the block in `use`.
Action read_tool_use(const json& block, const std::string& prefix, ToolUse& use) {
    use.toolset = is_toolset_block(block, prefix);
    const auto input = block.find("input");
    if (input == block.end() || input->is_null())
        throw ActionError(join(prefix, "input"), "required in a tool_use block");
    use.id = optional_id(block, "id", prefix);
    if (use.toolset) return read_toolset_member(block, prefix, use);
    check_envelope_fields(
        block, {"type", "id", "name", "input", "caller", "cache_control", "toolset_name"},
        "tool_use block", prefix);
    Action action = parse_action(*input, Dialect::anthropic, join(prefix, "input"));
    use.name = input->at("action").get<std::string>();  // parsed: it is a known action's name
    return action;
}

void require_id(const ToolUse& use, const std::string& prefix) {
    if (use.id.empty())
        throw ActionError(join(prefix, "id"), "required: the block's tool_result answers it by id");
}

// One turn's tool_use blocks, all toolset members or all tool-version blocks, ids distinct.
void read_tool_use_list(const json& list, ActionRequest& request) {
    if (list.empty()) throw ActionError("body", "an empty list of tool_use blocks");
    if (list.size() > kMaxBatchActions)
        throw ActionError("body", "has " + std::to_string(list.size()) + " blocks; at most " +
                                      std::to_string(kMaxBatchActions) + " allowed");
    for (std::size_t i = 0; i < list.size(); ++i) {
        const std::string prefix = indexed("", i);
        const json& block = list[i];
        const auto type = block.is_object() ? block.find("type") : block.end();
        if (!block.is_object() || type == block.end() || *type != "tool_use")
            throw ActionError(
                block.is_object() ? join(prefix, "type") : prefix,
                "expected a tool_use block, " + (block.is_object() && type != block.end()
                                                     ? "got type " + quote_for_error(type->dump())
                                                     : got(block)));
        ToolUse use;
        Action action = read_tool_use(block, prefix, use);
        require_id(use, prefix);
        if (i > 0 && use.toolset != request.tool_uses.front().toolset)
            throw ActionError(join(prefix, use.toolset ? "toolset_name" : "input.action"),
                              "a list mixes computer toolset blocks with computer tool blocks "
                              "(input with action); one turn's blocks are of one tool");
        for (const ToolUse& earlier : request.tool_uses)
            if (earlier.id == use.id)
                throw ActionError(join(prefix, "id"), "the id of an earlier block");
        request.actions.push_back(std::move(action));
        request.fields.push_back(join(prefix, "input"));
        request.tool_uses.push_back(std::move(use));
    }
}

}  // namespace

ActionRequest parse_action_request(const json& body, Dialect dialect) {
    ActionRequest request;
    if (dialect == Dialect::anthropic && body.is_array()) {
        read_tool_use_list(body, request);
        return request;
    }
    const auto type = body.is_object() ? body.find("type") : body.end();
    const bool typed = body.is_object() && type != body.end() && type->is_string();
    if (dialect == Dialect::anthropic && typed && *type == "tool_use") {
        ToolUse use;
        request.actions.push_back(read_tool_use(body, "", use));
        request.fields.push_back("input");
        request.call_id = use.id;
        if (use.toolset) {
            require_id(use, "");
            request.tool_uses.push_back(std::move(use));
        }
        return request;
    }
    if (dialect == Dialect::openai && typed && *type == "computer_call") {
        check_envelope_fields(
            body, {"type", "id", "call_id", "action", "actions", "pending_safety_checks", "status"},
            "computer_call item");
        request.call_id = optional_id(body, "call_id");
        const bool one = body.contains("action") && !body["action"].is_null();
        const bool many = body.contains("actions") && !body["actions"].is_null();
        if (one == many)
            throw ActionError(one ? "actions" : "action",
                              one ? "give action or actions, not both"
                                  : "required in a computer_call item (or actions)");
        if (one) {
            request.actions.push_back(parse_action(body["action"], dialect, "action"));
            request.fields.push_back("action");
            return request;
        }
        request.actions = parse_actions(json{{"actions", body["actions"]}}, dialect);
        for (std::size_t i = 0; i < request.actions.size(); ++i)
            request.fields.push_back(indexed("actions", i));
        return request;
    }
    request.actions = parse_actions(body, dialect);
    const bool batch = body.contains("actions");
    for (std::size_t i = 0; i < request.actions.size(); ++i)
        request.fields.push_back(batch ? indexed("actions", i) : "");
    return request;
}

std::vector<Action> parse_actions(const json& body, Dialect dialect) {
    if (!body.is_object()) {
        throw ActionError("body",
                          "expected an action object or {\"actions\": [...]}, " + got(body));
    }
    if (!body.contains("actions")) return {parse_action(body, dialect)};

    for (const auto& [key, _] : body.items()) {
        if (key != "actions") throw ActionError(key, "not allowed next to 'actions'");
    }
    const json& list = read_array(body["actions"], "actions");
    if (list.size() > kMaxBatchActions) {
        throw ActionError("actions", "has " + std::to_string(list.size()) + " actions; at most " +
                                         std::to_string(kMaxBatchActions) + " allowed");
    }
    std::vector<Action> actions;
    actions.reserve(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
        actions.push_back(parse_action(list[i], dialect, indexed("actions", i)));
    }
    return actions;
}

void close_zoom_at_edge(Action& action, Size screen, const std::string& field_prefix) {
    auto* zoom = std::get_if<Zoom>(&action);
    if (!zoom) return;
    const auto close = [&](int& value, int length, const char* axis, int index) {
        if (value < length) return;
        if (value == length) {
            value = length - 1;
            return;
        }
        throw ActionError(join(field_prefix, "region" + indexed("", index)),
                          std::string(axis) + "1=" + std::to_string(value) + " is beyond the " +
                              std::to_string(screen.width) + "x" + std::to_string(screen.height) +
                              " screen (a zoom's far corner may be at most " +
                              std::to_string(length) + ", the screen's edge)");
    };
    close(zoom->to.x, screen.width, "x", 2);
    close(zoom->to.y, screen.height, "y", 3);
}

void validate_on_screen(const Action& action, Size screen, const std::string& field_prefix,
                        Dialect dialect) {
    const auto check = [&](int value, int length, const char* axis, std::size_t index,
                           int axis_id) {
        if (value >= 0 && value < length) return;
        throw ActionError(join(field_prefix, coordinate_field(action, index, axis_id, dialect)),
                          std::string(axis) + "=" + std::to_string(value) + " is outside the " +
                              std::to_string(screen.width) + "x" + std::to_string(screen.height) +
                              " screen (" + axis + " must be 0.." + std::to_string(length - 1) +
                              ")");
    };
    for_each_point(action, [&](const Point& point, std::size_t index) {
        check(point.x, screen.width, "x", index, 0);
        check(point.y, screen.height, "y", index, 1);
    });
}

}  // namespace deskbox::input
