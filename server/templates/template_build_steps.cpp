// What the worker does for one build: shipped bases into the engine, the user's Dockerfile (or
// the archive's image), deskbox's last layer, and the rootfs both runtimes start from.
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>

#include "common/atomic_file.hpp"
#include "common/utf8.hpp"
#include "server/runtime/container/cgroups.hpp"
#include "server/templates/deskbox_layer.hpp"
#include "server/templates/template_jobs.hpp"

namespace deskbox::templates {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// <image dir>/bases.json (template_store.hpp): the shipped templates' rootfs an image was built
// FROM, for a runtime to take what it needs of theirs (the kernel a VM boots), and the one to
// boot it with when it stands on none (an import, a registry base): `minimal`'s. The kernel
// and init do not depend on the rootfs; the init needs only setpriv in it.
void write_bases(const TemplateService::Hooks& hooks, const std::vector<std::string>& shipped,
                 const fs::path& image_dir) {
    auto rootfs_of = [&](const std::vector<std::string>& names) {
        json rootfs = json::array();
        for (const auto& name : names) {
            try {
                rootfs.push_back(hooks.shipped_rootfs(name).string());
            } catch (const std::exception&) {
            }
        }
        return rootfs;
    };
    atomic_file::write(
        image_dir / "bases.json",
        json{{"shipped_rootfs", rootfs_of(shipped)}, {"boot_from", rootfs_of({"minimal"})}}.dump(
            2) +
            "\n",
        {0644, atomic_file::Durability::power_loss});
}

std::string trim_newlines(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    return s;
}

std::string log_tail(const fs::path& log, std::size_t bytes) {
    std::ifstream in(log, std::ios::binary | std::ios::ate);
    if (!in) return "";
    auto size = static_cast<std::size_t>(in.tellg());
    auto start = size > bytes ? size - bytes : 0;
    in.seekg(static_cast<std::streamoff>(start));
    std::string tail(size - start, '\0');
    in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
    if (start > 0)
        if (auto nl = tail.find('\n'); nl != std::string::npos) tail.erase(0, nl + 1);
    return utf8::to_valid(tail);
}

std::uint64_t tree_bytes(const fs::path& root) {
    std::uint64_t total = 0;
    std::error_code ec;
    std::set<std::pair<dev_t, ino_t>> seen;  // a hard-linked file counts once
    for (fs::recursive_directory_iterator
             it(root, fs::directory_options::skip_permission_denied, ec),
         end;
         it != end; it.increment(ec)) {
        if (ec) break;
        struct stat st {};
        if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
            seen.emplace(st.st_dev, st.st_ino).second)
            total += static_cast<std::uint64_t>(st.st_size);
    }
    return total;
}

}  // namespace

std::string TemplateService::cgroup_of(const Job& j) const {
    return builds_cgroup_ + "/" + j.info.id;
}

void TemplateService::log_line(Job& j, const std::string& line) {
    std::string text = line + "\n";
    if (j.log_fd && ::write(j.log_fd.get(), text.data(), text.size()) > 0) {
        std::lock_guard lock(mutex_);
        j.info.log_bytes += text.size();
    }
    changed_.notify_all();
}

void TemplateService::kill_build_processes(const Job& j) {
    try {
        runtime::remove_cgroup(cgroup_of(j));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deskboxd: build %s: %s\n", j.info.id.c_str(), e.what());
    }
    // The parent of all builds' cgroups goes with the last build (rmdir: only when empty).
    for (const auto& dir : runtime::existing_cgroup_dirs(fs::path(cgroup_of(j)).parent_path()))
        ::rmdir(dir.c_str());
}

