#include "server/runtime/guest_env.hpp"

namespace deskbox::runtime {

std::map<std::string, std::string> default_guest_env(const SandboxSpec& spec) {
    std::string home = spec.uid == 0 ? "/root" : "/home/user";
    return {
        {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
        {"HOME", home},
        {"LANG", "C.UTF-8"},
        {"DESKBOX_SANDBOX_ID", spec.id},
        {"DESKBOX_SCREEN", std::to_string(spec.width) + "x" + std::to_string(spec.height)},
        {"DESKBOX_DPI", std::to_string(spec.dpi)},
        {"DESKBOX_AGENT_SOCKET", std::string(kGuestRunDir) + "/" + kAgentSocketName},
    };
}

}  // namespace deskbox::runtime
