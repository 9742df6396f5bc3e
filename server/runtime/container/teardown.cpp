#include "server/runtime/container/teardown.hpp"

#include "server/runtime/container/cgroups.hpp"
#include "server/runtime/container/mounts.hpp"
#include "server/runtime/container/runc.hpp"
#include "server/runtime/runtime_util.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;

std::vector<std::string> residue_of(const ContainerRuntimeOptions& options,
                                    const fs::path& state_root, const std::string& id,
                                    bool dir_counts) {
    ContainerPaths paths(state_root, id);
    std::vector<std::string> left;
    if (runc_has_container(paths.runc_root, id)) left.push_back("runc container " + id);
    std::error_code ec;
    if (fs::exists(paths.dir, ec))
        for (const auto& mount : mounts_under(paths.dir)) left.push_back("mount " + mount.string());
    std::string cgroup = "/" + options.cgroup_parent + "/" + id;
    for (const auto& dir : existing_cgroup_dirs(cgroup)) left.push_back("cgroup " + dir.string());
    if (dir_counts && fs::exists(paths.dir, ec)) left.push_back("directory " + paths.dir.string());
    return left;
}

void teardown(const ContainerRuntimeOptions& options, const fs::path& state_root,
              const std::string& id, bool keep_state) {
    ContainerPaths paths(state_root, id);
    std::string problems;
    auto attempt = [&](auto&& step) {
        try {
            step();
        } catch (const std::exception& e) {
            problems += std::string(problems.empty() ? "" : "; ") + e.what();
        }
    };
    attempt([&] {
        if (!runc_has_container(paths.runc_root, id)) return;
        auto result = run_runc(options, paths.runc_root, {"delete", "--force", id});
        if (result.status.exit_code != 0 && runc_has_container(paths.runc_root, id))
            check_runc(result, "delete --force " + id);
    });
    attempt([&] { remove_cgroup("/" + options.cgroup_parent + "/" + id); });
    attempt([&] {
        std::error_code ec;
        if (!fs::exists(paths.dir, ec)) return;
        for (const auto& mount : mounts_under(paths.dir)) unmount_all(mount);
    });
    if (!keep_state) {
        attempt([&] {
            std::error_code ec;
            fs::remove_all(paths.dir, ec);
            if (ec) throw RuntimeError("remove " + paths.dir.string() + ": " + ec.message());
        });
    }
    auto left = residue_of(options, state_root, id, !keep_state);
    require_removed(id, left, problems);
}

}  // namespace deskbox::runtime
