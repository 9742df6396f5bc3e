// The host's one way to the agent: a function per agent method with typed parameters and
// results. Each owns its reply timeout, its audit line and the mapping of the agent's errors to
// SandboxError, so the REST routes, the MCP tools and Sandbox share them. No other file names an
// agent method (protocol/agent_methods.hpp has the list the agent registers from).
//
// The request rules the front doors share live here too: a command's fields (one timeout rule
// for /commands and run_command) and reading a path (a directory answers its listing).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/agent_methods.hpp"
#include "protocol/rpc.hpp"
#include "server/sandbox/request_reader.hpp"
#include "server/sandbox/sandbox_error.hpp"

namespace deskbox::server {

// Who asks: an MCP tool's audit lines say so ("via": "mcp"); the server's own probes (a ready
// condition's command, polled) are not audited and run where the agent starts them.
enum class Caller { api, mcp, server };

// What the client needs of its sandbox. Only `connection` is required.
struct AgentLink {
    // The agent's connection now; throws SandboxError when there is none (paused, reconnecting).
    std::function<std::shared_ptr<protocol::RpcClient>()> connection;
    // A failure explained by the sandbox's limits (conflict, sandbox_exhausted), or nullopt.
    std::function<std::optional<SandboxError>(const std::string& what_failed)> exhaustion;
    // The channel died under a call: why, as far as the sandbox knows ("" if it does not).
    std::function<std::string()> lost;
    std::function<void(const std::string& kind, const nlohmann::json& detail)> audit;
    std::string way_back;  // appended to an exhausted guest's error: how to recover
    // Where commands run unless they name a cwd (a template's WORKDIR); "" for the agent's.
    std::function<std::string()> default_cwd;
};

// exec.run: a command in the guest. Exactly one of cmd and argv (the agent checks the rest).
struct CommandRequest {
    static constexpr double kDefaultTimeoutS = 60;  // the agent's, for a foreground command
    static constexpr double kMaxTimeoutS = 86400;   // the agent refuses more

    std::optional<std::string> cmd;  // run by /bin/sh -c
    std::optional<std::vector<std::string>> argv;
    std::optional<std::map<std::string, std::string>> env;
    std::optional<std::string> cwd;
    std::optional<double> timeout_s;  // in (0, kMaxTimeoutS]
    bool stdin_open = false;          // background or stream: stdin stays open for later writes
    bool background = false;
    bool stream = false;
    std::string stdin_bytes;

    // The one timeout rule: a number of seconds in (0, 86400], else invalid naming timeout_s.
    static std::optional<double> read_timeout(RequestReader& reader);
    // How long to wait for the agent's answer: the command's timeout plus 15 s.
    std::chrono::milliseconds reply_timeout() const;
    nlohmann::json params() const;  // exec.run's parameters (stdin travels as the body)
};

// A finished command (exit_code) or a started one (pid); `json` is the agent's whole answer.
struct CommandResult {
    std::optional<int> exit_code;
    std::optional<long long> pid;
    std::string stdout_text;
    std::string stderr_text;
    nlohmann::json json;
};

// A path read: a file's bytes, or a directory's listing ({"path","entries"}).
// An agent error code (files.*: not_found, is_a_directory, ...) as a SandboxError: the fault
// each code is, the code kept. Also what the volumes' files API answers.
SandboxError agent_error(const std::string& code, const std::string& message,
                         const std::string& field);

struct PathContents {
    bool directory = false;
    std::string bytes;
    nlohmann::json listing;
};

struct ScreenSynced {
    std::uint64_t seq = 0;  // the frame the mirror must reach
    bool settled = false;   // nothing changed for settle_ms
};

// A restored guest's fresh identity (system.identity).
struct GuestIdentity {
    long long unix_time_ns = 0;
    std::string seed_base64;
    std::optional<std::string> hostname;
};

class AgentClient {
  public:
    explicit AgentClient(AgentLink link) : link_(std::move(link)) {}
    // On a connection of the caller's (no sandbox: no audit, no limits to explain).
    static AgentClient over(std::shared_ptr<protocol::RpcClient> client);

    // --- screen and input (the agent's serial lane) ---
    // Waits until nothing changed for settle_ms, at most max_ms (the agent caps: 5 s, 30 s).
    ScreenSynced sync_screen(int settle_ms = 0, int max_ms = 1000);
    // Native actions (input/dialects/native); their "results". The reply may take as long as
    // the actions' holds and waits (61 s each at most), up to 30 minutes.
    nlohmann::json run_actions(const nlohmann::json& native_actions);

    // --- processes --- Audited ("command", "via" for MCP).
    CommandResult run_command(CommandRequest request, Caller caller = Caller::api);
    // Ends every process but the desktop session; audited. {"killed","refused","rounds"}.
    nlohmann::json kill_processes();
    // One command by the pid exec.run gave: not_found once it has ended. Both audited.
    void signal_command(long long pid, const nlohmann::json& signal, Caller caller = Caller::api);
    void write_command_stdin(long long pid, std::string bytes, bool eof);
    nlohmann::json running_commands();  // {"processes":[{"pid","command",...}]}

    // --- files --- Writes and removes are audited.
    PathContents read_path(const std::string& path);
    nlohmann::json write_file(const std::string& path, std::string bytes,
                              const std::optional<std::string>& mode, Caller caller = Caller::api);
    nlohmann::json remove_file(const std::string& path, bool recursive);
    nlohmann::json make_directory(const std::string& path, bool parents);
    nlohmann::json list_directory(const std::string& path);  // {"path","entries"}

    // --- desktop state --- The agent's answers as they are (the API's schemas).
    nlohmann::json windows();
    nlohmann::json cursor();
    nlohmann::json clipboard();
    nlohmann::json set_clipboard(const std::string& text);
    // {"ports":[{"port","addresses"}]}; `timeout`: for a caller that would rather not wait.
    nlohmann::json listening_ports(std::chrono::milliseconds timeout = std::chrono::seconds(10));
    // The AT-SPI tree (services/accessibility_service.hpp): params passed as the client sent
    // them (the agent checks them, errors naming the field); bounds in screen pixels.
    nlohmann::json accessibility_tree(const nlohmann::json& params);
    nlohmann::json accessibility_find(const nlohmann::json& params);
    nlohmann::json accessibility_act(const nlohmann::json& params);
    // A restored guest's clock, randomness and (new_identity) name; its answer.
    nlohmann::json set_identity(const GuestIdentity& identity);

  private:
    protocol::Reply call(protocol::AgentMethod method, nlohmann::json params, std::string body,
                         std::chrono::milliseconds timeout);
    void audit(const std::string& kind, nlohmann::json detail, Caller caller) const;

    AgentLink link_;
};

}  // namespace deskbox::server
