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

#include "common/atomic_file.hpp"

namespace deskbox::cli {

using client::ApiError;
using client::Method;
using client::Query;
using nlohmann::json;

namespace {

const char* const kMainUsage = R"(usage: deskbox [--server URL] [--api-key KEY] COMMAND [ARGS...]

A client of deskboxd's HTTP API (default server http://127.0.0.1:8700; environment
DESKBOX_SERVER and DESKBOX_API_KEY set the defaults).

Sandboxes:
  create [--template minimal] [--runtime container] [--size 1280x800] [--timeout 300]
         [--network on|off] [--allow DOMAIN|IP|CIDR]... [--deny ...]... [--json]
  ports ID [--json]          (exposed ports: what listens, and the URL to reach each)
  list [--json]              inspect ID          kill ID...
  pause ID [--snapshot]      resume ID           timeout ID SECONDS
Desktop:
  screenshot ID [-o FILE|-] [--format png|jpeg|webp] [--quality N] [--width N] [--height N]
  act ID 'JSON action or {"actions":[...]}'|- [--dialect native|anthropic|openai]
  click ID X Y [--button left|right|middle] [--count N]     move ID X Y
  click ID --text TEXT|--image FILE [--index N] [--offset DX,DY]   (also move)
  scroll ID X Y DY [--dx N]      type ID TEXT      key ID COMBO (e.g. ctrl+shift+t)
  windows ID [--json]     cursor ID [--json]     clipboard get ID     clipboard set ID TEXT|-
Seeing the screen:
  wait ID [--until change|stable|image|text|gone] [--text T|--image F] [--region X,Y,W,H]
  locate ID --text T|--image F.png [--region ...]    ocr ID [--region ...] [--json]
  compare ID BASELINE.png [--mask X,Y,W,H]... [--tolerance N] [--diff OUT.png]
Commands and files:
  exec ID [--env NAME=VALUE]... [--cwd DIR] [--timeout S] [--background] [-i] [--] CMD [ARG...]
  exec ID --shell 'LINE'
  files get ID PATH [-o LOCAL]    files put ID LOCAL|- PATH [--mode M]
  files ls ID PATH                files rm ID PATH [-r]
Other:
  demo [--template minimal] [-o demo.png] [--keep]    health    help [COMMAND]
  mcp [--sandbox ID | --create TEMPLATE]              (MCP over stdio)

Exit codes: 0 ok, 1 API or connection error, 2 usage error, 3 no match (wait timed out, locate
found nothing, compare differs); exec exits with the command's code.
Run 'deskbox COMMAND --help' for a command's options.
)";

