// The nodes of a cluster: deskbox node list | drain NAME | undrain NAME.
#include "server/cli/cli_commands.hpp"

#include <iostream>

namespace deskbox::cli {

using client::Method;
using nlohmann::json;

namespace {

std::string node_state(const json& node) {
    std::string state = text_of(node, "state");
    if (node.value("drained", false)) state += ",drained";
    return state;
}

int node_list(Context& context, const CommandTokens& tokens) {
    Command c(context, "node", tokens, {{"--json", "", false}});
    c.expect(1, 1);
    json answer = context.client().get_json("/v1/nodes");
    if (c.args.has("--json")) {
        context.out << answer.dump(2) << "\n";
        return kExitOk;
    }
    std::vector<std::vector<std::string>> rows = {
        {"NAME", "STATE", "SANDBOXES", "CAPACITY", "MEMORY_FREE_MB", "ADDRESS"}};
    for (const auto& node : answer.value("nodes", json::array()))
        rows.push_back({text_of(node, "name") +
                            (node.value("name", "") == answer.value("node", "") ? " *" : ""),
                        node_state(node), text_of(node, "sandboxes"), text_of(node, "capacity"),
                        text_of(node, "memory_available_mb"), text_of(node, "advertise")});
    print_table(context.out, rows);
    return kExitOk;
}

int node_drain(Context& context, const CommandTokens& tokens, bool drain) {
    Command c(context, "node", tokens, {});
    c.expect(2, 2);
    const std::string& name = c.arg(1);
    json node = context.client().post_json(
        "/v1/nodes/" + client::percent_encode(name) + (drain ? "/drain" : "/undrain"), json());
    context.out << text_of(node, "name") << "\t" << node_state(node) << "\n";
    return kExitOk;
}

}  // namespace

int command_node(Context& context, const CommandTokens& tokens) {
    const std::string verb = tokens.empty() ? "" : tokens[0];
    if (verb == "list") return node_list(context, tokens);
    if (verb == "drain") return node_drain(context, tokens, true);
    if (verb == "undrain") return node_drain(context, tokens, false);
    // Lets --help through; anything else is a usage error naming the verbs.
    Command c(context, "node", tokens, {});
    throw UsageError("expected node list, node drain NAME or node undrain NAME");
}

}  // namespace deskbox::cli