TemplateService::StepResult TemplateService::run_engine(Job& j, std::vector<std::string> args,
                                                        bool progress) {
    // The engine's stderr joins its stdout in order: one log, as a terminal would show it.
    SpawnOptions spawn = engine_spawn(std::move(args), &j, true);
    spawn.pipe_stdout = true;
    auto child = ChildProcess::spawn(spawn);
    static const std::regex step_line(R"(STEP (\d+)/(\d+): (.*))");
    StepResult result;
    char buffer[16384];
    std::string pending;
    auto next_disk_check = Clock::now();
    while (true) {
        pollfd pfd{child.stdout_fd().get(), POLLIN, 0};
        int ready = ::poll(&pfd, 1, 200);
        bool eof = false;
        if (ready > 0) {
            auto n = ::read(child.stdout_fd().get(), buffer, sizeof buffer);
            if (n > 0) {
                if (j.log_fd) {
                    [[maybe_unused]] auto w = ::write(j.log_fd.get(), buffer, n);
                }
                pending.append(buffer, static_cast<std::size_t>(n));
                std::lock_guard lock(mutex_);
                j.info.log_bytes += static_cast<std::uint64_t>(n);
                std::size_t nl;
                while ((nl = pending.find('\n')) != std::string::npos) {
                    std::string line = pending.substr(0, nl);
                    pending.erase(0, nl + 1);
                    std::smatch m;
                    if (progress && std::regex_search(line, m, step_line)) {
                        j.info.step = std::stoi(m[1]);
                        j.info.steps = std::stoi(m[2]);
                        j.info.instruction = utf8::to_valid(m[3].str().substr(0, 500));
                    } else if (progress && line.starts_with("--> Using cache")) {
                        ++j.info.cached_steps;
                    }
                }
                changed_.notify_all();
            } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
                eof = true;
            }
        }
        bool cancel;
        {
            std::lock_guard lock(mutex_);
            cancel = j.cancel_requested;
        }
        const bool timed_out = Clock::now() >= j.deadline;
        if (cancel || timed_out) {
            result.cancelled = cancel;
            result.timed_out = !cancel && timed_out;
            child.signal(SIGTERM);
            if (!child.wait(std::chrono::seconds(3))) child.signal(SIGKILL);
            result.status = child.terminate(std::chrono::milliseconds(500));
            kill_build_processes(j);  // RUN steps' processes live in runc's own sessions
            return result;
        }
        if (eof) break;
        // A chatty step turns this loop per output chunk: the disk is read every 200 ms.
        if (Clock::now() < next_disk_check) continue;
        next_disk_check = Clock::now() + std::chrono::milliseconds(200);
        try {
            check_disk_limit(j);
        } catch (const StepFailed&) {
            child.signal(SIGKILL);
            child.terminate(std::chrono::milliseconds(500));
            kill_build_processes(j);
            throw;
        }
    }
    result.status = *child.wait();
    return result;
}

std::string TemplateService::engine_output(Job& j, std::vector<std::string> args) {
    std::string command;
    for (std::size_t i = 0; i < args.size() && i < 3; ++i) command += " " + args[i];
    auto r = run_process(engine_spawn(std::move(args), &j), std::chrono::seconds(600));
    if (r.status.exit_code != 0) {
        log_line(j, "deskbox: buildah" + command + " failed: " + trim_newlines(r.err));
        throw StepFailed(BuildFailure{
            "engine",
            "buildah" + command + " failed: " + utf8::to_valid(trim_newlines(r.err)).substr(0, 500),
            0, "", r.status.exit_code, ""});
    }
    return trim_newlines(r.out);
}

BudOptions TemplateService::bud_options(const Job& j) const {
    BudOptions o;
    o.no_cache = j.request.no_cache;
    o.runc_root = engine_.runc_root;
    if (j.network && j.network->has_interface() && j.netns.valid()) {
        // The holder's, not deskboxd's: the engine's root may open it.
        o.network = "ns:" + j.netns.ns_path("net");
        auto resolv = j.network->resolv_conf();
        if (auto at = resolv.find("nameserver "); at != std::string::npos) {
            auto end = resolv.find('\n', at);
            o.dns = resolv.substr(at + 11, end == std::string::npos ? end : end - at - 11);
        }
    }
    return o;
}

