// Container sandbox start and kill latency, ours next to bare runc on the same bundle.
//   runtime_bench [runs=10]      (root; DESKBOX_TEST_ROOTFS picks the rootfs, else busybox)
// ours:        ContainerRuntime::start (validate, overlay mount, config.json, `runc run`)
//              until the entry has written a file; kill() until everything is verified gone.
// alternative: `runc run -d` of a prepared bundle (overlay mounted once, config.json written
//              once) until the same file appears; `runc delete --force`.
#include <sys/prctl.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "server/runtime/container/cgroups.hpp"
#include "server/runtime/container/mounts.hpp"
#include "server/runtime/container/oci_bundle.hpp"
#include "server/runtime/container/runtime.hpp"
#include "tests/server/runtime_test_support.hpp"

using namespace deskbox;
using namespace deskbox::runtime;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

void row(const char* what, const std::vector<double>& ours, const std::vector<double>& alt) {
    double o = percentile(ours, 0.5), a = percentile(alt, 0.5);
    std::printf("%-34s p50 ours %7.1f ms   bare runc %7.1f ms   ratio %.2f   (p90 %.1f / %.1f)\n",
                what, o, a, o / a, percentile(ours, 0.9), percentile(alt, 0.9));
}

}  // namespace

int run(int argc, char** argv) {
    int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 10;
    // `runc run -d` orphans its container; adopt and reap them (this host's PID 1 doesn't).
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    testing::TestRootfs rootfs;
    TempDir state("deskbox-bench");
    ContainerRuntimeOptions options;
    options.cgroup_parent = "deskbox-bench-" + std::to_string(getpid());
    struct RemoveCgroupParent {
        std::string cgroup;
        ~RemoveCgroupParent() {
            for (const auto& dir : existing_cgroup_dirs(cgroup)) rmdir(dir.c_str());
        }
    } remove_cgroup_parent{"/" + options.cgroup_parent};
    ContainerRuntime runtime(options);
    const std::string script = "echo up > /home/user/up; exec sleep 1000";

    // Bare runc on one prepared bundle.
    SandboxSpec spec;
    spec.id = "bare";
    spec.template_rootfs = rootfs.path();
    spec.state_root = state.path();
    ContainerPaths paths(state.path(), "bare");
    for (const auto& dir : {paths.upper, paths.work, paths.rootfs, paths.run_dir})
        fs::create_directories(dir);
    mount_overlay(rootfs.path(), paths.upper, paths.work, paths.rootfs);
    struct Unmount {
        fs::path target;
        ~Unmount() {
            try {
                unmount_all(target);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "%s\n", e.what());
            }
        }
    } unmount{paths.rootfs};
    // Interleaved, so the load of this noisy machine hits both alike.
    std::vector<double> ours_start, ours_running, ours_kill, bare_running, bare_kill;
    for (int i = 0; i < runs; ++i) {
        {
            SandboxSpec ours;
            ours.id = "bench-" + std::to_string(i);
            ours.template_rootfs = rootfs.path();
            ours.entry = {"/bin/sh", "-c", script};
            ours.state_root = state.path();
            auto t0 = Clock::now();
            auto box = runtime.start_container(ours);
            ours_start.push_back(ms_since(t0));
            fs::path marker = box->paths().upper / "home/user/up";
            if (!testing::eventually([&] { return fs::exists(marker); })) {
                std::fprintf(stderr, "entry never ran: %s\n", box->log_tail().c_str());
                return 1;
            }
            ours_running.push_back(ms_since(t0));
            auto t1 = Clock::now();
            box->kill();
            ours_kill.push_back(ms_since(t1));
        }
        std::string id = "bare-" + std::to_string(i);
        // A fresh marker name each run: the upper dir must not be edited under the mount.
        spec.entry = {"/bin/sh", "-c", "echo up > /home/user/" + id + "; exec sleep 1000"};
        BundleLayout layout;
        layout.rootfs = paths.rootfs;
        layout.run_dir = paths.run_dir;
        layout.cgroup_path = "/" + options.cgroup_parent + "/" + id;
        write_oci_config(make_oci_config(spec, layout), paths.bundle);
        fs::path marker = paths.upper / "home/user" / id;
        auto t0 = Clock::now();
        // Detached runc hands its stdio to the container: give it files, not pipes.
        SpawnOptions run;
        run.argv = {"runc", "--root",   paths.runc_root.string(), "run",
                    "-d",   "--bundle", paths.bundle.string(),    id};
        run.stdout_file = run.stderr_file = paths.console_log.string();
        auto status = ChildProcess::spawn(run).wait();
        if (!status || status->exit_code != 0) {
            std::fprintf(stderr, "runc run -d failed, see %s\n", paths.console_log.c_str());
            return 1;
        }
        bool ran = testing::eventually([&] { return fs::exists(marker); });
        bare_running.push_back(ms_since(t0));
        auto t1 = Clock::now();
        run_process({"runc", "--root", paths.runc_root.string(), "delete", "--force", id});
        bare_kill.push_back(ms_since(t1));
        if (!ran) {
            std::fprintf(stderr, "bare runc: entry never ran: %s\n",
                         testing::read_file(paths.console_log).value_or("").c_str());
            return 1;
        }
        while (waitpid(-1, nullptr, WNOHANG) > 0) {
        }
    }

    std::printf("container runtime, %d runs, rootfs %s\n", runs, rootfs.path().c_str());
    std::printf("%-34s p50 ours %7.1f ms   (p90 %.1f)\n", "start() returns",
                percentile(ours_start, 0.5), percentile(ours_start, 0.9));
    row("start -> entry running (wrote file)", ours_running, bare_running);
    row("kill (everything removed)", ours_kill, bare_kill);
    return 0;
}

int main(int argc, char** argv) {
    // Catch here so destructors (sandbox teardown, temp dirs) run on failure too.
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "runtime_bench: %s\n", e.what());
        return 1;
    }
}