const std::map<std::string, std::string> kUsage = {
    {"create",
     "usage: deskbox create [--template NAME] [--runtime container|microvm] [--size WxH]\n"
     "         [--timeout SECONDS] [--dpi N] [--api-size WxH] [--on-timeout kill|pause]\n"
     "         [--memory MB] [--cpus N] [--pids N] [--disk MB] [--env NAME=VALUE]...\n"
     "         [--meta NAME=VALUE]...\n"
     "         [--network on|off] [--allow ENTRY]... [--deny ENTRY]... [--egress-kbps N] [--json]\n"
     "Creates a sandbox and prints its id (--json: the whole answer). Defaults: --template\n"
     "minimal --runtime container --size 1280x800 --timeout 300, the server's network default.\n"
     "--allow/--deny: a domain (example.org), a wildcard (*.example.org), an IP or a CIDR; with\n"
     "--allow only those are reached, --deny alone takes names or ranges off the internet."},
    {"ports",
     "usage: deskbox ports ID [--json]\n"
     "Lists the TCP ports programs in the sandbox listen on, with the URL deskboxd serves each\n"
     "at (authorised by the sandbox's control token)."},
    {"list", "usage: deskbox list [--json]"},
    {"inspect", "usage: deskbox inspect ID"},
    {"kill", "usage: deskbox kill ID..."},
    {"pause", "usage: deskbox pause ID [--snapshot]"},
    {"resume", "usage: deskbox resume ID"},
    {"timeout", "usage: deskbox timeout ID SECONDS\nSets the sandbox to expire SECONDS from now."},
    {"screenshot",
     "usage: deskbox screenshot ID [-o FILE|-] [--format png|jpeg|webp] [--quality N]\n"
     "         [--width N] [--height N]\n"
     "Saves to FILE (default screenshot-ID.EXT) and prints its path; -o - writes the image to "
     "stdout."},
    {"act",
     "usage: deskbox act ID JSON|- [--dialect native|anthropic|openai]\n"
     "Sends one action or {\"actions\":[...]} (- reads it from stdin) and prints the results."},
    {"click",
     "usage: deskbox click ID X Y [--button left|right|middle] [--count N]\n"
     "       deskbox click ID --text TEXT|--image FILE.png [--index N] [--offset DX,DY]\n"
     "         [--region X,Y,W,H] [--threshold F] [--exact] [--timeout-ms N] [...]\n"
     "With a target the server finds it on the screen (waiting up to --timeout-ms, default\n"
     "5000) and clicks its centre; prints where."},
    {"move",
     "usage: deskbox move ID X Y\n"
     "       deskbox move ID --text TEXT|--image FILE.png [target options as for click]"},
    {"wait",
     "usage: deskbox wait ID [--until change|stable|image|text|gone] [--text TEXT|--image FILE]\n"
     "         [--region X,Y,W,H] [--timeout-ms N] [--stable-ms N] [--threshold F] [--json]\n"
     "Returns as soon as the screen (or region) changes, has been still for --stable-ms, shows\n"
     "the text or image, or no longer does (gone). Default --until: text or image when given,\n"
     "else change; default --timeout-ms 10000. Exit 0 matched, 3 timed out."},
    {"locate",
     "usage: deskbox locate ID --image FILE.png|--text TEXT [--region X,Y,W,H] [--threshold F]\n"
     "         [--max-results N] [--grayscale] [--exact] [--lang eng] [--json]\n"
     "Prints X Y WIDTH HEIGHT and the score of each match, best first (text: in reading order).\n"
     "Exit 3 when nothing matched."},
    {"ocr",
     "usage: deskbox ocr ID [--region X,Y,W,H] [--lang eng] [--min-confidence N] [--json]\n"
     "Prints the text on the screen (--json: lines and words with boxes and confidence)."},
    {"compare",
     "usage: deskbox compare ID BASELINE.png [--region X,Y,W,H] [--mask X,Y,W,H]...\n"
     "         [--tolerance N] [--diff OUT.png] [--json]\n"
     "Compares the screen (or the region) with BASELINE: exit 0 identical, 3 different (the\n"
     "changed boxes are printed). --diff saves the screen dimmed with the changes in red."},
    {"scroll", "usage: deskbox scroll ID X Y DY [--dx N]\nDY in wheel notches, positive = down."},
    {"type", "usage: deskbox type ID TEXT"},
    {"key", "usage: deskbox key ID COMBO\nCOMBO like enter, ctrl+c, ctrl+shift+t."},
    {"exec",
     "usage: deskbox exec ID [--env NAME=VALUE]... [--cwd DIR] [--timeout S] [--background] [-i]\n"
     "         [--] CMD [ARG...]\n"
     "       deskbox exec ID [options] --shell 'LINE'\n"
     "Runs a command in the sandbox, prints its stdout and stderr and exits with its code.\n"
     "-i sends this program's stdin to it; --background prints the pid and returns at once."},
    {"files",
     "usage: deskbox files get ID PATH [-o LOCAL|-]\n"
     "       deskbox files put ID LOCAL|- PATH [--mode 0644]\n"
     "       deskbox files ls ID PATH [--json]\n"
     "       deskbox files rm ID PATH [-r]\n"
     "PATH is absolute, inside the sandbox; files get writes to stdout without -o."},
    {"windows", "usage: deskbox windows ID [--json]"},
    {"kill-processes",
     "usage: deskbox kill-processes ID\n"
     "Ends every process in the sandbox but the desktop session (agent, X server, window\n"
     "manager): the way back for a sandbox at its process or memory limit."},
    {"clipboard", "usage: deskbox clipboard get ID\n       deskbox clipboard set ID TEXT|-"},
    {"cursor", "usage: deskbox cursor ID [--json]\nPrints X Y."},
    {"health", "usage: deskbox health\nPrints the server's /healthz answer."},
    {"demo",
     "usage: deskbox demo [--template minimal] [--runtime R] [--size WxH] [-o demo.png] [--keep]\n"
     "         [--wait SECONDS] [--start-terminal-after SECONDS]\n"
     "Creates a sandbox, types a greeting into a terminal, saves a screenshot and prints the\n"
     "viewer URL; kills the sandbox unless --keep. A terminal is started with xterm if none\n"
     "shows within --start-terminal-after seconds (default 3); --wait bounds the whole wait\n"
     "(default 120)."},
    {"mcp",
     "usage: deskbox mcp [--sandbox ID [--token CONTROL_TOKEN] | --create TEMPLATE [--runtime R]]\n"
     "MCP over stdio for desktop MCP clients, bridged to deskboxd's /mcp. --sandbox: the\n"
     "session's sandbox (with --token, the session may use only that one); --create: a new\n"
     "sandbox, killed when stdin ends."},
};

