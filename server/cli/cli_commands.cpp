#include "server/cli/cli_commands.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
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
#include "common/version.hpp"

namespace deskbox::cli {

using client::ApiError;
using client::Method;
using client::Query;
using nlohmann::json;

namespace {

int command_health(Context& context, const std::vector<std::string>& tokens) {
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
        {"create", command_create},
        {"ports", command_ports},
        {"list", command_list},
        {"inspect", command_inspect},
        {"kill", command_kill},
        {"pause", [](Context& c, const auto& t) { return command_lifecycle(c, t, "pause"); }},
        {"resume", [](Context& c, const auto& t) { return command_lifecycle(c, t, "resume"); }},
        {"timeout", command_timeout},
        {"network", command_network},
        {"screenshot", command_screenshot},
        {"act", command_act},
        {"click", command_click},
        {"move", command_move},
        {"scroll", command_scroll},
        {"type", command_type},
        {"key", command_key},
        {"windows", command_windows},
        {"kill-processes", command_kill_processes},
        {"cursor", command_cursor},
        {"clipboard", command_clipboard},
        {"exec", command_exec},
        {"files", command_files},
        {"health", command_health},
        {"usage", command_usage},
        {"metrics", command_metrics},
        {"events", command_events},
        {"node", command_node},
        {"wait", command_wait},
        {"locate", command_locate},
        {"ocr", command_ocr},
        {"compare", command_compare},
        {"demo", command_demo},
        {"mcp", command_mcp},
        {"template", command_template},
        {"volume", command_volume},
        {"secret", command_secret},
        {"snapshot", command_snapshot},
        {"fork", command_fork},
    };
    return table;
}

}  // namespace

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

std::string human_bytes(std::uint64_t bytes) {
    if (bytes < 1024) return std::to_string(bytes) + " B";
    const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
    double value = static_cast<double>(bytes) / 1024;
    std::size_t unit = 0;
    while (value >= 1024 && unit + 1 < std::size(units)) {
        value /= 1024;
        ++unit;
    }
    char text[32];
    std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
    return text;
}

std::string seconds_text(double seconds) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f s", seconds);
    return text;
}

std::string mode_text(const json& value) {
    if (value.is_number_integer()) {
        std::ostringstream octal;
        octal << std::oct << value.get<long long>();
        return "0" + octal.str();
    }
    return text_of(value);
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
            if (token == "--help" || token == "-h") throw ShowHelp{main_usage()};
            if (token == "--version") {
                out << "deskbox " << kDeskboxVersion << "\n";
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
            if (!tokens.empty() && !usage_of(tokens[0]).empty())
                throw ShowHelp{usage_of(tokens[0]) + "\n"};
            throw ShowHelp{main_usage()};
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

int delete_each(Context& context, const Command& command,
                const std::function<std::string(const std::string&)>& path_of) {
    int status = kExitOk;
    for (std::size_t i = 1; i < command.args.positional.size(); ++i) {
        const std::string& name = command.arg(i);
        try {
            context.out << context.client().delete_json(path_of(name)).value("deleted", name)
                        << "\n";
        } catch (const client::ApiError& error) {
            context.err << "deskbox: error: " << name << ": " << error.what() << "\n";
            status = kExitApiError;
        }
    }
    return status;
}

}  // namespace deskbox::cli
