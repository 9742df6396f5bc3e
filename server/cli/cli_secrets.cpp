// deskbox secret set|ls|rm: write-only values for credential rules (POST/GET/DELETE
// /v1/secrets); `deskbox create --inject DOMAIN[/PATH]:HEADER=secret:NAME` uses one.
#include "server/cli/cli_commands.hpp"

namespace deskbox::cli {

using nlohmann::json;

namespace {

std::string secret_path(const std::string& name) {
    if (name.empty()) throw UsageError("the secret name is empty");
    return "/v1/secrets/" + client::percent_encode(name);
}

// The value comes from stdin or a file, never the command line (process lists, shell history).
int secret_set(Context& context, const CommandTokens& tokens) {
    Command c(context, "secret", tokens, {{"--from-file", ""}, {"--json", "", false}});
    c.expect(2, 2);
    std::string value = c.args.get("--from-file") ? read_local_file(*c.args.get("--from-file"))
                                                  : read_all(context.in);
    while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
    if (value.empty()) throw UsageError("the secret's value (stdin or --from-file) is empty");
    json answer = context.client().post_json("/v1/secrets", {{"name", c.arg(1)}, {"value", value}});
    if (c.args.has("--json"))
        context.out << answer.dump(2) << "\n";
    else
        context.out << text_of(answer, "name") << "\n";
    return kExitOk;
}

int secret_list(Context& context, const CommandTokens& tokens) {
    Command c(context, "secret", tokens, {{"--json", "", false}});
    c.expect(1, 1);
    json answer = context.client().get_json("/v1/secrets");
    if (c.args.has("--json")) {
        context.out << answer.dump(2) << "\n";
        return kExitOk;
    }
    std::vector<std::vector<std::string>> rows = {{"SECRET", "CREATED", "UPDATED"}};
    for (const auto& s : answer.value("secrets", json::array()))
        rows.push_back({text_of(s, "name"), text_of(s, "created_at"), text_of(s, "updated_at")});
    print_table(context.out, rows);
    return kExitOk;
}

}  // namespace

int command_secret(Context& context, const CommandTokens& tokens) {
    const std::string verb = tokens.empty() ? "" : tokens[0];
    if (verb == "set") return secret_set(context, tokens);
    if (verb == "ls" || verb == "list") return secret_list(context, tokens);
    if (verb == "rm") {
        Command c(context, "secret", tokens, {});
        c.expect(2, SIZE_MAX);
        return delete_each(context, c, secret_path);
    }
    Command c(context, "secret", tokens, {});  // lets --help through
    throw UsageError("expected secret set, ls or rm", usage_of("secret"));
}

}  // namespace deskbox::cli