std::string read_all(std::istream& in) {
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Prints rows as aligned columns; the last column is not padded.
void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
    std::vector<std::size_t> widths;
    for (const auto& row : rows) {
        if (widths.size() < row.size()) widths.resize(row.size(), 0);
        for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
    }
    for (const auto& row : rows) {
        std::string line;
        for (std::size_t i = 0; i < row.size(); ++i) {
            line += row[i];
            if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
        }
        out << line << "\n";
    }
}

std::string size_text(const json& value) {
    if (value.is_array() && value.size() == 2) return text_of(value[0]) + "x" + text_of(value[1]);
    if (value.is_object() && value.contains("width") && value.contains("height")) {
        return text_of(value["width"]) + "x" + text_of(value["height"]);
    }
    return text_of(value);
}

std::string mode_text(const json& value) {
    if (value.is_number_integer()) {
        std::ostringstream octal;
        octal << std::oct << value.get<long long>();
        return "0" + octal.str();
    }
    return text_of(value);
}

// --- sandboxes ---------------------------------------------------------------------------

int cmd_ports(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "ports", tokens, {{"--json", "", false}});
    c.expect(1, 1);
    const std::string& id = c.args.positional[0];
    json sandbox = context.client().get_json("/v1/sandboxes/" + id);
    json ports = sandbox.value("ports", json::array());
    if (c.args.has("--json")) {
        context.out << ports.dump(2) << "\n";
        return kExitOk;
    }
    if (!ports.is_array() || ports.empty()) {
        context.out << "no program listens on a TCP port in " << id << "\n";
        return kExitOk;
    }
    const std::string token = sandbox.value("control_token", "");
    for (const auto& p : ports) {
        std::string addresses;
        for (const auto& a : p.value("addresses", json::array()))
            addresses += (addresses.empty() ? "" : ",") + a.get<std::string>();
        context.out << p.value("port", 0) << "\t" << addresses << "\t"
                    << context.client().server().to_string() << p.value("path", "")
                    << "?token=" << token;
        if (!p.value("reachable", true))
            context.out << "\t(not reachable: listens on loopback only)";
        context.out << "\n";
    }
    return kExitOk;
}

int cmd_create(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "create", tokens,
              {{"--template", ""},
               {"--runtime", ""},
               {"--size", ""},
               {"--timeout", ""},
               {"--dpi", ""},
               {"--api-size", ""},
               {"--on-timeout", ""},
               {"--memory", ""},
               {"--cpus", ""},
               {"--pids", ""},
               {"--disk", ""},
               {"--env", ""},
               {"--meta", ""},
               {"--network", ""},
               {"--allow", ""},
               {"--deny", ""},
               {"--egress-kbps", ""},
               {"--json", "", false}});
    c.expect(0, 0);
    json body = create_request(c.args);
    json created = context.client().post_json("/v1/sandboxes", body);
    if (c.args.has("--json")) {
        context.out << created.dump(2) << "\n";
    } else {
        context.out << required_string(created, "id", "the create answer") << "\n";
    }
    return kExitOk;
}

