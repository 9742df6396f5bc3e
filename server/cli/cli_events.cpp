// Lifecycle events as they happen: `deskbox events` follows deskboxd's server-sent event stream
// (GET /v1/events, or one sandbox's) and prints a line per event, or its JSON with --json.
#include <iostream>
#include <limits>

#include "server/cli/cli_commands.hpp"

namespace deskbox::cli {

using client::Query;
using nlohmann::json;

namespace {

// The `data:` lines of one server-sent event block, joined; empty for a comment (keep-alive).
std::string event_data(std::string_view block) {
    std::string data;
    while (!block.empty()) {
        const auto end = block.find('\n');
        std::string_view line = block.substr(0, end);
        block = end == std::string_view::npos ? std::string_view{} : block.substr(end + 1);
        if (line.starts_with("data:")) {
            line.remove_prefix(5);
            if (line.starts_with(' ')) line.remove_prefix(1);
            if (!data.empty()) data += '\n';
            data += line;
        }
    }
    return data;
}

std::string event_line(const json& event) {
    // "<node>:<n>" or "<n>"; a server from before ids named their node sends a number.
    const json id = event.value("id", json());
    std::string line = (id.is_string() ? id.get<std::string>() : id.dump()) + "  " +
                       event.value("time", "") + "  " + event.value("type", "");
    if (auto id = event.value("sandbox_id", ""); !id.empty()) line += "  " + id;
    if (auto name = event.value("template", ""); !name.empty()) line += "  " + name;
    if (auto data = event.value("data", json::object()); !data.empty()) line += "  " + data.dump();
    return line;
}

}  // namespace

int command_events(Context& context, const CommandTokens& tokens) {
    Command c(context, "events", tokens,
              {{"--after", ""},
               {"--types", ""},
               {"--sandbox", ""},
               {"--count", ""},
               {"--json", "", false}});
    c.expect(0, 0);
    Query query;
    // An id as the server printed it; the server says what is wrong with one (400, "after").
    if (auto after = c.args.get("--after")) query.add("after", *after);
    if (auto types = c.args.get("--types")) query.add("types", *types);
    const long long count = c.args.get("--count")
                                ? parse_integer(*c.args.get("--count"), "--count", 1,
                                                std::numeric_limits<long long>::max())
                                : 0;
    const auto sandbox = c.args.get("--sandbox");
    const std::string path = (sandbox ? sandbox_path(*sandbox) + "/events" : "/v1/events");
    const bool as_json = c.args.has("--json");
    std::string pending;
    long long printed = 0;
    context.client().stream_get(
        path + query.str(), "text/event-stream", [&](std::string_view piece) {
            pending.append(piece);
            for (auto end = pending.find("\n\n"); end != std::string::npos;
                 end = pending.find("\n\n")) {
                const std::string data = event_data(std::string_view(pending).substr(0, end));
                pending.erase(0, end + 2);
                if (data.empty()) continue;
                const json event = json::parse(data, nullptr, false);
                if (event.is_discarded()) continue;
                context.out << (as_json ? event.dump() : event_line(event)) << std::endl;
                if (count > 0 && ++printed >= count) return false;
            }
            return true;
        });
    return kExitOk;
}

}  // namespace deskbox::cli
