#include "server/templates/buildah.hpp"

#include <cmath>

#include "server/runtime/container/user_namespace.hpp"

namespace deskbox::templates {

std::vector<std::string> engine_command(const EnginePaths& paths, std::vector<std::string> args) {
    std::vector<std::string> argv = paths.enter;
    argv.insert(argv.end(), {"buildah", "--root", paths.root.string(), "--runroot",
                             paths.runroot.string(), "--storage-driver", "overlay"});
    argv.insert(argv.end(), std::make_move_iterator(args.begin()),
                std::make_move_iterator(args.end()));
    return argv;
}

std::map<std::string, std::string> engine_env(const EnginePaths& paths) {
    return {// containers/storage's unshare: "already in the user namespace we set up" (so no
            // newuidmap, no re-exec).
            {"_CONTAINERS_USERNS_CONFIGURED", "done"},
            // The host user buildah is rootless for. Not 0: with 0 containers/image takes
            // itself for host root and locks /var/cache/containers/short-name-aliases.conf,
            // which the namespace's root cannot, and every short name (FROM deskbox/minimal)
            // is then "image not known". Any other value only picks per-user defaults, all
            // overridden here (storage, runroot, HOME and XDG folders).
            {"_CONTAINERS_ROOTLESS_UID", "1"},
            {"_CONTAINERS_ROOTLESS_GID", "1"},
            {"HOME", paths.home.string()},
            {"XDG_CONFIG_HOME", (paths.home / ".config").string()},
            {"XDG_DATA_HOME", (paths.home / ".local" / "share").string()},
            {"XDG_RUNTIME_DIR", paths.runroot.string()},
            {"TMPDIR", paths.tmp.string()}};
}

std::string engine_ids_record(std::uint32_t host_base) {
    return "0 " + std::to_string(host_base) + " " + std::to_string(runtime::kIdsPerSandbox) + "\n";
}

std::vector<std::string> bud_args(const BudOptions& o) {
    std::vector<std::string> a = {"bud", "--isolation", "oci", "--layers", "--force-rm",
                                  // Base images are what is here (deskbox's, imported, built):
                                  // the engine never reaches a registry from the host.
                                  "--pull=never", "--network", o.network, "-f",
                                  o.dockerfile.string(), "-t", o.image, "--cap-drop",
                                  "NET_RAW,MKNOD,AUDIT_WRITE"};
    if (o.no_cache) a.push_back("--no-cache");
    if (!o.runc_root.empty()) a.insert(a.end(), {"--runtime-flag", "root=" + o.runc_root.string()});
    if (!o.dns.empty()) a.insert(a.end(), {"--dns", o.dns});
    for (const auto& [k, v] : o.build_args) a.insert(a.end(), {"--build-arg", k + "=" + v});
    a.push_back(o.context.string());
    return a;
}

std::vector<CgroupSetting> build_cgroup_settings(const BuildLimits& limits) {
    std::vector<CgroupSetting> settings;
    const std::string memory = std::to_string(limits.memory_mb * 1024 * 1024);
    settings.push_back({"memory", "memory.limit_in_bytes", memory, "memory.max", memory});
    if (limits.cpus > 0) {
        constexpr long kPeriod = 100'000;
        const std::string quota = std::to_string(std::lround(limits.cpus * kPeriod));
        settings.push_back({"cpu", "cpu.cfs_period_us", std::to_string(kPeriod), "", ""});
        settings.push_back(
            {"cpu", "cpu.cfs_quota_us", quota, "cpu.max", quota + " " + std::to_string(kPeriod)});
    }
    const std::string pids = std::to_string(limits.pids);
    settings.push_back({"pids", "pids.max", pids, "pids.max", pids});
    return settings;
}

}  // namespace deskbox::templates