int cmd_list(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "list", tokens, {{"--json", "", false}});
    c.expect(0, 0);
    json answer = context.client().get_json("/v1/sandboxes");
    if (c.args.has("--json")) {
        context.out << answer.dump(2) << "\n";
        return kExitOk;
    }
    std::vector<std::vector<std::string>> rows = {
        {"ID", "STATE", "TEMPLATE", "RUNTIME", "SIZE", "EXPIRES"}};
    const json& sandboxes =
        answer.is_object() && answer.contains("sandboxes") ? answer["sandboxes"] : answer;
    if (!sandboxes.is_array()) {
        throw std::runtime_error("unexpected answer from deskboxd: no \"sandboxes\" list");
    }
    for (const auto& sandbox : sandboxes) {
        rows.push_back({text_of(sandbox, "id"), text_of(sandbox, "state"),
                        text_of(sandbox, "template"), text_of(sandbox, "runtime"),
                        sandbox.contains("resolution") ? size_text(sandbox["resolution"]) : "-",
                        text_of(sandbox, "expires_at")});
    }
    print_table(context.out, rows);
    return kExitOk;
}

int cmd_inspect(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "inspect", tokens, {});
    c.expect(1, 1);
    context.out << context.client().get_json(sandbox_path(c.arg(0))).dump(2) << "\n";
    return kExitOk;
}

int cmd_kill(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "kill", tokens, {});
    c.expect(1, SIZE_MAX);
    int status = kExitOk;
    for (const auto& id : c.args.positional) {
        try {
            context.client().delete_json(sandbox_path(id));
            context.out << id << "\n";
        } catch (const ApiError& error) {
            // One missing sandbox should not stop the others from being killed.
            context.err << "deskbox: error: " << id << ": " << error.what() << "\n";
            status = kExitApiError;
        }
    }
    return status;
}

int cmd_lifecycle(Context& context, const std::vector<std::string>& tokens, const char* name) {
    const bool pause = std::string(name) == "pause";
    std::vector<OptionSpec> options;
    // pause --snapshot: a microVM is saved to disk (survives a server restart).
    if (pause) options.push_back({"--snapshot", "", false});
    Command c(context, name, tokens, options);
    c.expect(1, 1);
    json body = nullptr;
    if (pause && c.args.has("--snapshot")) body = json{{"snapshot", true}};
    context.client().post_json(sandbox_path(c.arg(0)) + "/" + name, body);
    context.out << c.arg(0) << "\n";
    return kExitOk;
}

int cmd_timeout(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "timeout", tokens, {});
    c.expect(2, 2);
    long long seconds = parse_integer(c.arg(1), "SECONDS", 0, 365LL * 24 * 3600);
    json answer = context.client().post_json(sandbox_path(c.arg(0)) + "/timeout",
                                             json{{"timeout_s", seconds}});
    if (answer.is_object() && answer.contains("expires_at")) {
        context.out << c.arg(0) << " expires at " << text_of(answer, "expires_at") << "\n";
    } else {
        context.out << c.arg(0) << "\n";
    }
    return kExitOk;
}

// --- desktop -----------------------------------------------------------------------------

int cmd_screenshot(Context& context, const std::vector<std::string>& tokens) {
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

int cmd_act(Context& context, const std::vector<std::string>& tokens) {
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

int cmd_click(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "click", tokens, plus_targets({{"--button", ""}, {"--count", ""}}));
    c.expect(1, 3);
    json action = pointer_action(c, "click");
    if (auto button = c.args.get("--button")) action["button"] = *button;
    if (auto count = c.args.get("--count"))
        action["count"] = parse_integer(*count, "--count", 1, 3);
    print_target(context, post_actions(context, c.arg(0), action));
    return kExitOk;
}

int cmd_move(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "move", tokens, plus_targets({}));
    c.expect(1, 3);
    print_target(context, post_actions(context, c.arg(0), pointer_action(c, "move")));
    return kExitOk;
}

int cmd_scroll(Context& context, const std::vector<std::string>& tokens) {
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

int cmd_type(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "type", tokens, {});
    c.expect(2, 2);
    post_actions(context, c.arg(0), {{"type", "type"}, {"text", c.arg(1)}});
    return kExitOk;
}

int cmd_key(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "key", tokens, {});
    c.expect(2, 2);
    post_actions(context, c.arg(0), {{"type", "key"}, {"keys", c.arg(1)}});
    return kExitOk;
}

int cmd_kill_processes(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "kill-processes", tokens, {});
    c.expect(1, 1);
    json answer =
        context.client().post_json(sandbox_path(c.arg(0)) + "/processes/kill", json::object());
    context.out << "killed " << answer.value("killed", 0) << " processes";
    if (answer.value("refused", 0) > 0) context.out << " (" << answer["refused"] << " refused)";
    context.out << "\n";
    return kExitOk;
}

