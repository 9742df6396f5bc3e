// deskbox snapshot create|ls|inspect|rm: sandboxes saved under a name (POST
// /v1/sandboxes/{id}/snapshots, GET/DELETE /v1/snapshots); `deskbox create --snapshot NAME` starts
// a sandbox from one, `deskbox fork SANDBOX [--count N]` starts copies of a sandbox as it is now.
#include <chrono>
#include <cstdint>

#include "server/cli/cli_commands.hpp"

namespace deskbox::cli {

using nlohmann::json;

namespace {

// A microVM's memory is saved and a fork's copies start: as long as creates may take.
constexpr auto kSaveTimeout = std::chrono::minutes(15);

std::string snapshot_path(const std::string& name) {
    if (name.empty()) throw UsageError("the snapshot name is empty");
    return "/v1/snapshots/" + client::percent_encode(name);
}

// --meta K=V (--metadata for snapshot create) as a JSON object; empty when none was given.
json metadata_of(const ParsedArgs& args, const std::string& option) {
    json metadata = json::object();
    for (const auto& entry : args.all(option)) {
        auto [name, value] = parse_key_value(entry, option);
        metadata[name] = value;
    }
    return metadata;
}

int snapshot_create(Context& context, const CommandTokens& tokens) {
    Command c(context, "snapshot", tokens, {{"--metadata", ""}, {"--json", "", false}});
    c.expect(3, 3);
    json body = {{"name", c.arg(2)}};
    if (json metadata = metadata_of(c.args, "--metadata"); !metadata.empty())
        body["metadata"] = metadata;
    context.client().set_request_timeout(kSaveTimeout);
    json answer = context.client().post_json(sandbox_path(c.arg(1)) + "/snapshots", body);
    if (c.args.has("--json"))
        context.out << answer.dump(2) << "\n";
    else
        context.out << text_of(answer, "name") << "\n";
    return kExitOk;
}

int snapshot_list(Context& context, const CommandTokens& tokens) {
    Command c(context, "snapshot", tokens, {{"--json", "", false}});
    c.expect(1, 1);
    json answer = context.client().get_json("/v1/snapshots");
    if (c.args.has("--json")) {
        context.out << answer.dump(2) << "\n";
        return kExitOk;
    }
    std::vector<std::vector<std::string>> rows = {
        {"SNAPSHOT", "KIND", "RUNTIME", "TEMPLATE", "SIZE", "FROM", "CREATED"}};
    for (const auto& s : answer.value("snapshots", json::array()))
        rows.push_back({text_of(s, "name"), text_of(s, "kind"), text_of(s, "runtime"),
                        text_of(s, "template"),
                        human_bytes(s.value("size_bytes", std::uint64_t{0})),
                        text_of(s, "source_sandbox"), text_of(s, "created_at")});
    print_table(context.out, rows);
    return kExitOk;
}

int snapshot_inspect(Context& context, const CommandTokens& tokens) {
    Command c(context, "snapshot", tokens, {});
    c.expect(2, 2);
    context.out << context.client().get_json(snapshot_path(c.arg(1))).dump(2) << "\n";
    return kExitOk;
}

int snapshot_remove(Context& context, const CommandTokens& tokens) {
    Command c(context, "snapshot", tokens, {});
    c.expect(2, SIZE_MAX);
    return delete_each(context, c, snapshot_path);
}

}  // namespace

int command_snapshot(Context& context, const CommandTokens& tokens) {
    const std::string verb = tokens.empty() ? "" : tokens[0];
    if (verb == "create") return snapshot_create(context, tokens);
    if (verb == "ls" || verb == "list") return snapshot_list(context, tokens);
    if (verb == "inspect") return snapshot_inspect(context, tokens);
    if (verb == "rm") return snapshot_remove(context, tokens);
    Command c(context, "snapshot", tokens, {});  // lets --help through
    throw UsageError("expected snapshot create, ls, inspect or rm", usage_of("snapshot"));
}

int command_fork(Context& context, const CommandTokens& tokens) {
    Command c(context, "fork", tokens,
              {{"--count", ""}, {"--timeout", ""}, {"--meta", ""}, {"--json", "", false}});
    c.expect(1, 1);
    json body = {{"count", parse_integer(c.args.get("--count").value_or("1"), "--count", 1, 16)}};
    if (auto timeout = c.args.get("--timeout"))
        body["timeout_s"] = parse_integer(*timeout, "--timeout", 1, 365LL * 24 * 3600);
    if (json metadata = metadata_of(c.args, "--meta"); !metadata.empty())
        body["metadata"] = metadata;
    context.client().set_request_timeout(kSaveTimeout);
    json answer = context.client().post_json(sandbox_path(c.arg(0)) + "/fork", body);
    if (c.args.has("--json")) {
        context.out << answer.dump(2) << "\n";
        return kExitOk;
    }
    for (const auto& sandbox : answer.value("sandboxes", json::array()))
        context.out << required_string(sandbox, "id", "the fork answer") << "\n";
    return kExitOk;
}

}  // namespace deskbox::cli
