#include "server/runtime/guest_env.hpp"

#include "guest-desktop/services/egress_ca.hpp"

namespace deskbox::runtime {

std::map<std::string, std::string> default_guest_env(const SandboxSpec& spec) {
    std::string home = spec.uid == 0 ? "/root" : "/home/user";
    std::map<std::string, std::string> env{
        {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
        {"HOME", home},
        {"LANG", "C.UTF-8"},
        {"DESKBOX_SANDBOX_ID", spec.id},
        {"DESKBOX_SCREEN", std::to_string(spec.width) + "x" + std::to_string(spec.height)},
        {"DESKBOX_DPI", std::to_string(spec.dpi)},
        {"DESKBOX_AGENT_SOCKET", std::string(kGuestRunDir) + "/" + kAgentSocketName},
    };
    if (spec.egress_ca) {
        const std::string bundle = services::kCaBundlePath;
        env[services::kEgressCaEnv] = kGuestEgressCaPath;
        // Node has its own list of roots and adds only this file to it.
        env["NODE_EXTRA_CA_CERTS"] = kGuestEgressCaPath;
        // requests uses certifi's list unless told; curl and OpenSSL builds (conda, static
        // binaries) may have other defaults than Debian's.
        env["REQUESTS_CA_BUNDLE"] = bundle;
        env["SSL_CERT_FILE"] = bundle;
        env["CURL_CA_BUNDLE"] = bundle;
    }
    return env;
}

}  // namespace deskbox::runtime
