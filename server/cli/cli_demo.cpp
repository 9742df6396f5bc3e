// `deskbox demo`: the shortest path from "deskboxd is running" to "I see a desktop an agent
// typed into" — create, find (or start) a terminal, click, type Unicode, screenshot, viewer URL.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <iostream>
#include <iterator>
#include <thread>
#include <utility>

#include "server/cli/cli_commands.hpp"

namespace deskbox::cli {

using client::ApiError;
using client::Query;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

const char* const kGreeting = "echo \"Hello from deskbox — Grêmio 日本語\"";
constexpr auto kPollInterval = std::chrono::milliseconds(250);

// Kills the demo's sandbox on every way out (errors included) unless asked to keep it.
class SandboxGuard {
  public:
    SandboxGuard(Context& context, std::string id) : context_(context), id_(std::move(id)) {}
    ~SandboxGuard() {
        if (id_.empty()) return;
        try {
            context_.client().delete_json(sandbox_path(id_));
            context_.err << "deskbox demo: killed sandbox " << id_ << "\n";
        } catch (const std::exception& error) {
            context_.err << "deskbox demo: could not kill sandbox " << id_ << ": " << error.what()
                         << " (it expires at its timeout)\n";
        }
    }
    SandboxGuard(const SandboxGuard&) = delete;
    SandboxGuard& operator=(const SandboxGuard&) = delete;
    void keep() { id_.clear(); }
    // The normal way out: a failure here is the command's failure.
    void kill_now() {
        std::string id = std::exchange(id_, {});
        context_.client().delete_json(sandbox_path(id));
    }

  private:
    Context& context_;
    std::string id_;
};

std::string lowercase(std::string text) {
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return text;
}

bool is_terminal(const json& window) {
    if (!window.is_object()) return false;
    if (!window.value("visible", true)) return false;
    if (window.value("width", 0) <= 0 || window.value("height", 0) <= 0) return false;
    std::string names = lowercase(window.value("class", std::string()) + " " +
                                  window.value("title", std::string()));
    for (const char* word : {"term", "rxvt", "konsole", "alacritty", "kitty"}) {
        if (names.find(word) != std::string::npos) return true;
    }
    return false;
}

// The active terminal if there is one, else the first.
std::optional<json> find_terminal(const json& answer) {
    const json& windows =
        answer.is_object() && answer.contains("windows") ? answer["windows"] : answer;
    if (!windows.is_array()) return std::nullopt;
    std::optional<json> found;
    for (const auto& window : windows) {
        if (!is_terminal(window)) continue;
        if (window.value("active", false)) return window;
        if (!found) found = window;
    }
    return found;
}

// The sandbox and its session are still coming up: worth asking again.
bool not_ready_yet(const ApiError& error) {
    return error.status() == 409 || error.status() == 425 || error.status() == 503;
}

void wait_until_running(Context& context, const std::string& id, Clock::time_point deadline) {
    static const std::vector<std::string> kStarting = {"creating", "starting", "booting", "pending",
                                                       "provisioning"};
    static const std::vector<std::string> kDead = {"failed", "error", "stopped", "killed",
                                                   "exited", "dead",  "expired", "paused"};
    std::string state;
    while (true) {
        json sandbox = context.client().get_json(sandbox_path(id));
        state = sandbox.is_object() ? sandbox.value("state", std::string()) : std::string();
        if (std::find(kDead.begin(), kDead.end(), state) != kDead.end()) {
            std::string reason = text_of(sandbox, "error");
            throw std::runtime_error("sandbox " + id + " is " + state +
                                     (reason == "-" ? "" : ": " + reason));
        }
        if (std::find(kStarting.begin(), kStarting.end(), state) == kStarting.end()) return;
        if (Clock::now() > deadline) {
            throw std::runtime_error("sandbox " + id + " is still " + state + " after --wait");
        }
        std::this_thread::sleep_for(kPollInterval);
    }
}

// xterm first (every template has it so far), then what a template without it may have.
void launch_terminal(Context& context, const std::string& id) {
    static const char* const kTerminals[] = {"xterm", "x-terminal-emulator", "xfce4-terminal"};
    for (std::size_t i = 0; i < std::size(kTerminals); ++i) {
        context.err << "deskbox demo: no terminal window yet, starting " << kTerminals[i] << "\n";
        try {
            context.client().post_json(sandbox_path(id) + "/commands",
                                       json{{"argv", {kTerminals[i]}}, {"background", true}});
            return;
        } catch (const ApiError& error) {
            if (i + 1 == std::size(kTerminals)) throw;
            context.err << "deskbox demo: " << error.what() << "\n";
        }
    }
}

json wait_for_terminal(Context& context, const std::string& id, Clock::duration start_after,
                       Clock::time_point deadline) {
    const auto started_waiting = Clock::now();
    bool launched = false;
    std::string last_seen = "no answer yet";
    while (true) {
        try {
            json answer = context.client().get_json(sandbox_path(id) + "/windows");
            if (auto terminal = find_terminal(answer)) return *terminal;
            last_seen = answer.dump();
        } catch (const ApiError& error) {
            if (!not_ready_yet(error)) throw;
            last_seen = error.what();
        }
        if (!launched && Clock::now() - started_waiting >= start_after) {
            launch_terminal(context, id);
            launched = true;
            continue;
        }
        if (Clock::now() > deadline) {
            if (last_seen.size() > 400) last_seen = last_seen.substr(0, 400) + "...";
            throw std::runtime_error("no terminal window appeared in sandbox " + id +
                                     " (last windows answer: " + last_seen + ")");
        }
        std::this_thread::sleep_for(kPollInterval);
    }
}

// Clicks into the middle of `terminal` and types the greeting with a Return.
void type_greeting(Context& context, const std::string& id, const json& terminal) {
    const int x = terminal.value("x", 0) + terminal.value("width", 0) / 2;
    const int y = terminal.value("y", 0) + terminal.value("height", 0) / 2;
    context.err << "deskbox demo: typing into \"" << terminal.value("title", std::string("?"))
                << "\" at " << x << "," << y << "\n";
    json actions = {{"actions",
                     {{{"type", "click"}, {"x", x}, {"y", y}},
                      {{"type", "type"}, {"text", kGreeting}},
                      {{"type", "key"}, {"keys", "Return"}},
                      // Time for the shell to echo before the screenshot.
                      {{"type", "wait"}, {"duration_ms", 500}}}}};
    context.client().post_json(sandbox_path(id) + "/actions", actions);
}

// The sandbox, its viewer URLs (view and control tokens from the create answer) and the
// screenshot's file, on stdout.
void print_urls(Context& context, const std::string& id, const json& created,
                const std::string& output) {
    client::ApiClient& api = context.client();
    const auto token_of = [&](const char* name) {
        return created.is_object() && created.contains(name) && created[name].is_string()
                   ? created[name].get<std::string>()
                   : std::string();
    };
    const auto viewer_url = [&](const std::string& token) {
        std::string url = api.server().to_string() + "/view/" + client::percent_encode(id);
        if (!token.empty()) url += "?token=" + client::percent_encode(token);
        return url;
    };

    context.out << "sandbox:    " << id << "\n"
                << "viewer:     " << viewer_url(token_of("view_token")) << "\n";
    if (!token_of("control_token").empty())
        context.out << "control:    " << viewer_url(token_of("control_token"))
                    << " (can click and type)\n";
    context.out << "screenshot: " << output << "\n";
    context.out.flush();
}

}  // namespace

