// Sandbox lifecycle commands: create, list, inspect, kill, pause, resume, timeout, ports.
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

int command_ports(Context& context, const std::vector<std::string>& tokens) {
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

int command_create(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "create", tokens,
              {{"--template", ""},   {"--runtime", ""},     {"--size", ""},
               {"--timeout", ""},    {"--dpi", ""},         {"--api-size", ""},
               {"--on-timeout", ""}, {"--memory", ""},      {"--cpus", ""},
               {"--pids", ""},       {"--disk", ""},        {"--env", ""},
               {"--meta", ""},       {"--volume", ""},      {"--snapshot", ""},
               {"--network", ""},    {"--allow", ""},       {"--deny", ""},
               {"--inject", ""},     {"--egress-kbps", ""}, {"--auto-resume", "", false},
               {"--proxy", ""},      {"--json", "", false}});
    c.expect(0, 0);
    json body = create_request(c.args);
    // The server bounds a create: the boot, then its template's ready condition (at most 600 s).
    context.client().set_request_timeout(std::chrono::minutes(15));
    json created = context.client().post_json("/v1/sandboxes", body);
    if (c.args.has("--json")) {
        context.out << created.dump(2) << "\n";
    } else {
        context.out << required_string(created, "id", "the create answer") << "\n";
    }
    return kExitOk;
}

int command_list(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "list", tokens, {{"--json", "", false}});
    c.expect(0, 0);
    json answer = context.client().get_json("/v1/sandboxes");
    if (c.args.has("--json")) {
        context.out << answer.dump(2) << "\n";
        return kExitOk;
    }
    const json& sandboxes =
        answer.is_object() && answer.contains("sandboxes") ? answer["sandboxes"] : answer;
    if (!sandboxes.is_array()) {
        throw std::runtime_error("unexpected answer from deskboxd: no \"sandboxes\" list");
    }
    // A cluster names each sandbox's node.
    const bool clustered = std::any_of(sandboxes.begin(), sandboxes.end(),
                                       [](const json& s) { return s.contains("node"); });
    std::vector<std::vector<std::string>> rows = {
        {"ID", "STATE", "TEMPLATE", "RUNTIME", "SIZE", "EXPIRES"}};
    if (clustered) rows[0].push_back("NODE");
    for (const auto& sandbox : sandboxes) {
        rows.push_back({text_of(sandbox, "id"), text_of(sandbox, "state"),
                        text_of(sandbox, "template"), text_of(sandbox, "runtime"),
                        sandbox.contains("resolution") ? size_text(sandbox["resolution"]) : "-",
                        text_of(sandbox, "expires_at")});
        if (clustered) rows.back().push_back(text_of(sandbox, "node"));
    }
    print_table(context.out, rows);
    return kExitOk;
}

int command_inspect(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "inspect", tokens, {});
    c.expect(1, 1);
    context.out << context.client().get_json(sandbox_path(c.arg(0))).dump(2) << "\n";
    return kExitOk;
}

