// Desktop commands: screenshot, actions (act, click, move, scroll, type, key), windows, cursor,
// clipboard and kill-processes.
#include "server/cli/cli_commands.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <system_error>

namespace deskbox::cli {

using client::ApiError;
using client::Method;
using client::Query;
using nlohmann::json;

int command_screenshot(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "screenshot", tokens,
              {{"--output", "-o"},
               {"--format", ""},
               {"--quality", ""},
               {"--width", ""},
               {"--height", ""}});
    c.expect(1, 1);
    std::string format = c.args.get("--format").value_or("png");
    if (format == "jpg") format = "jpeg";
    if (format != "png" && format != "jpeg" && format != "webp") {
        throw UsageError("--format: expected png, jpeg or webp, got \"" + format + "\"");
    }
    Query query;
    query.add("format", format);
    if (auto quality = c.args.get("--quality")) {
        query.add("quality", std::to_string(parse_integer(*quality, "--quality", 1, 100)));
    }
    for (const char* option : {"--width", "--height"}) {
        if (auto value = c.args.get(option)) {
            query.add(option + 2, std::to_string(parse_integer(*value, option, 1, 1 << 16)));
        }
    }
    std::string path =
        c.args.get("--output")
            .value_or("screenshot-" + c.arg(0) + "." + (format == "jpeg" ? "jpg" : format));
    client::Response image =
        context.client().get_bytes(sandbox_path(c.arg(0)) + "/screenshot" + query.str());
    write_output(context, path, image.body);
    if (path != "-") context.out << path << "\n";
    return kExitOk;
}

json post_actions(Context& context, const std::string& id, const json& actions,
                  const std::optional<std::string>& dialect = {}) {
    std::string target = sandbox_path(id) + "/actions";
    if (dialect) target += Query().add("dialect", *dialect).str();
    return context.client().post_json(target, actions);
}

int command_act(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "act", tokens, {{"--dialect", ""}});
    c.expect(2, 2);
    std::string text = c.arg(1) == "-" ? read_all(context.in) : c.arg(1);
    json actions;
    try {
        actions = json::parse(text);
    } catch (const json::parse_error& error) {
        throw UsageError(std::string("ACTION is not valid JSON: ") + error.what(), usage_of("act"));
    }
    if (!actions.is_object()) {
        throw UsageError("ACTION must be a JSON object: one action or {\"actions\":[...]}",
                         usage_of("act"));
    }
    json results = post_actions(context, c.arg(0), actions, c.args.get("--dialect"));
    context.out << results.dump(2) << "\n";
    return kExitOk;
}

// Only the syntax is checked here: the server knows the screen and says what is off it.
long long coordinate(const std::string& text, const char* what) {
    return parse_integer(text, what, -(1LL << 30), 1LL << 30);
}

// X Y, or a target (--text, --image ...) the server finds on the screen.
json pointer_action(const Command& c, const char* type) {
    json action = {{"type", type}};
    if (auto target = target_of(c.args)) {
        if (c.args.positional.size() != 1)
            throw UsageError("give X Y or a target (--text, --image), not both", usage_of(type));
        action["target"] = *target;
        return action;
    }
    if (c.args.positional.size() != 3) throw UsageError("expected ID X Y", usage_of(type));
    action["x"] = coordinate(c.arg(1), "X");
    action["y"] = coordinate(c.arg(2), "Y");
    return action;
}

std::vector<OptionSpec> plus_targets(std::vector<OptionSpec> options) {
    const auto& more = target_options();
    options.insert(options.end(), more.begin(), more.end());
    return options;
}

void print_target(Context& context, const json& answer) {
    const json results = answer.value("results", json::array());
    if (!results.empty() && results[0].contains("target")) {
        const json& hit = results[0]["target"];
        context.out << "at " << hit["center"][0] << " " << hit["center"][1] << "\n";
    }
}

int command_click(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "click", tokens, plus_targets({{"--button", ""}, {"--count", ""}}));
    c.expect(1, 3);
    json action = pointer_action(c, "click");
    if (auto button = c.args.get("--button")) action["button"] = *button;
    if (auto count = c.args.get("--count"))
        action["count"] = parse_integer(*count, "--count", 1, 3);
    print_target(context, post_actions(context, c.arg(0), action));
    return kExitOk;
}

