// What sandboxes used: `deskbox usage` (sums over a period, grouped) and `deskbox metrics ID`
// (a sandbox's samples), both over deskboxd's usage ledger (server/usage/).
#include <cstdio>
#include <iostream>

#include "server/cli/cli_commands.hpp"

namespace deskbox::cli {

using client::Method;
using client::Query;
using nlohmann::json;

namespace {

std::string number_text(double value, const char* format) {
    char text[64];
    std::snprintf(text, sizeof text, format, value);
    return text;
}

// from, to (and step) passed on as given: the server checks them and names a bad one.
Query period_query(const ParsedArgs& args, std::initializer_list<const char*> names) {
    Query query;
    for (const char* name : names)
        if (auto value = args.get(std::string("--") + name))
            query.add(std::string(name) == "group-by" ? "group_by" : name, *value);
    return query;
}

}  // namespace

int command_usage(Context& context, const CommandTokens& tokens) {
    Command c(context, "usage", tokens,
              {{"--from", ""},
               {"--to", ""},
               {"--group-by", ""},
               {"--csv", "", false},
               {"--json", "", false}});
    c.expect(0, 0);
    Query query = period_query(c.args, {"from", "to", "group-by"});
    if (c.args.has("--csv")) {
        query.add("format", "csv");
        client::Response answer =
            context.client().call(Method::get, "/v1/usage" + query.str(), {}, {}, "text/csv");
        context.out << answer.body;
        return kExitOk;
    }
    const json report = context.client().get_json("/v1/usage" + query.str());
    if (c.args.has("--json")) {
        context.out << report.dump(2) << "\n";
        return kExitOk;
    }
    const json total = report.value("total", json::object());
    const bool priced = total.contains("cost");
    std::vector<std::vector<std::string>> rows = {{"GROUP", "SANDBOXES", "CPU", "VCPU-S",
                                                   "MEM GIB-S", "RESERVED GIB-S", "EGRESS",
                                                   "LIFETIME"}};
    if (priced) rows[0].push_back("COST");
    auto row = [&](const std::string& key, const json& g) {
        rows.push_back({key.empty() ? "(none)" : key, std::to_string(g.value("sandboxes", 0)),
                        seconds_text(g.value("cpu_seconds", 0.0)),
                        number_text(g.value("vcpu_seconds", 0.0), "%.0f"),
                        number_text(g.value("memory_gib_seconds", 0.0), "%.1f"),
                        number_text(g.value("memory_reserved_gib_seconds", 0.0), "%.1f"),
                        human_bytes(g.value("egress_bytes", std::uint64_t{0})),
                        seconds_text(g.value("lifetime_seconds", 0.0))});
        if (priced) rows.back().push_back(number_text(g.value("cost", 0.0), "%.4f"));
    };
    const json groups = report.value("groups", json::array());
    if (report.value("group_by", "none") != "none")
        for (const auto& g : groups) row(g.value("key", ""), g);
    row("total", total);
    print_table(context.out, rows);
    return kExitOk;
}

int command_metrics(Context& context, const CommandTokens& tokens) {
    Command c(context, "metrics", tokens,
              {{"--from", ""}, {"--to", ""}, {"--step", ""}, {"--json", "", false}});
    c.expect(1, 1);
    const Query query = period_query(c.args, {"from", "to", "step"});
    const json answer =
        context.client().get_json(sandbox_path(c.arg(0)) + "/metrics" + query.str());
    if (c.args.has("--json")) {
        context.out << answer.dump(2) << "\n";
        return kExitOk;
    }
    std::vector<std::vector<std::string>> rows = {
        {"AT", "STATE", "CPU%", "MEMORY", "DISK", "NET OUT", "NET IN"}};
    const json samples = answer.value("samples", json::array());
    for (const auto& s : samples)
        rows.push_back({text_of(s, "at"), text_of(s, "state"),
                        number_text(s.value("cpu_percent", 0.0), "%.1f"),
                        human_bytes(s.value("memory_resident_bytes", std::uint64_t{0})),
                        human_bytes(s.value("disk_bytes", std::uint64_t{0})),
                        human_bytes(s.value("net_out_bytes", std::uint64_t{0})),
                        human_bytes(s.value("net_in_bytes", std::uint64_t{0}))});
    print_table(context.out, rows);
    return kExitOk;
}

}  // namespace deskbox::cli