int cmd_windows(Context& context, const std::vector<std::string>& tokens) {
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

int cmd_cursor(Context& context, const std::vector<std::string>& tokens) {
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

int cmd_clipboard(Context& context, const std::vector<std::string>& tokens) {
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

// --- commands and files ------------------------------------------------------------------

int cmd_exec(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "exec", tokens,
              {{"--shell", ""},
               {"--env", ""},
               {"--cwd", ""},
               {"--timeout", ""},
               {"--background", "", false},
               {"--stdin", "-i", false}},
              1);
    c.expect(1, 1);
    json body = json::object();
    auto shell = c.args.get("--shell");
    if (shell && !c.args.rest.empty()) {
        throw UsageError("give either --shell LINE or a command, not both", usage_of("exec"));
    }
    if (shell) {
        body["cmd"] = *shell;
    } else if (!c.args.rest.empty()) {
        body["argv"] = c.args.rest;
    } else {
        throw UsageError("no command given", usage_of("exec"));
    }
    std::map<std::string, std::string> env;
    for (const auto& entry : c.args.all("--env")) {
        auto [name, value] = parse_key_value(entry, "--env");
        env.insert_or_assign(name, value);
    }
    if (!env.empty()) body["env"] = env;
    if (auto cwd = c.args.get("--cwd")) body["cwd"] = *cwd;
    // The HTTP exchange must outlive the command: give it the command's timeout plus slack,
    // or an hour when the server's own default applies.
    auto http_timeout = std::chrono::milliseconds(std::chrono::hours(1));
    if (auto timeout = c.args.get("--timeout")) {
        long long seconds = parse_integer(*timeout, "--timeout", 1, 7LL * 24 * 3600);
        body["timeout_s"] = seconds;
        http_timeout = std::chrono::seconds(seconds + 60);
    }
    bool background = c.args.has("--background");
    if (background) body["background"] = true;
    if (c.args.has("--stdin")) body["stdin"] = read_all(context.in);

    client::ApiClient& api = context.client();
    api.set_request_timeout(http_timeout);
    json answer = api.post_json(sandbox_path(c.arg(0)) + "/commands", body);
    if (background) {
        context.out << text_of(answer, "pid") << "\n";
        return kExitOk;
    }
    if (answer.contains("stdout") && answer["stdout"].is_string()) {
        context.out << answer["stdout"].get<std::string>();
    }
    context.out.flush();
    if (answer.contains("stderr") && answer["stderr"].is_string()) {
        context.err << answer["stderr"].get<std::string>();
    }
    bool timed_out = answer.value("timed_out", false);
    if (timed_out) context.err << "deskbox: the command timed out\n";
    const json* code = answer.contains("exit_code") ? &answer["exit_code"] : nullptr;
    if (code && code->is_number_integer()) {
        long long value = code->get<long long>();
        // A shell's convention: a code outside 0..255 (a signal, say) cannot be passed on as is.
        return value >= 0 && value <= 255 ? static_cast<int>(value) : 128 + 1;
    }
    if (timed_out) return 124;  // like timeout(1)
    throw std::runtime_error("unexpected answer from deskboxd: no \"exit_code\"");
}

std::string files_target(const std::string& id, const std::string& path) {
    if (path.empty() || path.front() != '/') {
        throw UsageError("PATH must be absolute, got \"" + path + "\"", usage_of("files"));
    }
    return sandbox_path(id) + "/files" + Query().add("path", path).str();
}

int cmd_files(Context& context, const std::vector<std::string>& tokens) {
    static const std::vector<std::string> kSubcommands = {"get", "put", "ls", "rm"};
    if (tokens.empty() ||
        std::find(kSubcommands.begin(), kSubcommands.end(), tokens[0]) == kSubcommands.end()) {
        if (!tokens.empty() && (tokens[0] == "--help" || tokens[0] == "-h")) {
            throw ShowHelp{usage_of("files") + "\n"};
        }
        throw UsageError("expected get, put, ls or rm", usage_of("files"));
    }
    const std::string& sub = tokens[0];
    std::vector<std::string> rest(tokens.begin() + 1, tokens.end());
    if (sub == "get") {
        Command c(context, "files", rest, {{"--output", "-o"}});
        c.expect(2, 2);
        client::Response file = context.client().get_bytes(files_target(c.arg(0), c.arg(1)));
        write_output(context, c.args.get("--output").value_or("-"), file.body);
    } else if (sub == "put") {
        Command c(context, "files", rest, {{"--mode", ""}});
        c.expect(3, 3);
        std::string target = files_target(c.arg(0), c.arg(2));
        if (auto mode = c.args.get("--mode")) {
            if (mode->empty() || mode->size() > 5 ||
                mode->find_first_not_of("01234567") != std::string::npos) {
                throw UsageError("--mode: expected octal digits like 0644, got \"" + *mode + "\"");
            }
            target += "&mode=" + client::percent_encode(*mode);
        }
        std::string bytes = c.arg(1) == "-" ? read_all(context.in) : read_local_file(c.arg(1));
        context.client().put_bytes(target, std::move(bytes));
    } else if (sub == "ls") {
        Command c(context, "files", rest, {{"--json", "", false}});
        c.expect(2, 2);
        client::Response listing =
            context.client().call(Method::get, files_target(c.arg(0), c.arg(1)));
        std::string type = listing.header("Content-Type").value_or("");
        if (type.find("json") == std::string::npos) {
            throw std::runtime_error(c.arg(1) + " is a file, not a directory (use 'files get')");
        }
        json answer = listing.json();
        if (c.args.has("--json")) {
            context.out << answer.dump(2) << "\n";
            return kExitOk;
        }
        if (!answer.is_object() || !answer.contains("entries") || !answer["entries"].is_array()) {
            throw std::runtime_error("unexpected answer from deskboxd: no \"entries\" list");
        }
        std::vector<std::vector<std::string>> rows = {{"TYPE", "SIZE", "MODE", "NAME"}};
        for (const auto& entry : answer["entries"]) {
            rows.push_back({text_of(entry, "type"), text_of(entry, "size"),
                            entry.contains("mode") ? mode_text(entry["mode"]) : "-",
                            text_of(entry, "name")});
        }
        print_table(context.out, rows);
    } else {
        Command c(context, "files", rest, {{"--recursive", "-r", false}});
        c.expect(2, 2);
        std::string target = files_target(c.arg(0), c.arg(1));
        if (c.args.has("--recursive")) target += "&recursive=true";
        context.client().call(Method::del, target);
    }
    return kExitOk;
}

int cmd_health(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "health", tokens, {});
    c.expect(0, 0);
    client::Response answer = context.client().call(Method::get, "/healthz", {}, {}, "*/*");
    context.out << answer.body;
    if (answer.body.empty() || answer.body.back() != '\n') context.out << "\n";
    return kExitOk;
}

using CommandFunction = std::function<int(Context&, const std::vector<std::string>&)>;

const std::map<std::string, CommandFunction>& commands() {
    static const std::map<std::string, CommandFunction> table = {
        {"create", cmd_create},
        {"ports", cmd_ports},
        {"list", cmd_list},
        {"inspect", cmd_inspect},
        {"kill", cmd_kill},
        {"pause", [](Context& c, const auto& t) { return cmd_lifecycle(c, t, "pause"); }},
        {"resume", [](Context& c, const auto& t) { return cmd_lifecycle(c, t, "resume"); }},
        {"timeout", cmd_timeout},
        {"screenshot", cmd_screenshot},
        {"act", cmd_act},
        {"click", cmd_click},
        {"move", cmd_move},
        {"scroll", cmd_scroll},
        {"type", cmd_type},
        {"key", cmd_key},
        {"windows", cmd_windows},
        {"kill-processes", cmd_kill_processes},
        {"cursor", cmd_cursor},
        {"clipboard", cmd_clipboard},
        {"exec", cmd_exec},
        {"files", cmd_files},
        {"health", cmd_health},
        {"wait", command_wait},
        {"locate", command_locate},
        {"ocr", command_ocr},
        {"compare", command_compare},
        {"demo", command_demo},
        {"mcp", command_mcp},
    };
    return table;
}

}  // namespace