int command_move(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "move", tokens, plus_targets({}));
    c.expect(1, 3);
    print_target(context, post_actions(context, c.arg(0), pointer_action(c, "move")));
    return kExitOk;
}

int command_scroll(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "scroll", tokens, {{"--dx", ""}});
    c.expect(4, 4);
    json action = {{"type", "scroll"},
                   {"x", coordinate(c.arg(1), "X")},
                   {"y", coordinate(c.arg(2), "Y")},
                   {"dy", parse_integer(c.arg(3), "DY", -1000, 1000)}};
    if (auto dx = c.args.get("--dx")) action["dx"] = parse_integer(*dx, "--dx", -1000, 1000);
    post_actions(context, c.arg(0), action);
    return kExitOk;
}

int command_type(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "type", tokens, {});
    c.expect(2, 2);
    post_actions(context, c.arg(0), {{"type", "type"}, {"text", c.arg(1)}});
    return kExitOk;
}

int command_key(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "key", tokens, {});
    c.expect(2, 2);
    post_actions(context, c.arg(0), {{"type", "key"}, {"keys", c.arg(1)}});
    return kExitOk;
}

int command_kill_processes(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "kill-processes", tokens, {});
    c.expect(1, 1);
    json answer =
        context.client().post_json(sandbox_path(c.arg(0)) + "/processes/kill", json::object());
    context.out << "killed " << answer.value("killed", 0) << " processes";
    if (answer.value("refused", 0) > 0) context.out << " (" << answer["refused"] << " refused)";
    context.out << "\n";
    return kExitOk;
}

int command_windows(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "windows", tokens, {{"--json", "", false}});
    c.expect(1, 1);
    json answer = context.client().get_json(sandbox_path(c.arg(0)) + "/windows");
    if (c.args.has("--json")) {
        context.out << answer.dump(2) << "\n";
        return kExitOk;
    }
    const json& windows =
        answer.is_object() && answer.contains("windows") ? answer["windows"] : answer;
    if (!windows.is_array())
        throw std::runtime_error("unexpected answer from deskboxd: no \"windows\" list");
    std::vector<std::vector<std::string>> rows = {{"ID", "ACTIVE", "GEOMETRY", "CLASS", "TITLE"}};
    for (const auto& window : windows) {
        rows.push_back({text_of(window, "id"), window.value("active", false) ? "*" : "",
                        text_of(window, "width") + "x" + text_of(window, "height") + "+" +
                            text_of(window, "x") + "+" + text_of(window, "y"),
                        text_of(window, "class"), text_of(window, "title")});
    }
    print_table(context.out, rows);
    return kExitOk;
}

int command_cursor(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "cursor", tokens, {{"--json", "", false}});
    c.expect(1, 1);
    json answer = context.client().get_json(sandbox_path(c.arg(0)) + "/cursor");
    if (c.args.has("--json")) {
        context.out << answer.dump(2) << "\n";
    } else {
        context.out << text_of(answer, "x") << " " << text_of(answer, "y") << "\n";
    }
    return kExitOk;
}

int command_clipboard(Context& context, const std::vector<std::string>& tokens) {
    if (tokens.empty() || (tokens[0] != "get" && tokens[0] != "set")) {
        if (!tokens.empty() && (tokens[0] == "--help" || tokens[0] == "-h")) {
            throw ShowHelp{usage_of("clipboard") + "\n"};
        }
        throw UsageError("expected 'get' or 'set'", usage_of("clipboard"));
    }
    std::vector<std::string> rest(tokens.begin() + 1, tokens.end());
    Command c(context, "clipboard", rest, {});
    std::string path = "/clipboard";
    if (tokens[0] == "get") {
        c.expect(1, 1);
        json answer = context.client().get_json(sandbox_path(c.arg(0)) + path);
        if (!answer.is_object() || !answer.contains("text") || !answer["text"].is_string()) {
            throw std::runtime_error("unexpected answer from deskboxd: no clipboard \"text\"");
        }
        context.out << answer["text"].get<std::string>();
        return kExitOk;
    }
    c.expect(2, 2);
    std::string text = c.arg(1) == "-" ? read_all(context.in) : c.arg(1);
    context.client().put_json(sandbox_path(c.arg(0)) + path, json{{"text", text}});
    return kExitOk;
}

}  // namespace deskbox::cli
