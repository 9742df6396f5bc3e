#include "server/templates/buildah.hpp"

#include <cmath>

namespace deskbox::templates {

std::vector<std::string> engine_command(const EnginePaths& paths, std::vector<std::string> args) {
    std::vector<std::string> argv = {
        "buildah",          "--root", paths.root.string(), "--runroot", paths.runroot.string(),
        "--storage-driver", "overlay"};
    argv.insert(argv.end(), std::make_move_iterator(args.begin()),
                std::make_move_iterator(args.end()));
    return argv;
}

std::vector<std::string> bud_args(const BudOptions& o) {
    std::vector<std::string> a = {"bud", "--isolation", "oci", "--layers", "--force-rm",
                                  // Base images are what is here (deskbox's, imported, built):
                                  // the engine never reaches a registry from the host.
                                  "--pull=never", "--network", o.network, "-f",
                                  o.dockerfile.string(), "-t", o.image, "--cap-drop",
                                  "NET_RAW,MKNOD,AUDIT_WRITE", "--memory",
                                  std::to_string(o.limits.memory_mb) + "m"};
    // buildah 1.28 has no --pids-limit: the service caps pids on the cgroup parent instead.
    if (o.no_cache) a.push_back("--no-cache");
    if (!o.runc_root.empty()) a.insert(a.end(), {"--runtime-flag", "root=" + o.runc_root.string()});
    if (!o.dns.empty()) a.insert(a.end(), {"--dns", o.dns});
    if (!o.cgroup_parent.empty()) a.insert(a.end(), {"--cgroup-parent", o.cgroup_parent});
    if (o.limits.cpus > 0) {
        constexpr long kPeriod = 100'000;
        a.insert(a.end(), {"--cpu-period", std::to_string(kPeriod), "--cpu-quota",
                           std::to_string(std::lround(o.limits.cpus * kPeriod))});
    }
    if (o.host_id_base != 0) {
        // RUN steps get a user namespace: their root is host id host_id_base. Joining deskbox's
        // network namespace (owned by the host's user namespace) a new sysfs cannot be mounted
        // there, so /sys is an empty read-only folder (with fs/cgroup for runc's cgroup mount).
        const std::string map = "0:" + std::to_string(o.host_id_base) + ":65536";
        a.insert(a.end(), {"--userns-uid-map", map, "--userns-gid-map", map});
        if (!o.empty_sys.empty()) a.insert(a.end(), {"-v", o.empty_sys.string() + ":/sys:ro"});
    }
    for (const auto& [k, v] : o.build_args) a.insert(a.end(), {"--build-arg", k + "=" + v});
    a.push_back(o.context.string());
    return a;
}

}  // namespace deskbox::templates