void TemplateService::run(Job& j) {
    {
        std::lock_guard lock(mutex_);
        if (j.cancel_requested) return;
        j.info.state = BuildState::running;
        j.info.started_at = now_rfc3339();
        j.started = Clock::now();
        j.deadline = *j.started + j.request.timeout;
        persist(j);
        changed_.notify_all();
    }
    std::optional<BuildFailure> failure;
    BuildState state = BuildState::succeeded;
    try {
        ensure_engine();
        mount_engine_disk();
        j.disk_used_at_start = engine_disk_used();
        // The engine and every RUN step's processes run in it (rootless runc leaves them there).
        j.cgroup_procs = limit_build_cgroup(j);
        if (j.request.kind == BuildKind::dockerfile)
            build_dockerfile(j);
        else if (!j.request.image.empty())
            import_reference(j);
        else
            import_archive(j);
    } catch (const StepFailed& f) {
        failure = f.failure;
        state = f.failure.code == "cancelled" ? BuildState::cancelled : BuildState::failed;
    } catch (const std::exception& e) {
        failure = BuildFailure{"engine", e.what(), 0, "", std::nullopt, ""};
        state = BuildState::failed;
    }
    if (failure) {
        log_line(j, "deskbox: build " + std::string(to_string(state)) + ": " + failure->message);
        failure->log_tail = log_tail(j.dir / "log", 4000);
    } else {
        log_line(j, "deskbox: template " + j.info.ref.str() + " is ready");
    }
    kill_build_processes(j);
    j.cgroup_procs.clear();
    // The engine's working containers of a failed or stopped build.
    run_process(engine_spawn({"rm", "--all"}), std::chrono::seconds(120));
    j.network.reset();
    j.netns = {};
    finish(j, state, std::move(failure));
    collect_pulls();
}

void TemplateService::import_rootfs_image(Job& j, const fs::path& rootfs, const std::string& image,
                                          std::vector<std::string> config) {
    auto current = run_process(
        engine_spawn({"inspect", "--type", "image", "--format",
                      std::string("{{index .OCIv1.Config.Labels \"") + kRootfsLabel + "\"}}",
                      image}),
        std::chrono::seconds(30));
    if (current.status.exit_code == 0 && trim_newlines(current.out) == rootfs.string()) return;
    log_line(j, "deskbox: importing " + image + " from " + rootfs.string());
    const std::string container = "deskbox-import-" + j.info.id;
    engine_output(j, {"from", "--name", container, "scratch"});
    const fs::path mount = engine_output(j, {"mount", container});
    // Owned by host ids 0..65535 on disk, by the engine's in the image.
    auto copied = copy_across(rootfs, mount, true);
    if (copied.status.exit_code != 0)
        throw StepFailed(BuildFailure{"engine", "cannot import " + image + ": " + copied.err, 0, "",
                                      std::nullopt, ""});
    engine_output(j, {"umount", container});
    config.insert(config.begin(), "config");
    config.insert(config.end(),
                  {"--label", std::string(kRootfsLabel) + "=" + rootfs.string(), container});
    engine_output(j, config);
    engine_output(j, {"commit", "--quiet", "--rm", container, image});
}

void TemplateService::ensure_shipped_base(Job& j, const std::string& name) {
    json definition = hooks_.shipped_definition(name);
    std::vector<std::string> config = {
        "--label",
        std::string(kTemplateLabel) + "=" + name,
        "--label",
        std::string(kSessionLabel) + "=" + definition.value("session", json::object()).dump(),
        "--user",
        "root"};
    const json env = definition.value("env", json::object());
    for (const auto& [k, v] : env.items())
        if (v.is_string()) config.insert(config.end(), {"--env", k + "=" + v.get<std::string>()});
    import_rootfs_image(j, hooks_.shipped_rootfs(name), "localhost/deskbox/" + name + ":latest",
                        std::move(config));
}

