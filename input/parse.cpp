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
    const auto spec = std::find_if(specs.begin(), specs.end(),
                                   [&](const ActionSpec& s) { return s.name == name; });
    if (spec == specs.end()) {
        throw ActionError(discriminator_field, "unknown action " + quote_for_error(name) +
                                                   " (expected one of " + spec_names(specs) + ")" +
                                                   envelope_hint(object, dialect));
    }
    for (const auto& [key, _] : object.items()) {
        if (key == discriminator) continue;
        if (std::find(spec->fields.begin(), spec->fields.end(), key) == spec->fields.end()) {
            throw ActionError(
                join(field_prefix, key),
                "not a field of action '" + name + "'" +
                    (spec->fields.empty() ? std::string(" (it takes none)")
                                          : " (allowed: " + join_names(spec->fields) + ")"));
        }
    }
    return spec->parse(dialects::Fields(object, field_prefix, spec->name));
}

namespace {

// The fields of a model's output item besides the action(s), which are only carried along.
void check_envelope_fields(const json& body, const std::vector<std::string_view>& allowed,
                           const char* item) {
    for (const auto& [key, _] : body.items())
        if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
            throw ActionError(key, std::string("not a field of a ") + item +
                                       " (allowed: " + join_names(allowed) + ")");
}

std::string optional_id(const json& body, const char* name) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return {};
    const std::string& id = read_string(*it, name);
    if (id.size() > 256) throw ActionError(name, "longer than 256 bytes");
    return id;
}

}  // namespace

ActionRequest parse_action_request(const json& body, Dialect dialect) {
    ActionRequest request;
    const auto type = body.is_object() ? body.find("type") : body.end();
    const bool typed = body.is_object() && type != body.end() && type->is_string();
    if (dialect == Dialect::anthropic && typed && *type == "tool_use") {
        check_envelope_fields(body, {"type", "id", "name", "input", "cache_control"},
                              "tool_use block");
        request.call_id = optional_id(body, "id");
        if (!body.contains("input")) throw ActionError("input", "required in a tool_use block");
        request.actions.push_back(parse_action(body["input"], dialect, "input"));
        request.fields.push_back("input");
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