// --- shared helpers ------------------------------------------------------------------------

std::string read_local_file(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
    std::ostringstream bytes;
    bytes << file.rdbuf();
    if (file.bad()) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
    return std::move(bytes).str();
}

Command::Command(Context& context, std::string name, const std::vector<std::string>& tokens,
                 std::vector<OptionSpec> options, std::optional<std::size_t> rest_after)
    : name_(std::move(name)) {
    options.push_back({"--server", ""});
    options.push_back({"--api-key", ""});
    options.push_back({"--help", "-h", false});
    args = parse_args(name_, tokens, options, rest_after);
    if (args.has("--help")) throw ShowHelp{usage_of(name_) + "\n"};
    if (auto server = args.get("--server")) context.options.server = *server;
    if (auto key = args.get("--api-key")) context.options.api_key = *key;
}

void Command::expect(std::size_t min, std::size_t max) const {
    expect_positionals(args, min, max, usage_of(name_));
}

const std::string& usage_of(const std::string& command) {
    static const std::string none;
    auto it = kUsage.find(command);
    return it == kUsage.end() ? none : it->second;
}

client::ApiClient& Context::client() {
    if (!client_) {
        try {
            client_ = std::make_unique<client::ApiClient>(options);
        } catch (const std::invalid_argument& error) {
            throw UsageError(std::string("--server: ") + error.what());
        }
    }
    return *client_;
}