int command_demo(Context& context, const std::vector<std::string>& tokens) {
    ParsedArgs args = parse_args("demo", tokens,
                                 {{"--template", ""},
                                  {"--runtime", ""},
                                  {"--size", ""},
                                  {"--timeout", ""},
                                  {"--output", "-o"},
                                  {"--keep", "", false},
                                  {"--wait", ""},
                                  {"--start-terminal-after", ""},
                                  {"--server", ""},
                                  {"--api-key", ""},
                                  {"--help", "-h", false}});
    if (args.has("--help")) {
        context.out << usage_of("demo") << "\n";
        return kExitOk;
    }
    expect_positionals(args, 0, 0, usage_of("demo"));
    if (auto server = args.get("--server")) context.options.server = *server;
    if (auto key = args.get("--api-key")) context.options.api_key = *key;
    const std::string output = args.get("--output").value_or("demo.png");
    const auto wait =
        std::chrono::seconds(parse_integer(args.get("--wait").value_or("120"), "--wait", 1, 3600));
    const auto start_after = std::chrono::seconds(parse_integer(
        args.get("--start-terminal-after").value_or("3"), "--start-terminal-after", 0, 3600));
    json body = create_request(args);
    const auto deadline = Clock::now() + wait;

    client::ApiClient& api = context.client();
    context.err << "deskbox demo: creating a \"" << body["template"].get<std::string>()
                << "\" sandbox\n";
    api.set_request_timeout(std::chrono::minutes(15));  // the server bounds a create (ready)
    json created = api.post_json("/v1/sandboxes", body);
    const std::string id = required_string(created, "id", "the create answer");
    SandboxGuard guard(context, id);

    wait_until_running(context, id, deadline);
    context.err << "deskbox demo: sandbox " << id << " is up, waiting for a terminal window\n";
    type_greeting(context, id, wait_for_terminal(context, id, start_after, deadline));

    client::Response image =
        api.get_bytes(sandbox_path(id) + "/screenshot" + Query().add("format", "png").str());
    write_output(context, output, image.body);

    print_urls(context, id, created, output);
    if (args.has("--keep")) {
        guard.keep();
        context.err << "deskbox demo: kept; 'deskbox kill " << id << "' ends it\n";
    } else {
        guard.kill_now();
        context.err << "deskbox demo: killed sandbox " << id
                    << " (--keep keeps it for the viewer)\n";
    }
    return kExitOk;
}

}  // namespace deskbox::cli