namespace {

// buildah config's flags for an image configured as `oci` (an OCI image config's "config").
std::vector<std::string> config_flags(const json& oci) {
    std::vector<std::string> flags;
    // Named, not temporaries: a range-for over items() of a temporary reads freed nodes.
    const json env = oci.value("Env", json::array());
    const json labels = oci.value("Labels", json::object());
    for (const auto& kv : env)
        if (kv.is_string()) flags.insert(flags.end(), {"--env", kv.get<std::string>()});
    for (const auto& [k, v] : labels.items())
        if (v.is_string() && k != kRootfsLabel)
            flags.insert(flags.end(), {"--label", k + "=" + v.get<std::string>()});
    // JSON arrays: buildah takes them as the exec form.
    if (auto cmd = oci.value("Cmd", json()); cmd.is_array())
        flags.insert(flags.end(), {"--cmd", cmd.dump()});
    if (auto entry = oci.value("Entrypoint", json()); entry.is_array())
        flags.insert(flags.end(), {"--entrypoint", entry.dump()});
    if (auto dir = oci.value("WorkingDir", ""); !dir.empty())
        flags.insert(flags.end(), {"--workingdir", dir});
    flags.insert(flags.end(),
                 {"--user", oci.value("User", "").empty() ? "root" : oci.value("User", "")});
    return flags;
}

// The same from a template.json, for records kept before the image's config was: its session
// (the start command already in its autostart), environment and working folder.
json config_of_definition(const json& definition) {
    json oci = {{"Env", json::array()},
                {"Labels", {{kSessionLabel, definition.value("session", json::object()).dump()}}}};
    const json env = definition.value("env", json::object());
    for (const auto& [k, v] : env.items())
        if (v.is_string()) oci["Env"].push_back(k + "=" + v.get<std::string>());
    const std::string base = definition.value("base", "");
    if (base.starts_with("deskbox/")) oci["Labels"][kTemplateLabel] = base.substr(8);
    if (auto dir = definition.value("workdir", ""); !dir.empty()) oci["WorkingDir"] = dir;
    return oci;
}

}  // namespace

void TemplateService::ensure_store_base(Job& j, const TemplateRef& ref) {
    const auto stored = store_.find(ref);
    if (!stored || !fs::exists(store_.rootfs_of(stored->image_id)))
        throw StepFailed(BuildFailure{"base", "template " + ref.str() + " was deleted", 0, "",
                                      std::nullopt, ""});
    // Built here: the engine's final image is the store's, and its user image is what FROM wants.
    auto final_id =
        run_process(engine_spawn({"inspect", "--type", "image", "--format", "{{.FromImageID}}",
                                  "localhost/deskbox-final/" + ref.str()}),
                    std::chrono::seconds(30));
    if (final_id.status.exit_code == 0 && trim_newlines(final_id.out) == stored->image_id) return;
    const json oci = stored->image_config.is_object() ? stored->image_config
                                                      : config_of_definition(stored->definition);
    import_rootfs_image(j, store_.rootfs_of(stored->image_id), "localhost/" + ref.str(),
                        config_flags(oci));
}

void TemplateService::build_dockerfile(Job& j) {
    for (const auto& name : j.shipped_bases) ensure_shipped_base(j, name);
    for (const auto& ref : j.store_bases) ensure_store_base(j, ref);
    for (const auto& image : j.pulls) pull_image(j, image);
    if (j.request.network.enabled()) {
        try {
            // Owned by the engine's user namespace: rootless runc may join it.
            j.netns = engine_ns_->new_network_namespace();
            j.network = hooks_.network(j.info.id, j.request.network, j.netns.ns_path("net"));
        } catch (const std::exception& e) {
            throw StepFailed(BuildFailure{"network",
                                          std::string("cannot set up the build's "
                                                      "network: ") +
                                              e.what(),
                                          0, "", std::nullopt, ""});
        }
    }
    BudOptions bud = bud_options(j);
    bud.context = j.work / "context";
    bud.dockerfile = j.dockerfile;
    bud.image = "localhost/" + j.info.ref.str();
    bud.build_args = j.request.build_args;
    auto result = run_engine(j, bud_args(bud), true);
    if (result.cancelled)
        throw StepFailed(BuildFailure{"cancelled", "cancelled", 0, "", std::nullopt, ""});
    if (result.timed_out)
        throw StepFailed(BuildFailure{
            "timeout",
            "the build ran past its timeout of " + std::to_string(j.request.timeout.count()) + " s",
            0, "", std::nullopt, ""});
    if (result.status.exit_code != 0) {
        check_disk_limit(j);  // what it wrote in its last moments
        BuildFailure f{"step_failed", "", 0, "", std::nullopt, ""};
        {
            std::lock_guard lock(mutex_);
            f.step = j.info.step;
            f.instruction = j.info.instruction;
        }
        static const std::regex exit_status(R"(exit status (\d+))");
        std::smatch m;
        const std::string tail = log_tail(j.dir / "log", 2000);
        std::string last_match;
        for (auto it = std::sregex_iterator(tail.begin(), tail.end(), exit_status);
             it != std::sregex_iterator(); ++it)
            last_match = (*it)[1];
        if (!last_match.empty()) f.exit_code = std::stoi(last_match);
        f.message = f.step
                        ? "step " + std::to_string(f.step) + " (" + f.instruction + ") failed" +
                              (f.exit_code ? " with exit code " + std::to_string(*f.exit_code) : "")
                        : "the build failed before its first step";
        if (auto full = engine_disk_full(j)) {
            full->step = f.step;
            full->instruction = f.instruction;
            full->exit_code = f.exit_code;
            full->message = f.message + ": " + full->message;
            throw StepFailed(*full);
        }
        throw StepFailed(f);
    }
    j.network.reset();
    j.netns = {};
    add_deskbox_layer(j, bud.image);
}