std::string sandbox_path(const std::string& id) {
    if (id.empty()) throw UsageError("the sandbox ID is empty");
    return "/v1/sandboxes/" + client::percent_encode(id);
}

void write_output(Context& context, const std::string& path, const std::string& bytes) {
    if (path == "-") {
        context.out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        context.out.flush();
        return;
    }
    // Written beside the target and renamed, so a failure never leaves a truncated file.
    try {
        atomic_file::write(path, bytes);
    } catch (const std::system_error& e) {
        throw std::runtime_error("cannot write " + path + ": " + e.code().message());
    }
}

std::string text_of(const json& value) {
    if (value.is_null()) return "-";
    if (value.is_string()) return value.get<std::string>();
    return value.dump();
}

std::string text_of(const json& object, const char* key) {
    if (!object.is_object() || !object.contains(key)) return "-";
    return text_of(object[key]);
}

std::string required_string(const json& object, const char* key, const std::string& where) {
    if (!object.is_object() || !object.contains(key) || !object[key].is_string() ||
        object[key].get<std::string>().empty()) {
        throw std::runtime_error("unexpected answer from deskboxd: " + where + " has no \"" + key +
                                 "\"");
    }
    return object[key].get<std::string>();
}

json create_request(const ParsedArgs& args) {
    json body = {{"template", args.get("--template").value_or("minimal")},
                 {"runtime", args.get("--runtime").value_or("container")}};
    auto [width, height] = parse_size(args.get("--size").value_or("1280x800"), "--size");
    body["resolution"] = {width, height};
    body["timeout_s"] =
        parse_integer(args.get("--timeout").value_or("300"), "--timeout", 1, 365LL * 24 * 3600);
    if (auto dpi = args.get("--dpi")) body["dpi"] = parse_integer(*dpi, "--dpi", 1, 1000);
    if (auto api_size = args.get("--api-size")) {
        auto [api_width, api_height] = parse_size(*api_size, "--api-size");
        body["api_resolution"] = {api_width, api_height};
    }
    if (auto on_timeout = args.get("--on-timeout")) {
        if (*on_timeout != "kill" && *on_timeout != "pause") {
            throw UsageError("--on-timeout: expected kill or pause, got \"" + *on_timeout + "\"");
        }
        body["on_timeout"] = *on_timeout;
    }
    json limits = json::object();
    if (auto memory = args.get("--memory")) {
        limits["memory_mb"] = parse_integer(*memory, "--memory", 1, 1LL << 30);
    }
    if (auto cpus = args.get("--cpus")) limits["cpus"] = parse_number(*cpus, "--cpus", 0.01, 4096);
    if (auto pids = args.get("--pids"))
        limits["pids"] = parse_integer(*pids, "--pids", 1, 1LL << 22);
    if (auto disk = args.get("--disk"))
        limits["disk_mb"] = parse_integer(*disk, "--disk", 1, 1LL << 22);
    if (auto kbps = args.get("--egress-kbps"))
        limits["egress_kbps"] = parse_integer(*kbps, "--egress-kbps", 1, 1LL << 40);
    if (!limits.empty()) body["limits"] = limits;
    auto allow = args.all("--allow"), deny = args.all("--deny");
    if (auto network = args.get("--network")) {
        if (*network != "on" && *network != "off")
            throw UsageError("--network: expected on or off, got \"" + *network + "\"");
        if (*network == "off" && (!allow.empty() || !deny.empty()))
            throw UsageError("--network off reaches nothing: drop --allow/--deny");
        body["network"] = *network == "on";
    }
    if (!allow.empty() || !deny.empty()) {
        json policy = json::object();
        if (!allow.empty()) policy["allow"] = allow;
        if (!deny.empty()) policy["deny"] = deny;
        body["network"] = policy;
    }
    std::map<std::string, std::string> env, metadata;
    for (const auto& entry : args.all("--env")) {
        auto [name, value] = parse_key_value(entry, "--env");
        env.insert_or_assign(name, value);
    }
    for (const auto& entry : args.all("--meta")) {
        auto [name, value] = parse_key_value(entry, "--meta");
        metadata.insert_or_assign(name, value);
    }
    if (!env.empty()) body["env"] = env;
    if (!metadata.empty()) body["metadata"] = metadata;
    return body;
}

