// The build engine's side of the id boundary: buildah runs rootless in a user namespace of the
// server's (runtime::PinnedUserNamespace), whose root is host id `engine_host_base`; its storage
// and scratch folders belong to that id; each build's engine runs in the build's cgroup, which
// carries the limits; files cross the boundary as tar streams (numeric ids, xattrs, ACLs), each
// side's tar running as that side's root.
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "common/atomic_file.hpp"
#include "server/runtime/container/cgroups.hpp"
#include "server/runtime/container/mounts.hpp"
#include "server/runtime/runtime_util.hpp"
#include "server/templates/template_jobs.hpp"

namespace deskbox::templates {

namespace fs = std::filesystem;

namespace {

// Joins the cgroup.procs files before "--" (0: the writing shell itself), then runs the rest.
constexpr const char* kJoinThenRun =
    "while [ \"$1\" != -- ]; do echo 0 > \"$1\" || exit 125; shift; done; shift; exec \"$@\"";

// What both tars keep: ids as numbers, modes, times, extended attributes (file capabilities:
// the kernel converts them at the boundary) and ACLs.
constexpr const char* kTarKeep = "--numeric-owner --xattrs --xattrs-include='*' --acls";

// The mount point `path` lies below (the deepest one).
fs::path mount_point_of(const fs::path& path) {
    fs::path best = "/";
    for (const auto& entry : runtime::read_mountinfo()) {
        const auto rel = path.lexically_relative(entry.mount_point);
        if (!rel.empty() && *rel.begin() != ".." &&
            entry.mount_point.native().size() > best.native().size())
            best = entry.mount_point;
    }
    return best;
}

std::string read_text(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

void TemplateService::start_engine() {
    engine_available_ =
        run_process({"buildah", "--version"}, std::chrono::seconds(10)).status.exit_code == 0;
    const std::uint32_t base = options_.engine_host_base;
    if (!engine_available_ || base == 0) return;
    for (const auto& dir : {engine_.home, engine_.runroot, engine_.runc_root}) {
        fs::create_directories(dir);
        if (::chown(dir.c_str(), base, base) != 0)
            throw std::runtime_error("cannot give " + dir.string() + " to the engine's root");
    }
    // The disk is made by the first build; one made before (or left mounted by a deskboxd that
    // was killed) holds the cache and the images built here, and serves at once.
    std::error_code ec;
    if (fs::exists(engine_disk_image(), ec) || !runtime::mounts_under(engine_disk_).empty())
        mount_engine_disk();
    try {
        engine_ns_ = runtime::PinnedUserNamespace::create(base);
        engine_.enter = engine_ns_->enter_command();
    } catch (const std::exception& e) {
        options_.no_engine_reason =
            std::string("cannot make the build engine's user namespace: ") + e.what();
        options_.engine_host_base = 0;
    }
}

fs::path TemplateService::engine_disk_image() const {
    return options_.dir / "engine" / "disk.ext4";
}

std::uint64_t TemplateService::engine_disk_mb() const {
    if (options_.engine_disk_mb) return options_.engine_disk_mb;
    const auto usage = runtime::disk_usage(options_.dir);
    const std::uint64_t half = usage ? (usage->size_bytes / 2) >> 20 : 0;
    return std::clamp<std::uint64_t>(half, 1024, std::uint64_t{32} << 10);
}

void TemplateService::mount_engine_disk() {
    std::lock_guard lock(engine_mutex_);
    if (engine_disk_mounted_) return;
    const fs::path image = engine_disk_image();
    const std::uint32_t base = options_.engine_host_base;
    std::error_code ec;
    fs::create_directories(engine_disk_);
    if (runtime::mounts_under(engine_disk_).empty()) {
        const std::uint64_t size_mb = engine_disk_mb();
        if (!fs::exists(image, ec)) {
            // Storage of the layout before the disk (on the host's filesystem) is only a cache.
            unmount_below(options_.dir / "engine" / "storage");
            fs::remove_all(options_.dir / "engine" / "storage", ec);
            fs::remove_all(options_.dir / "engine" / "tmp", ec);
            runtime::Ext4ImageOptions o;
            o.journal = true;  // the cache of every build: worth keeping whole across a crash
            runtime::make_ext4_image(image, size_mb, o);
        } else if (fs::file_size(image, ec) < (size_mb << 20)) {
            runtime::grow_ext4_image(image, size_mb);
        }
        runtime::mount_ext4_image(image, engine_disk_);
        // The engine's mount namespace is a copy of the host's when it was made: a new one
        // sees the disk (nothing of the engine runs before the first build mounts it).
        if (engine_ns_) {
            engine_ns_ = runtime::PinnedUserNamespace::create(base);
            engine_.enter = engine_ns_->enter_command();
        }
    }
    const fs::path record = options_.dir / "engine" / "ids";
    const std::string ids = engine_ids_record(base);
    const bool same_ids = read_text(record) == ids;
    if (!same_ids) {
        // Written with other ids, or by a deskboxd that ran buildah as host root: the engine
        // could not read it as it is now. The store's rootfses do not depend on it.
        fs::remove(record, ec);
        unmount_below(engine_.root);
        fs::remove_all(engine_.root, ec);
        fs::remove_all(engine_.home, ec);
    }
    for (const auto& dir : {engine_.root, engine_.tmp, engine_.home}) {
        fs::create_directories(dir);
        if (::chown(dir.c_str(), base, base) != 0)
            throw std::runtime_error("cannot give " + dir.string() + " to the engine's root");
    }
    if (!same_ids) atomic_file::write(record, ids);
    engine_disk_mounted_ = true;
}

bool TemplateService::engine_disk_mounted() const {
    std::lock_guard lock(engine_mutex_);
    return engine_disk_mounted_;
}

std::uint64_t TemplateService::engine_disk_used() const {
    const auto usage = runtime::disk_usage(engine_disk_);
    return usage ? usage->used_bytes : 0;
}

void TemplateService::check_disk_limit(Job& j) const {
    const std::uint64_t used = engine_disk_used();
    j.disk_used_peak = std::max(j.disk_used_peak, used);
    const std::uint64_t limit = j.request.limits.disk_mb;
    if (limit == 0) return;
    if (used <= j.disk_used_at_start || used - j.disk_used_at_start <= (limit << 20)) return;
    BuildFailure f{"disk_limit", "", 0, "", std::nullopt, ""};
    {
        std::lock_guard lock(mutex_);
        f.step = j.info.step;
        f.instruction = j.info.instruction;
    }
    f.message = "the build wrote more than its disk limit of " + std::to_string(limit) +
                " MiB (limits.disk_mb)" +
                (f.step ? " in step " + std::to_string(f.step) + " (" + f.instruction + ")" : "");
    throw StepFailed(f);
}

std::optional<BuildFailure> TemplateService::engine_disk_full(const Job& j) const {
    const auto usage = runtime::disk_usage(engine_disk_);
    // Within this of its size the disk was full for the writer (ext4 keeps some for itself;
    // the engine may have removed the step's container since).
    constexpr std::uint64_t kNearlyFull = 64ull << 20;
    if (!usage) return std::nullopt;
    const std::uint64_t peak = std::max(j.disk_used_peak, usage->used_bytes);
    if (peak + kNearlyFull < usage->size_bytes) return std::nullopt;
    return BuildFailure{"disk_full",
                        "the build engine's disk is full (" +
                            std::to_string(usage->size_bytes >> 20) +
                            " MiB, --template-disk-gb): delete templates, or start deskboxd "
                            "with a larger disk",
                        0,
                        "",
                        std::nullopt,
                        ""};
}

void TemplateService::ensure_engine() {
    std::lock_guard lock(engine_mutex_);
    if (!engine_ns_ || engine_ns_->alive()) return;
    // Its holder was killed: a new namespace with the same ids reads the same storage.
    engine_ns_ = runtime::PinnedUserNamespace::create(options_.engine_host_base);
    engine_.enter = engine_ns_->enter_command();
}

EnginePaths TemplateService::engine() const {
    std::lock_guard lock(engine_mutex_);
    return engine_;
}

SpawnOptions TemplateService::engine_spawn(std::vector<std::string> args, const Job* j,
                                           bool merge_stderr) const {
    EnginePaths paths = engine();
    paths.enter.clear();
    return engine_tool_spawn(engine_command(paths, std::move(args)), j, merge_stderr);
}

SpawnOptions TemplateService::engine_tool_spawn(std::vector<std::string> command, const Job* j,
                                                bool merge_stderr) const {
    const EnginePaths paths = engine();
    SpawnOptions spawn;
    spawn.argv = {"sh", "-c", std::string(kJoinThenRun) + (merge_stderr ? " 2>&1" : ""), "sh"};
    if (j)
        for (const auto& procs : j->cgroup_procs) spawn.argv.push_back(procs.string());
    spawn.argv.push_back("--");
    std::vector<std::string> enter = paths.enter;
    // A pull's network namespace (the engine's own, made by deskboxd): joined first, as host
    // root, then the engine's user and mount namespaces.
    if (j && !j->engine_netns.empty() && !enter.empty())
        enter.insert(enter.end() - 1, "--net=" + j->engine_netns);
    for (auto& a : enter) spawn.argv.push_back(std::move(a));
    if (j && !j->engine_netns.empty() && !j->engine_resolv_conf.empty()) {
        // A mount namespace of its own (the engine's root may make one: it owns the user
        // namespace) where /etc/resolv.conf is the network's.
        for (const char* a : {"unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                              "mount --bind \"$0\" /etc/resolv.conf && exec \"$@\""})
            spawn.argv.push_back(a);
        spawn.argv.push_back(j->engine_resolv_conf.string());
    }
    for (auto& a : command) spawn.argv.push_back(std::move(a));
    spawn.env_overrides = engine_env(paths);
    return spawn;
}

RunResult TemplateService::copy_across(const fs::path& from, const fs::path& to,
                                       bool into_engine) const {
    const std::string keep = kTarKeep;
    // A shipped rootfs's device nodes stay behind: the engine's root cannot make them, and
    // every runtime gives a sandbox its own /dev.
    // tar exits 1 for "file changed as we read it": a shipped rootfs's ctime moves whenever an
    // export hard-links one of its files (other servers' too); the content is what it was.
    const std::string pack = std::string("{ ") + (into_engine ? "" : "\"${@:3}\" ") +
                             "tar -C \"$1\" -cf - " + keep +
                             " --warning=no-file-changed '--exclude=./dev/*' .; [ $? -le 1 ]; }";
    const std::string unpack =
        std::string(into_engine ? "\"${@:3}\" " : "") + "tar -C \"$2\" -xpf - " + keep;
    const std::string script = "set -o pipefail; " + pack + " | " + unpack;
    std::vector<std::string> argv = {"bash", "-c", script, "bash", from.string(), to.string()};
    for (const auto& a : engine().enter) argv.push_back(a);
    return run_process(argv, std::chrono::seconds(1800));
}

RunResult TemplateService::rsync_out_of_engine(const fs::path& image, const fs::path& rootfs,
                                               const std::vector<fs::path>& references) const {
    const fs::path target = fs::weakly_canonical(rootfs);
    const fs::path filesystem = mount_point_of(target);
    const fs::path view = engine_.tmp / "export-view";
    fs::create_directories(view);
    engine_ns_->mount_idmapped_inside(filesystem.string(), view.string());
    struct Unmount {
        const runtime::PinnedUserNamespace& ns;
        std::string view;
        ~Unmount() { ns.unmount_inside(view); }
    } unmount{*engine_ns_, view.string()};
    // rsync copies links as links: nothing of the image is followed. Hard links are made
    // within the view (one mount), so only references on the store's filesystem count.
    std::vector<std::string> argv = engine().enter;
    argv.insert(argv.end(), {"rsync", "-aHAX", "--numeric-ids"});
    for (const auto& reference : references) {
        const fs::path canonical = fs::weakly_canonical(reference);
        if (mount_point_of(canonical) == filesystem)
            argv.push_back("--link-dest=" +
                           (view / canonical.lexically_relative(filesystem)).string());
    }
    argv.insert(argv.end(), {"--", image.string() + "/",
                             (view / target.lexically_relative(filesystem)).string() + "/"});
    return run_process(argv, std::chrono::seconds(1800));
}

RunResult TemplateService::export_through_stage(const fs::path& image, const fs::path& temp,
                                                const std::vector<fs::path>& references) const {
    const fs::path stage = temp / "stage";
    fs::create_directories(stage);
    auto copied = copy_across(image, stage, false);
    if (copied.status.exit_code == 0) {
        std::vector<std::string> argv = {"rsync", "-aHAX", "--numeric-ids"};
        for (const auto& reference : references)
            argv.push_back("--link-dest=" + reference.string());
        argv.insert(argv.end(), {"--", stage.string() + "/", (temp / "rootfs").string() + "/"});
        copied = run_process(argv, std::chrono::seconds(1800));
    }
    std::error_code ec;
    fs::remove_all(stage, ec);
    return copied;
}

std::vector<fs::path> TemplateService::limit_build_cgroup(const Job& j) {
    std::vector<fs::path> procs;
    for (const auto& setting : build_cgroup_settings(j.request.limits)) {
        auto dir = runtime::controller_dir(setting.controller, cgroup_of(j));
        if (!dir) continue;
        fs::create_directories(*dir);
        const bool v1 = fs::exists(*dir / setting.v1_file);
        if (!v1 && setting.v2_file.empty()) continue;
        const fs::path file = *dir / (v1 ? setting.v1_file : setting.v2_file);
        std::ofstream out(file);
        out << (v1 ? setting.v1_value : setting.v2_value);
        out.close();
        if (!out)
            throw std::runtime_error("cannot limit the build's cgroup (" + file.string() + ")");
        if (std::find(procs.begin(), procs.end(), *dir / "cgroup.procs") == procs.end())
            procs.push_back(*dir / "cgroup.procs");
    }
    return procs;
}

}  // namespace deskbox::templates