void TemplateService::import_archive(Job& j) {
    const std::string source =
        j.request.archive_format + ":" + upload_path(j.request.upload_id).string();
    log_line(j, "deskbox: importing " + j.request.archive_format);
    auto result = run_engine(j, {"pull", "--policy", "always", source});
    if (result.cancelled)
        throw StepFailed(BuildFailure{"cancelled", "cancelled", 0, "", std::nullopt, ""});
    if (result.timed_out || result.status.exit_code != 0)
        throw StepFailed(BuildFailure{"import_failed",
                                      result.timed_out ? "the import ran past its timeout"
                                                       : "the engine could not read the archive",
                                      0, "", result.status.exit_code, ""});
    // The image the archive held is the last line of the engine's output (its id).
    auto tail = log_tail(j.dir / "log", 200);
    auto last = trim_newlines(tail);
    if (auto nl = last.rfind('\n'); nl != std::string::npos) last = last.substr(nl + 1);
    const std::string image = "localhost/" + j.info.ref.str();
    engine_output(j, {"tag", last, image});
    add_deskbox_layer(j, image);
}

void TemplateService::add_deskbox_layer(Job& j, const std::string& image) {
    const json inspect = json::parse(engine_output(j, {"inspect", "--type", "image", image}));
    auto config = parse_image_config(inspect);
    if (!config.user.empty() && config.user != "user" && config.user != "1000" &&
        config.user != "root" && config.user != "0")
        log_line(j, "deskbox: note: USER " + config.user +
                        " is ignored: the desktop session runs as 'user' (uid 1000)");
    const json definition = make_definition(j.info.ref, config, j.request);
    const fs::path layer = j.work / "layer";
    fs::create_directories(layer);
    atomic_file::write(layer / "contract.sh", contract_script(), {0755});
    atomic_file::write(layer / "template.json", definition.dump(2) + "\n");
    atomic_file::write(layer / "Dockerfile", final_dockerfile(image));
    BudOptions bud = bud_options(j);
    bud.network = "none";
    bud.dns.clear();
    bud.no_cache = j.request.no_cache;
    bud.context = layer;
    bud.dockerfile = layer / "Dockerfile";
    bud.image = "localhost/deskbox-final/" + j.info.ref.str();
    bud.build_args.clear();
    log_line(j, "deskbox: adding deskbox's layer (the runtime contract)");
    const auto before = j.info.log_bytes;
    auto result = run_engine(j, bud_args(bud));
    if (result.cancelled)
        throw StepFailed(BuildFailure{"cancelled", "cancelled", 0, "", std::nullopt, ""});
    if (result.status.exit_code != 0 || result.timed_out) {
        std::string text = log_tail(j.dir / "log", static_cast<std::size_t>(std::min<std::uint64_t>(
                                                       j.info.log_bytes - before, 8000)));
        auto refusal = contract_refusal(text);
        throw StepFailed(BuildFailure{"contract",
                                      refusal
                                          ? "the image cannot run as a deskbox desktop: " + *refusal
                                          : "deskbox's layer failed (does the image have /bin/sh?)",
                                      0, "", result.status.exit_code, ""});
    }
    export_rootfs(j, bud.image);
    // Kept by the engine only as the next build's cache and base; the rootfs is what runs.
    StoredTemplate stored;
    stored.ref = j.info.ref;
    stored.definition = definition;
    stored.base = j.base;
    stored.base_digest = j.base_digest;
    stored.pulled = j.pulled;
    stored.image_config = inspect.at("OCIv1").value("config", json::object());
    stored.layers = config.layers + 1;
    stored.created_at = now_rfc3339();
    stored.build_id = j.info.id;
    {
        std::lock_guard lock(mutex_);
        stored.image_id = j.info.image_id;
    }
    stored.bytes = tree_bytes(store_.rootfs_of(stored.image_id));
    stored.build_seconds = std::chrono::duration<double>(Clock::now() - *j.started).count();
    const auto previous = store_.find(stored.ref);
    store_.put(stored);
    if (previous && previous->image_id != stored.image_id &&
        !(hooks_.in_use && hooks_.in_use(stored.ref)))
        store_.collect_garbage([](const fs::path&) { return false; });
}

