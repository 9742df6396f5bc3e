#include "server/runtime/container/oci_bundle.hpp"

#include "server/runtime/container/user_namespace.hpp"
#include "server/runtime/runtime_util.hpp"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

namespace deskbox::runtime {

using nlohmann::json;

json default_seccomp_profile(bool nested_user_namespaces) {
    // A deny-list over an allow-by-default policy. Docker's default is an allow-list of
    // ~350 syscalls tuned to its capability sets; ours has no capabilities at all, so most
    // privileged calls fail with EPERM anyway. The list removes kernel attack surface that an
    // unprivileged process could still reach, plus privileged calls for defence in depth.
    //
    // Nested user namespaces are refused unless the template allows them (Docker's default
    // too): inside one a process holds every capability over the namespace's objects, which
    // is how most unprivileged kernel exploits begin. clone and unshare are refused when
    // their flags ask for CLONE_NEWUSER; clone3 passes its flags in memory a filter cannot
    // read, so it answers ENOSYS and libc falls back to clone. A template that runs
    // Chromium's own sandbox may allow them (`security.nested_user_namespaces`); weaker.
    //
    // Deliberately allowed:
    //  - the other namespace flags: without a user namespace they need CAP_SYS_ADMIN, which
    //    no sandbox process has. Every mount-family call is denied here regardless, for
    //    templates that allow user namespaces. chroot stays allowed (Chromium's setuid-less
    //    sandbox chroots).
    //  - ptrace, process_vm_*, pidfd_getfd: only reach the sandbox's own processes of the same
    //    uid (PID namespace, no CAP_SYS_PTRACE); debuggers and crash reporters need them.
    //  - personality, mbind & co.: harmless without capabilities.
    static const char* const kDenied[] = {
        // kernel keyrings are not namespaced
        "add_key", "keyctl", "request_key",
        // mounts and namespace entry (a user namespace would otherwise allow mounts)
        "mount", "umount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick",
        "move_mount", "open_tree", "mount_setattr", "setns",
        // kernel modules and kexec
        "init_module", "finit_module", "delete_module", "create_module", "get_kernel_syms",
        "query_module", "kexec_load", "kexec_file_load",
        // whole-machine state
        "reboot", "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "clock_adjtime",
        "stime", "syslog", "quotactl", "quotactl_fd", "nfsservctl", "lookup_dcookie", "_sysctl",
        "sysfs", "ustat", "uselib", "vhangup",
        // large, frequently exploited interfaces no desktop app needs
        "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
        "io_uring_register", "fanotify_init", "open_by_handle_at",
        // raw hardware access
        "iopl", "ioperm", "vm86", "vm86old"};
    json names = json::array();
    for (const char* name : kDenied) names.push_back(name);

    json architectures = json::array();
#if defined(__x86_64__)
    architectures = {"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"};
#elif defined(__aarch64__)
    architectures = {"SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"};
#endif
    json rules =
        json::array({json{{"names", names}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", EPERM}}});
    if (!nested_user_namespaces) {
        // Argument 0 is the flags of unshare and of clone on x86-64 and arm64 (s390 differs).
        json wants_new_user = json::array({json{{"index", 0},
                                                {"value", CLONE_NEWUSER},
                                                {"valueTwo", CLONE_NEWUSER},
                                                {"op", "SCMP_CMP_MASKED_EQ"}}});
        rules.push_back({{"names", {"unshare", "clone"}},
                         {"action", "SCMP_ACT_ERRNO"},
                         {"errnoRet", EPERM},
                         {"args", wants_new_user}});
        rules.push_back(
            {{"names", {"clone3"}}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", ENOSYS}});
    }
    return json{
        {"defaultAction", "SCMP_ACT_ALLOW"}, {"architectures", architectures}, {"syscalls", rules}};
}

namespace {

// The guest's environment, in the OCI config's K=V form.
json process_env(const SandboxSpec& spec) {
    auto env_map = default_guest_env(spec);
    for (const auto& [key, value] : spec.env) env_map[key] = value;
    json env = json::array();
    for (const auto& [key, value] : env_map) env.push_back(key + "=" + value);
    return env;
}

json mounts_for(const SandboxSpec& spec, const BundleLayout& layout) {
    // tmpfs pages are charged to the memory cgroup and no OOM kill frees them: together
    // /tmp and /dev/shm take at most half the limit, so filling both leaves the desktop
    // (Xvfb, agent) half to live in (issue 26 item 7).
    std::string tmpfs_size = "size=" + std::to_string(spec.limits.memory_mb / 4) + "m";

    json mounts = json::array({
        {{"destination", "/proc"},
         {"type", "proc"},
         {"source", "proc"},
         {"options", {"nosuid", "noexec", "nodev"}}},
        {{"destination", "/dev"},
         {"type", "tmpfs"},
         {"source", "tmpfs"},
         {"options", {"nosuid", "strictatime", "mode=755", "size=65536k"}}},
        {{"destination", "/dev/pts"},
         {"type", "devpts"},
         {"source", "devpts"},
         {"options", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}}},
        // XShm and browsers share memory through /dev/shm.
        {{"destination", "/dev/shm"},
         {"type", "tmpfs"},
         {"source", "shm"},
         {"options", {"nosuid", "noexec", "nodev", "mode=1777", tmpfs_size}}},
        {{"destination", "/dev/mqueue"},
         {"type", "mqueue"},
         {"source", "mqueue"},
         {"options", {"nosuid", "noexec", "nodev"}}},
        {{"destination", "/sys"},
         {"type", "sysfs"},
         {"source", "sysfs"},
         {"options", {"nosuid", "noexec", "nodev", "ro"}}},
        {{"destination", "/sys/fs/cgroup"},
         {"type", "cgroup"},
         {"source", "cgroup"},
         {"options", {"nosuid", "noexec", "nodev", "relatime", "ro"}}},
        {{"destination", "/tmp"},
         {"type", "tmpfs"},
         {"source", "tmpfs"},
         {"options", {"nosuid", "nodev", "mode=1777", tmpfs_size}}},
        {{"destination", kGuestRunDir},
         {"type", "bind"},
         {"source", layout.run_dir.string()},
         {"options", {"rbind", "rprivate", "nosuid", "nodev", "noexec"}}},
    });
    if (!spec.agent_dir.empty())
        mounts.push_back({{"destination", kGuestAgentDir},
                          {"type", "bind"},
                          {"source", spec.agent_dir.string()},
                          {"options", {"rbind", "rprivate", "ro", "nosuid", "nodev"}}});
    for (const auto& [file, where] :
         {std::pair{layout.resolv_conf, "/etc/resolv.conf"}, std::pair{layout.hosts, "/etc/hosts"},
          std::pair{layout.machine_id, "/etc/machine-id"}})
        if (!file.empty())
            mounts.push_back(
                {{"destination", where},
                 {"type", "bind"},
                 {"source", file.string()},
                 {"options", {"bind", "rprivate", "ro", "nosuid", "nodev", "noexec"}}});
    for (std::size_t i = 0; i < spec.volumes.size() && i < layout.volume_sources.size(); ++i) {
        json options = {"rbind", "rprivate", "nosuid", "nodev"};
        if (spec.volumes[i].read_only) options.push_back("ro");
        mounts.push_back({{"destination", spec.volumes[i].destination},
                          {"type", "bind"},
                          {"source", layout.volume_sources[i].string()},
                          {"options", options}});
    }
    return mounts;
}

json namespaces_for(const SandboxSpec& spec) {
    json namespaces = json::array();
    for (const char* type : {"pid", "network", "ipc", "uts", "mount", "cgroup"}) {
        json ns = {{"type", type}};
        // A network the server made (server/network/): runc joins it instead of a new one.
        if (std::string(type) == "network" && !spec.attachment.netns_path.empty())
            ns["path"] = spec.attachment.netns_path;
        namespaces.push_back(std::move(ns));
    }
    // runc joins the server's user namespace (the mappings are already written; runc still
    // wants them to know who owns what it creates: id_mappings_for).
    if (!spec.user_namespace.empty())
        namespaces.push_back({{"type", "user"}, {"path", spec.user_namespace.string()}});
    return namespaces;
}

json id_mappings_for(const SandboxSpec& spec) {
    json id_mappings = json::array();
    if (!spec.user_namespace.empty())
        id_mappings.push_back(
            {{"containerID", 0}, {"hostID", spec.host_id_base}, {"size", kIdsPerSandbox}});
    return id_mappings;
}

json process_for(const SandboxSpec& spec) {
    // Browsers want many fds. runc cannot raise the hard limit above ours without
    // CAP_SYS_RESOURCE (which hosts in containers often lack), so stay within it.
    rlimit nofile{};
    std::uint64_t max_files = 65536;
    if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_max != RLIM_INFINITY)
        max_files = std::min<std::uint64_t>(max_files, nofile.rlim_max);

    json no_capabilities = json::array();
    return {{"terminal", false},
            {"user", {{"uid", spec.uid}, {"gid", spec.gid}}},
            {"args", spec.entry},
            {"env", process_env(spec)},
            {"cwd", "/"},
            {"capabilities",
             {{"bounding", no_capabilities},
              {"effective", no_capabilities},
              {"permitted", no_capabilities},
              {"inheritable", no_capabilities},
              {"ambient", no_capabilities}}},
            {"rlimits",
             json::array({{{"type", "RLIMIT_NOFILE"}, {"hard", max_files}, {"soft", max_files}}})},
            {"noNewPrivileges", true},
            // Under host memory pressure the kernel should pick a sandbox before deskboxd.
            {"oomScoreAdj", 500}};
}

json resources_for(const SandboxSpec& spec) {
    const std::int64_t cpu_period = 100000;  // µs, the kernel default
    const auto cpu_quota = static_cast<std::int64_t>(std::llround(spec.limits.cpus * cpu_period));
    const auto memory_bytes = static_cast<std::int64_t>(spec.limits.memory_mb) * 1024 * 1024;
    return {{"devices", json::array({{{"allow", false}, {"access", "rwm"}}})},
            // swap == limit: no swap on top of the memory limit.
            {"memory", {{"limit", memory_bytes}, {"swap", memory_bytes}}},
            {"cpu", {{"quota", cpu_quota}, {"period", cpu_period}}},
            {"pids", {{"limit", spec.limits.pids}}}};
}

}  // namespace

json make_oci_config(const SandboxSpec& spec, const BundleLayout& layout) {
    json config{
        {"ociVersion", "1.0.2"},
        {"process", process_for(spec)},
        {"root", {{"path", layout.rootfs.string()}, {"readonly", false}}},
        {"hostname", spec.hostname.empty() ? std::string("deskbox") : spec.hostname},
        {"mounts", mounts_for(spec, layout)},
        {"annotations", {{"org.deskbox.sandbox-id", spec.id}}},
        {"linux",
         {{"cgroupsPath", layout.cgroup_path},
          {"resources", resources_for(spec)},
          {"namespaces", namespaces_for(spec)},
          {"seccomp", default_seccomp_profile(spec.nested_user_namespaces)},
          {"maskedPaths",
           {"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
            "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
            "/proc/scsi"}},
          {"readonlyPaths",
           {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}}}},
    };
    if (json id_mappings = id_mappings_for(spec); !id_mappings.empty()) {
        config["linux"]["uidMappings"] = id_mappings;
        config["linux"]["gidMappings"] = id_mappings;
    }
    return config;
}

void write_oci_config(const json& config, const std::filesystem::path& bundle_dir) {
    write_file_atomic(bundle_dir / "config.json", config.dump(2) + "\n", 0644);
}

}  // namespace deskbox::runtime
