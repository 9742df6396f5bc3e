// deskbox volume create|ls|inspect|rm: named filesystems that outlive sandboxes
// (POST/GET/DELETE /v1/volumes); `deskbox create --volume NAME:PATH[:ro]` mounts one.
#include <cstdint>

#include "server/cli/cli_commands.hpp"

namespace deskbox::cli {

using client::ApiError;
using nlohmann::json;

namespace {

std::string volume_path(const std::string& name) {
    if (name.empty()) throw UsageError("the volume name is empty");
    return "/v1/volumes/" + client::percent_encode(name);
}

int volume_create(Context& context, const CommandTokens& tokens) {
    Command c(context, "volume", tokens, {{"--size", ""}, {"--label", ""}, {"--json", "", false}});
    c.expect(2, 2);
    json body = {{"name", c.arg(1)}};
    if (auto size = c.args.get("--size"))
        body["size_mb"] = parse_integer(*size, "--size", 1, 1LL << 40);
    json labels = json::object();
    for (const auto& entry : c.args.all("--label")) {
        auto [name, value] = parse_key_value(entry, "--label");
        labels[name] = value;
    }
    if (!labels.empty()) body["labels"] = labels;
    json answer = context.client().post_json("/v1/volumes", body);
    if (c.args.has("--json"))
        context.out << answer.dump(2) << "\n";
    else
        context.out << text_of(answer, "name") << "\n";
    return kExitOk;
}

int volume_list(Context& context, const CommandTokens& tokens) {
    Command c(context, "volume", tokens, {{"--json", "", false}});
    c.expect(1, 1);
    json answer = context.client().get_json("/v1/volumes");
    if (c.args.has("--json")) {
        context.out << answer.dump(2) << "\n";
        return kExitOk;
    }
    std::vector<std::vector<std::string>> rows = {
        {"VOLUME", "SIZE", "USED", "MOUNTED BY", "CREATED"}};
    for (const auto& v : answer.value("volumes", json::array())) {
        std::string users;
        for (const auto& m : v.value("mounts", json::array()))
            users += (users.empty() ? "" : ",") + text_of(m, "sandbox_id") +
                     (m.value("read_only", false) ? "(ro)" : "");
        rows.push_back({text_of(v, "name"), human_bytes(v.value("size_mb", std::uint64_t{0}) << 20),
                        human_bytes(v.value("used_bytes", std::uint64_t{0})),
                        users.empty() ? "-" : users, text_of(v, "created_at")});
    }
    print_table(context.out, rows);
    return kExitOk;
}

int volume_inspect(Context& context, const CommandTokens& tokens) {
    Command c(context, "volume", tokens, {});
    c.expect(2, 2);
    context.out << context.client().get_json(volume_path(c.arg(1))).dump(2) << "\n";
    return kExitOk;
}

int volume_remove(Context& context, const CommandTokens& tokens) {
    Command c(context, "volume", tokens, {});
    c.expect(2, SIZE_MAX);
    return delete_each(context, c, volume_path);
}

}  // namespace

json parse_volume_arg(const std::string& text) {
    // NAME:PATH or NAME:PATH:ro (paths hold no ':', the server refuses them).
    const auto first = text.find(':');
    if (first == std::string::npos || first == 0)
        throw UsageError("--volume: expected NAME:PATH[:ro], got '" + text + "'",
                         usage_of("create"));
    std::string path = text.substr(first + 1);
    bool read_only = false;
    if (const auto second = path.find(':'); second != std::string::npos) {
        const std::string mode = path.substr(second + 1);
        if (mode != "ro" && mode != "rw")
            throw UsageError("--volume: the mode after PATH is ro or rw, got '" + mode + "'",
                             usage_of("create"));
        read_only = mode == "ro";
        path.resize(second);
    }
    return {{"name", text.substr(0, first)}, {"path", path}, {"read_only", read_only}};
}

int command_volume(Context& context, const CommandTokens& tokens) {
    const std::string verb = tokens.empty() ? "" : tokens[0];
    if (verb == "create") return volume_create(context, tokens);
    if (verb == "ls" || verb == "list") return volume_list(context, tokens);
    if (verb == "inspect") return volume_inspect(context, tokens);
    if (verb == "rm") return volume_remove(context, tokens);
    Command c(context, "volume", tokens, {});  // lets --help through
    throw UsageError("expected volume create, ls, inspect or rm", usage_of("volume"));
}

}  // namespace deskbox::cli