std::vector<fs::path> TemplateService::export_references(const Job& j) const {
    std::vector<fs::path> references;
    auto add = [&](const fs::path& rootfs) {
        std::error_code ec;
        if (fs::is_directory(rootfs / "usr", ec) &&
            std::find(references.begin(), references.end(), rootfs) == references.end())
            references.push_back(rootfs);
    };
    for (const auto& name : j.shipped_bases) {
        try {
            add(hooks_.shipped_rootfs(name));
        } catch (const std::exception&) {
        }
    }
    for (const auto& ref : j.store_bases)
        if (auto base = store_.find(ref)) add(store_.rootfs_of(base->image_id));
    if (auto previous = store_.find(j.info.ref)) add(store_.rootfs_of(previous->image_id));
    return references;
}

void TemplateService::export_rootfs(Job& j, const std::string& final_image) {
    const std::string id = engine_output(
        j, {"inspect", "--type", "image", "--format", "{{.FromImageID}}", final_image});
    if (id.size() < 12 || id.find_first_not_of("0123456789abcdef") != std::string::npos)
        throw StepFailed(
            BuildFailure{"engine", "unexpected image id '" + id + "'", 0, "", std::nullopt, ""});
    {
        std::lock_guard lock(mutex_);
        j.info.image_id = id;
    }
    if (fs::exists(store_.rootfs_of(id) / "usr") || fs::exists(store_.rootfs_of(id) / "etc")) {
        log_line(j, "deskbox: rootfs of image " + id.substr(0, 12) + " is already here");
        if (!fs::exists(store_.image_dir(id) / "bases.json"))  // exported before there was one
            write_bases(hooks_, j.shipped_bases, store_.image_dir(id));
        return;
    }
    log_line(j, "deskbox: writing the rootfs of image " + id.substr(0, 12));
    const std::string container = "deskbox-export-" + j.info.id;
    engine_output(j, {"from", "--pull=never", "--name", container, final_image});
    const fs::path mount = engine_output(j, {"mount", container});
    const fs::path temp = store_.image_dir(".tmp-" + j.info.id);
    fs::create_directories(temp / "rootfs");
    // A file equal (size, mtime, mode, owner) to the one at its path in a rootfs this image
    // stands on (the shipped base it was built FROM, this template's previous build) is
    // hard-linked, not copied: the store's rootfses are never written after export, so sharing
    // is safe, and an image of deskbox/minimal plus a few packages costs its packages.
    const auto began = Clock::now();
    RunResult copied;
    std::string how = "one rsync by the engine through an id-shifted view";
    try {
        copied = rsync_out_of_engine(mount, temp / "rootfs", export_references(j));
    } catch (const std::exception& e) {
        log_line(j, std::string("deskbox: note: ") + e.what());
        how = "a tar stream to a stage folder, then rsync";
        copied = export_through_stage(mount, temp, export_references(j));
    }
    engine_output(j, {"umount", container});
    engine_output(j, {"rm", container});
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - began).count();
    log_line(j, "deskbox: rootfs written in " + std::to_string(ms / 1000.0) + " s (" + how + ")");
    std::error_code ec;
    if (copied.status.exit_code != 0) {
        fs::remove_all(temp, ec);
        throw StepFailed(BuildFailure{"engine", "cannot write the rootfs: " + copied.err, 0, "",
                                      std::nullopt, ""});
    }
    write_bases(hooks_, j.shipped_bases, temp);
    fs::rename(temp, store_.image_dir(id), ec);
    if (ec) {
        fs::remove_all(temp, ec);
        if (!fs::exists(store_.rootfs_of(id)))
            throw StepFailed(
                BuildFailure{"engine", "cannot store the rootfs", 0, "", std::nullopt, ""});
    }
}

}  // namespace deskbox::templates
