#include "server/runtime/microvm/guest_config.hpp"

#include <sstream>

#include "common/random.hpp"
#include "server/runtime/guest_env.hpp"

namespace deskbox::runtime {

std::string shell_quote(const std::string& value) {
    std::string out = "'";
    for (char c : value) {
        if (c == '\'')
            out += "'\\''";
        else
            out += c;
    }
    return out + "'";
}

namespace {

// "PATH:rw PATH:ro ...", one word per volume in disk order.
std::string volume_list(const SandboxSpec& spec) {
    std::string list;
    for (const auto& volume : spec.volumes)
        list += (list.empty() ? "" : " ") + volume.destination + (volume.read_only ? ":ro" : ":rw");
    return list;
}

}  // namespace

// Shell assignments the initramfs's init sources from the config disk (images/microvm/init):
// identity, then "$@" = environment (K=V...) followed by the entry's argv.
std::string guest_config(const SandboxSpec& spec) {
    auto env = default_guest_env(spec);
    for (const auto& [key, value] : spec.env) env[key] = value;
    std::ostringstream out;
    out << "# deskbox microVM sandbox config, sourced by the initramfs init\n"
        << "DESKBOX_CONFIG_VERSION=1\n"
        << "DESKBOX_HOSTNAME=" << shell_quote(spec.hostname.empty() ? "deskbox" : spec.hostname)
        << "\n"
        << "DESKBOX_MACHINE_ID=" << random::hex(16) << "\n"
        << "DESKBOX_UID=" << spec.uid << "\n"
        << "DESKBOX_GID=" << spec.gid << "\n"
        << "DESKBOX_NETWORK=" << (spec.network ? 1 : 0) << "\n"
        << "DESKBOX_ENTRY=" << shell_quote(spec.entry[0])
        << "\n"
        // Disk deskbox-vol<N> at path N (volume_path_problem keeps paths free of spaces).
        << "DESKBOX_VOLUMES=" << shell_quote(volume_list(spec))
        << "\n"
        // The init installs this CA (on the agent disk) as root before handing over.
        << "DESKBOX_EGRESS_CA=" << shell_quote(spec.egress_ca ? kGuestEgressCaPath : "") << "\n"
        << "set --";
    for (const auto& [key, value] : env) out << " \\\n  " << shell_quote(key + "=" + value);
    for (const auto& arg : spec.entry) out << " \\\n  " << shell_quote(arg);
    out << "\nDESKBOX_CONFIG_END=1\n";
    std::string text = out.str();
    // A disk is whole sectors; newlines are harmless to the shell.
    text.append((4096 - text.size() % 4096) % 4096, '\n');
    return text;
}

}  // namespace deskbox::runtime