int command_kill(Context& context, const std::vector<std::string>& tokens) {
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

int command_lifecycle(Context& context, const std::vector<std::string>& tokens, const char* name) {
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

int command_timeout(Context& context, const std::vector<std::string>& tokens) {
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

namespace {

// --inject DOMAIN[/PATH]:HEADER=VALUE, VALUE inline or secret:NAME: one credential rule.
json parse_inject_arg(const std::string& text) {
    const auto colon = text.find(':');
    const auto equals = colon == std::string::npos ? colon : text.find('=', colon);
    if (colon == 0 || equals == std::string::npos || equals == colon + 1)
        throw UsageError("--inject: expected DOMAIN[/PATH]:HEADER=VALUE, got '" + text + "'",
                         usage_of("create"));
    const std::string target = text.substr(0, colon);
    const auto slash = target.find('/');
    json rule = {
        {"domain", target.substr(0, slash)},
        {"headers", {{text.substr(colon + 1, equals - colon - 1), text.substr(equals + 1)}}}};
    if (slash != std::string::npos) rule["path"] = target.substr(slash);
    return rule;
}

// --network on|off, --allow, --deny, --inject and --proxy as the create request's `network`.
std::optional<json> network_request(const ParsedArgs& args) {
    auto allow = args.all("--allow"), deny = args.all("--deny"), inject = args.all("--inject");
    auto proxy = args.get("--proxy");
    std::optional<json> out;
    if (auto network = args.get("--network")) {
        if (*network != "on" && *network != "off")
            throw UsageError("--network: expected on or off, got \"" + *network + "\"");
        if (*network == "off" && (!allow.empty() || !deny.empty() || !inject.empty() || proxy))
            throw UsageError("--network off reaches nothing: drop --allow/--deny/--inject/--proxy");
        out = *network == "on";
    }
    if (!allow.empty() || !deny.empty() || !inject.empty() || proxy) {
        json policy = json::object();
        if (!allow.empty()) policy["allow"] = allow;
        if (!deny.empty()) policy["deny"] = deny;
        for (const auto& entry : inject) policy["rules"].push_back(parse_inject_arg(entry));
        if (proxy) policy["proxy"] = *proxy;
        out = policy;
    }
    return out;
}

}  // namespace

int command_network(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "network", tokens,
              {{"--allow", ""},
               {"--deny", ""},
               {"--inject", ""},
               {"--egress-kbps", ""},
               {"--proxy", ""},
               {"--default-proxy", "", false},
               {"--allow-all", "", false},
               {"--no-deny", "", false},
               {"--no-rules", "", false}});
    c.expect(1, 1);
    json change = json::object();
    auto part = [&](const char* name, const char* flag, const char* clear, json value) {
        if (c.args.has(clear) && !value.empty())
            throw UsageError(std::string(clear) + " and " + flag + " contradict each other",
                             usage_of("network"));
        if (c.args.has(clear)) change[name] = nullptr;
        if (!value.empty()) change[name] = std::move(value);
    };
    json rules = json::array();
    for (const auto& entry : c.args.all("--inject")) rules.push_back(parse_inject_arg(entry));
    part("allow", "--allow", "--allow-all", json(c.args.all("--allow")));
    part("deny", "--deny", "--no-deny", json(c.args.all("--deny")));
    part("rules", "--inject", "--no-rules", rules);
    const auto proxy = c.args.get("--proxy");
    part("proxy", "--proxy", "--default-proxy", proxy ? json(*proxy) : json());  // null: empty
    if (auto kbps = c.args.get("--egress-kbps"))
        change["egress_kbps"] = parse_integer(*kbps, "--egress-kbps", 0, 100'000'000);
    if (change.empty()) throw UsageError("nothing to change", usage_of("network"));
    json answer = context.client().patch_json(sandbox_path(c.arg(0)) + "/network", change);
    context.out << answer.dump(2) << "\n";
    return kExitOk;
}

json create_request(const ParsedArgs& args) {
    json body = json::object();
    // From a snapshot, its template and size unless asked for (the server refuses others).
    const auto snapshot = args.get("--snapshot");
    if (snapshot) body["snapshot"] = *snapshot;
    if (auto name = args.get("--template"); name || !snapshot)
        body["template"] = name.value_or("minimal");
    // No --runtime: the server's default (--default-runtime).
    if (auto runtime = args.get("--runtime")) body["runtime"] = *runtime;
    if (auto size = args.get("--size"); size || !snapshot) {
        auto [width, height] = parse_size(size.value_or("1280x800"), "--size");
        body["resolution"] = {width, height};
    }
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
    if (args.has("--auto-resume")) {
        if (args.get("--on-timeout") == "kill")
            throw UsageError(
                "--auto-resume resumes a sandbox its timeout paused: drop --on-timeout kill");
        body["auto_resume"] = true;
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
    if (auto network = network_request(args)) body["network"] = *network;
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
    for (const auto& entry : args.all("--volume"))
        body["volumes"].push_back(parse_volume_arg(entry));
    return body;
}

}  // namespace deskbox::cli
