// The OCI runtime bundle of a container sandbox: config.json for runc (namespaces, mounts,
// cgroup limits, seccomp, no capabilities) generated from a SandboxSpec.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/runtime/guest_env.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

struct BundleLayout {
    std::filesystem::path rootfs;   // the mounted overlay (config.json says "rootfs")
    std::filesystem::path run_dir;  // host side of /run/deskbox
    std::string cgroup_path;        // absolute, e.g. "/deskbox/<id>"
    // Host files bind-mounted read-only at /etc/resolv.conf and /etc/hosts; empty: none.
    std::filesystem::path resolv_conf, hosts;
    // Host file bind-mounted read-only at /etc/machine-id (the sandbox's own); empty: none.
    std::filesystem::path machine_id;
    // Host directories bound at spec.volumes[i].destination, one per volume (the volume itself,
    // or its id-mapped copy under a user namespace).
    std::vector<std::filesystem::path> volume_sources;
};

// Syscalls denied (EPERM) in every sandbox, and new user namespaces unless allowed;
// everything else is allowed. See the .cpp for what is blocked and why some (ptrace) are not.
nlohmann::json default_seccomp_profile(bool nested_user_namespaces = false);

// config.json for runc. `spec` must already be validated.
nlohmann::json make_oci_config(const SandboxSpec& spec, const BundleLayout& layout);

// Writes <bundle_dir>/config.json (via a temp file and rename). Throws RuntimeError.
void write_oci_config(const nlohmann::json& config, const std::filesystem::path& bundle_dir);

}  // namespace deskbox::runtime
