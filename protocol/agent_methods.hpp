// The agent's methods: the one list both sides are built from. The host's typed client
// (server/sandbox/agent_client.hpp) calls them by AgentMethod; the agent registers its handlers
// with serve_agent_methods, which refuses a list that misses one or adds one. A method name
// ("files.read") is written here and nowhere else.
#pragma once

#include <map>
#include <span>
#include <string_view>

#include "protocol/rpc.hpp"

namespace deskbox::protocol {

enum class AgentMethod {
    ping,
    session_info,
    input_actions,
    screen_sync,
    screen_full,
    capture_configure,
    cursor_get,
    exec_run,
    exec_kill,
    exec_stdin,
    exec_list,
    files_read,
    files_write,
    files_list,
    files_mkdir,
    files_remove,
    files_stat,
    windows_list,
    clipboard_get,
    clipboard_set,
    net_listening,
    processes_kill,
    system_identity,
    accessibility_tree,
    accessibility_find,
    accessibility_act,
};

struct AgentMethodName {
    AgentMethod method;
    std::string_view name;  // on the wire
};

// Every method, in declaration order.
std::span<const AgentMethodName> agent_methods();
std::string_view method_name(AgentMethod method);

struct AgentRoute {
    RpcServer::Handler handler;
    Dispatch dispatch = Dispatch::concurrent;
};
using AgentRoutes = std::map<AgentMethod, AgentRoute>;

// Registers one handler per method of agent_methods(). Throws std::logic_error naming a method
// without a handler (an agent that would answer "unknown_method" to its own host).
void serve_agent_methods(RpcServer& server, AgentRoutes routes);

}  // namespace deskbox::protocol