int run_cli(const std::vector<std::string>& args, const Environment& environment, std::ostream& out,
            std::ostream& err, std::istream& in) {
    Context context(out, err, in);
    if (environment.server) context.options.server = *environment.server;
    if (environment.api_key) context.options.api_key = *environment.api_key;
    try {
        std::size_t i = 0;
        for (; i < args.size() && args[i].size() > 1 && args[i][0] == '-'; ++i) {
            const std::string& token = args[i];
            auto value_of = [&](const std::string& name) -> std::optional<std::string> {
                if (token == name) {
                    if (i + 1 >= args.size()) throw UsageError(name + " needs a value");
                    return args[++i];
                }
                if (token.rfind(name + "=", 0) == 0) return token.substr(name.size() + 1);
                return std::nullopt;
            };
            if (token == "--help" || token == "-h") throw ShowHelp{kMainUsage};
            if (token == "--version") {
                out << "deskbox 0.1\n";
                return kExitOk;
            }
            if (auto server = value_of("--server")) {
                context.options.server = *server;
            } else if (auto key = value_of("--api-key")) {
                context.options.api_key = *key;
            } else {
                throw UsageError("unknown option " + token);
            }
        }
        if (i == args.size()) throw UsageError("no command given");
        const std::string& name = args[i];
        std::vector<std::string> tokens(args.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                        args.end());
        if (name == "help") {
            if (!tokens.empty() && kUsage.count(tokens[0]))
                throw ShowHelp{kUsage.at(tokens[0]) + "\n"};
            throw ShowHelp{kMainUsage};
        }
        auto command = commands().find(name);
        if (command == commands().end()) throw UsageError("unknown command \"" + name + "\"");
        return command->second(context, tokens);
    } catch (const ShowHelp& help) {
        out << help.text;
        return kExitOk;
    } catch (const UsageError& error) {
        err << "deskbox: " << error.what() << "\n";
        err << (error.usage().empty() ? "Run 'deskbox help' for usage." : error.usage()) << "\n";
        return kExitUsage;
    } catch (const client::ApiError& error) {
        err << "deskbox: error: " << error.what() << "\n";
        if (error.status() == 401 && context.options.api_key.empty()) {
            err << "deskbox: this server needs an API key: pass --api-key or set DESKBOX_API_KEY\n";
        }
        return kExitApiError;
    } catch (const client::ConnectionError& error) {
        err << "deskbox: " << error.what() << "\n";
        return kExitApiError;
    } catch (const json::type_error& error) {
        if (error.id == 316) {  // dump() of a string that is not UTF-8
            err << "deskbox: an argument or input is not valid UTF-8 text\n";
            return kExitUsage;
        }
        err << "deskbox: error: unexpected answer from deskboxd: " << error.what() << "\n";
        return kExitApiError;
    } catch (const std::exception& error) {
        err << "deskbox: error: " << error.what() << "\n";
        return kExitApiError;
    }
}

}  // namespace deskbox::cli
