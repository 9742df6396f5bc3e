#include "protocol/agent_methods.hpp"

#include <array>
#include <stdexcept>
#include <string>

namespace deskbox::protocol {
namespace {

constexpr std::array kMethods = {
    AgentMethodName{AgentMethod::ping, "ping"},
    AgentMethodName{AgentMethod::session_info, "session.info"},
    AgentMethodName{AgentMethod::input_actions, "input.actions"},
    AgentMethodName{AgentMethod::screen_sync, "screen.sync"},
    AgentMethodName{AgentMethod::screen_full, "screen.full"},
    AgentMethodName{AgentMethod::capture_configure, "capture.configure"},
    AgentMethodName{AgentMethod::cursor_get, "cursor.get"},
    AgentMethodName{AgentMethod::exec_run, "exec.run"},
    AgentMethodName{AgentMethod::exec_kill, "exec.kill"},
    AgentMethodName{AgentMethod::exec_stdin, "exec.stdin"},
    AgentMethodName{AgentMethod::exec_list, "exec.list"},
    AgentMethodName{AgentMethod::files_read, "files.read"},
    AgentMethodName{AgentMethod::files_write, "files.write"},
    AgentMethodName{AgentMethod::files_list, "files.list"},
    AgentMethodName{AgentMethod::files_mkdir, "files.mkdir"},
    AgentMethodName{AgentMethod::files_remove, "files.remove"},
    AgentMethodName{AgentMethod::files_stat, "files.stat"},
    AgentMethodName{AgentMethod::windows_list, "windows.list"},
    AgentMethodName{AgentMethod::clipboard_get, "clipboard.get"},
    AgentMethodName{AgentMethod::clipboard_set, "clipboard.set"},
    AgentMethodName{AgentMethod::net_listening, "net.listening"},
    AgentMethodName{AgentMethod::processes_kill, "processes.kill"},
    AgentMethodName{AgentMethod::system_identity, "system.identity"},
    AgentMethodName{AgentMethod::accessibility_tree, "accessibility.tree"},
    AgentMethodName{AgentMethod::accessibility_find, "accessibility.find"},
    AgentMethodName{AgentMethod::accessibility_act, "accessibility.act"},
};

// The table is in declaration order, so a method is its own index.
constexpr bool in_declaration_order() {
    for (std::size_t i = 0; i < kMethods.size(); ++i)
        if (static_cast<std::size_t>(kMethods[i].method) != i) return false;
    return true;
}
static_assert(in_declaration_order());
static_assert(kMethods.back().method == AgentMethod::accessibility_act, "a method is missing");

}  // namespace

std::span<const AgentMethodName> agent_methods() {
    return kMethods;
}

std::string_view method_name(AgentMethod method) {
    return kMethods.at(static_cast<std::size_t>(method)).name;
}

void serve_agent_methods(RpcServer& server, AgentRoutes routes) {
    for (const auto& [method, name] : kMethods) {
        auto route = routes.find(method);
        if (route == routes.end() || !route->second.handler)
            throw std::logic_error("the agent has no handler for " + std::string(name));
        server.handle(std::string(name), std::move(route->second.handler), route->second.dispatch);
    }
}

}  // namespace deskbox::protocol
