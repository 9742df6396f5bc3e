// The deskbox CLI's commands: each talks to deskboxd through ApiClient and writes to the
// streams in Context, so main() only wires up stdin/stdout/stderr and the environment.
// Exit codes: 0 ok, 1 API or connection error, 2 usage; `exec` returns the command's code.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/cli/cli_args.hpp"
#include "server/client/api_client.hpp"

namespace deskbox::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitApiError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNoMatch = 3;  // wait timed out, locate found nothing, compare differs

struct Environment {
    std::optional<std::string> server;   // DESKBOX_SERVER
    std::optional<std::string> api_key;  // DESKBOX_API_KEY
};

class Context {
  public:
    Context(std::ostream& out, std::ostream& err, std::istream& in) : out(out), err(err), in(in) {}
    std::ostream& out;
    std::ostream& err;
    std::istream& in;
    client::ClientOptions options;
    // Created on first use, so usage errors never need a server.
    client::ApiClient& client();

  private:
    std::unique_ptr<client::ApiClient> client_;
};

// Runs `deskbox ARGS...` (without the program name) and returns the exit code; never throws.
int run_cli(const std::vector<std::string>& args, const Environment& environment, std::ostream& out,
            std::ostream& err, std::istream& in);

// The synopsis and notes of a command ("" if unknown), and of the CLI (cli_usage.cpp).
const std::string& usage_of(const std::string& command);
const std::string& main_usage();
// "/v1/sandboxes/ID" with the id percent-encoded.
std::string sandbox_path(const std::string& id);
// Writes bytes to `path` through a temporary file renamed into place; "-" is `out`.
void write_output(Context& context, const std::string& path, const std::string& bytes);

// A local file's bytes; std::runtime_error naming it if it cannot be read.
std::string read_local_file(const std::string& path);
std::string read_all(std::istream& in);
// Prints rows as aligned columns; the last column is not padded.
void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& rows);
// "1280x800" of [w,h] or {width,height}; a mode as octal "0644".
std::string size_text(const nlohmann::json& value);
std::string mode_text(const nlohmann::json& value);
// 1536 -> "1.5 KiB"; 2.04 -> "2.0 s".
std::string human_bytes(std::uint64_t bytes);
std::string seconds_text(double seconds);
// Display text of a JSON value ("-" for null or missing).
std::string text_of(const nlohmann::json& value);
std::string text_of(const nlohmann::json& object, const char* key);
// A non-empty string member of a server answer; `where` names the answer in the error.
std::string required_string(const nlohmann::json& object, const char* key,
                            const std::string& where);
// The POST /v1/sandboxes body from create's (and demo's) options.
nlohmann::json create_request(const ParsedArgs& args);

// Thrown by --help anywhere: print the command's usage and exit 0.
struct ShowHelp {
    std::string text;
};

// One command's parsed arguments, with the options every command takes (--server, --api-key,
// --help) handled: they update `context` or throw ShowHelp.
class Command {
  public:
    Command(Context& context, std::string name, const std::vector<std::string>& tokens,
            std::vector<OptionSpec> options, std::optional<std::size_t> rest_after = {});
    void expect(std::size_t min, std::size_t max) const;  // positional count, else UsageError
    const std::string& arg(std::size_t i) const { return args.positional.at(i); }
    ParsedArgs args;

  private:
    std::string name_;
};

// DELETE path_of(NAME) for each positional after the verb, printing what the server deleted; one
// that fails (missing, in use) is reported and the rest go on. Exit 1 if any failed.
int delete_each(Context& context, const Command& command,
                const std::function<std::string(const std::string&)>& path_of);

// Each command: its tokens after the command's name; returns the exit code.
using CommandTokens = std::vector<std::string>;
// Sandboxes (cli_sandboxes.cpp).
int command_create(Context& context, const CommandTokens& tokens);
int command_ports(Context& context, const CommandTokens& tokens);
int command_list(Context& context, const CommandTokens& tokens);
int command_inspect(Context& context, const CommandTokens& tokens);
int command_kill(Context& context, const CommandTokens& tokens);
int command_lifecycle(Context& context, const CommandTokens& tokens, const char* name);
int command_timeout(Context& context, const CommandTokens& tokens);
int command_network(Context& context, const CommandTokens& tokens);
// The desktop (cli_desktop.cpp).
int command_screenshot(Context& context, const CommandTokens& tokens);
int command_act(Context& context, const CommandTokens& tokens);
int command_click(Context& context, const CommandTokens& tokens);
int command_move(Context& context, const CommandTokens& tokens);
int command_scroll(Context& context, const CommandTokens& tokens);
int command_type(Context& context, const CommandTokens& tokens);
int command_key(Context& context, const CommandTokens& tokens);
int command_kill_processes(Context& context, const CommandTokens& tokens);
int command_windows(Context& context, const CommandTokens& tokens);
int command_cursor(Context& context, const CommandTokens& tokens);
int command_clipboard(Context& context, const CommandTokens& tokens);
// Cluster nodes (cli_nodes.cpp).
int command_node(Context& context, const CommandTokens& tokens);
// Commands and files (cli_exec.cpp).
int command_exec(Context& context, const CommandTokens& tokens);
int command_files(Context& context, const CommandTokens& tokens);
int command_demo(Context& context, const std::vector<std::string>& tokens);
// Screen analysis (cli_screen.cpp).
int command_wait(Context& context, const std::vector<std::string>& tokens);
int command_locate(Context& context, const std::vector<std::string>& tokens);
int command_ocr(Context& context, const std::vector<std::string>& tokens);
int command_compare(Context& context, const std::vector<std::string>& tokens);
// The options that aim click and move at an image or a text (--image, --text, --index, ...),
// and the action's "target" they make (nullopt without --image or --text).
const std::vector<OptionSpec>& target_options();
std::optional<nlohmann::json> target_of(const ParsedArgs& args);
int command_mcp(Context& context, const std::vector<std::string>& tokens);
// Templates users build or import (cli_templates.cpp).
int command_template(Context& context, const CommandTokens& tokens);
int command_volume(Context& context, const CommandTokens& tokens);
int command_secret(Context& context, const CommandTokens& tokens);
// `create --volume NAME:PATH[:ro|rw]` as the create request's volumes entry (UsageError).
nlohmann::json parse_volume_arg(const std::string& text);
// Named snapshots and forks (cli_snapshots.cpp).
int command_snapshot(Context& context, const CommandTokens& tokens);
int command_fork(Context& context, const CommandTokens& tokens);
// Usage and samples (cli_metering.cpp).
int command_usage(Context& context, const CommandTokens& tokens);
int command_metrics(Context& context, const CommandTokens& tokens);
int command_events(Context& context, const CommandTokens& tokens);

}  // namespace deskbox::cli
