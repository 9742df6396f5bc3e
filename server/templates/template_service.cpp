#include "server/templates/template_service.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <sstream>

#include "common/atomic_file.hpp"
#include "common/random.hpp"
#include "common/utc_time.hpp"
#include "common/utf8.hpp"
#include "server/runtime/container/cgroups.hpp"
#include "server/runtime/container/mounts.hpp"
#include "server/runtime/container/runtime.hpp"
#include "server/templates/dockerfile_check.hpp"
#include "server/templates/template_jobs.hpp"

namespace deskbox::templates {

namespace fs = std::filesystem;
using nlohmann::json;
using Code = TemplateError::Code;

namespace {

constexpr std::size_t kMaxDockerfileBytes = 1 << 20;

bool is_safe_relative(const std::string& path) {
    if (path.empty() || path.front() == '/' || path.find('\0') != std::string::npos) return false;
    for (const auto& part : fs::path(path))
        if (part == "..") return false;
    return true;
}

}  // namespace

void unmount_below(const fs::path& dir) {
    for (const auto& point : runtime::mounts_under(dir)) ::umount2(point.c_str(), MNT_DETACH);
}

std::string now_rfc3339() {
    return utc_rfc3339(std::chrono::system_clock::now());
}

TemplateService::TemplateService(Options options, Hooks hooks)
    : options_(std::move(options)),
      hooks_(std::move(hooks)),
      store_(options_.dir),
      // One parent per state folder: a deskboxd clears its own leftover builds at start and
      // must never touch another's (tests run many deskboxd side by side).
      builds_cgroup_("/" + runtime::ContainerRuntime::cgroup_parent_for(options_.dir) + "-builds") {
    engine_disk_ = options_.dir / "engine" / "disk";
    engine_.root = engine_disk_ / "storage";
    engine_.tmp = engine_disk_ / "tmp";
    engine_.runroot = options_.run_dir / "runroot";
    engine_.runc_root = options_.run_dir / "runc";
    engine_.home = options_.dir / "engine" / "home";
    for (const auto& d : {options_.dir / "builds", options_.dir / "work", options_.dir / "uploads",
                          options_.run_dir})
        fs::create_directories(d);
    start_engine();
    recover();
    collect_pulls();
    worker_ = std::thread([this] { worker_loop(); });
}

TemplateService::~TemplateService() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
        for (auto& [id, j] : jobs_)
            if (!j->info.finished()) j->cancel_requested = true;
    }
    work_.notify_all();
    changed_.notify_all();
    worker_.join();
    // The engine's runroot and runc state are this server's alone (one folder per state folder,
    // on tmpfs): gone with it, or every deskboxd ever started leaves one behind.
    std::error_code ec;
    // The engine's mounts live in its mount namespace, which ends with engine_ns_; a deskboxd
    // that ran buildah as host root left its storage's overlay folder mounted on itself. Then
    // the engine's disk (its loop device goes with the last unmount).
    unmount_below(engine_disk_);
    unmount_below(options_.run_dir);
    fs::remove_all(options_.run_dir, ec);
}

void TemplateService::recover() {
    // Builds a killed deskboxd was running end failed; what their engine left goes.
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(options_.dir / "builds", ec)) {
        std::ifstream in(entry.path() / "build.json");
        if (!in) continue;
        try {
            auto j = std::make_shared<Job>();
            j->info = BuildInfo::from_json(json::parse(in));
            j->dir = entry.path();
            if (!j->info.finished()) {
                j->info.state = BuildState::failed;
                j->info.finished_at = now_rfc3339();
                j->info.failure = BuildFailure{"restarted",
                                               "deskboxd stopped during the build; start it again",
                                               0,
                                               "",
                                               std::nullopt,
                                               ""};
                persist(*j);
            }
            jobs_[j->info.id] = j;
        } catch (const std::exception&) {
            fs::remove_all(entry.path(), ec);
        }
    }
    try {
        runtime::remove_cgroup(builds_cgroup_);
    } catch (const std::exception&) {
    }
    const bool disk = engine_ns_ && engine_disk_mounted();
    if (disk) {
        run_process(engine_spawn({"rm", "--all"}), std::chrono::seconds(120));
        unmount_below(engine_.tmp);
    }
    unmount_below(options_.dir / "work");
    std::vector<fs::path> fresh = {options_.dir / "work", options_.dir / "uploads",
                                   engine_.runc_root};
    if (disk) fresh.push_back(engine_.tmp);
    for (const auto& d : fresh) {
        fs::remove_all(d, ec);
        fs::create_directories(d, ec);
    }
    for (const auto& d : {engine_.tmp, engine_.runc_root})
        if (engine_ns_ && (disk || d != engine_.tmp) &&
            ::chown(d.c_str(), options_.engine_host_base, options_.engine_host_base) != 0)
            throw std::runtime_error("cannot give " + d.string() + " to the engine's root");
    for (const auto& image : fs::directory_iterator(options_.dir / "images", ec))
        if (image.path().filename().string().starts_with(".")) fs::remove_all(image.path(), ec);
}

void TemplateService::persist(const Job& job) const {
    atomic_file::write(job.dir / "build.json", job.info.to_json().dump(2) + "\n");
}

std::shared_ptr<TemplateService::Job> TemplateService::job(const std::string& id) const {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) throw TemplateError(Code::not_found, "no build '" + id + "'", "id");
    return it->second;
}

BuildInfo TemplateService::start(BuildRequest request) {
    if (!engine_available_)
        throw TemplateError(Code::unavailable,
                            "the build engine (buildah) is not installed on this host");
    if (!engine_ns_) throw TemplateError(Code::unavailable, options_.no_engine_reason);
    if (hooks_.is_shipped && hooks_.is_shipped(request.ref.name))
        throw TemplateError(
            Code::conflict,
            "'" + request.ref.name + "' is a template deskbox ships; give yours another name",
            "name");
    auto j = std::make_shared<Job>();
    j->info.id = "bld-" + random::hex(10);
    j->info.kind = request.kind;
    j->info.ref = request.ref;
    j->info.created_at = now_rfc3339();
    j->request = std::move(request);
    j->dir = options_.dir / "builds" / j->info.id;
    j->work = options_.dir / "work" / j->info.id;
    {
        std::lock_guard lock(mutex_);
        for (const auto& [id, other] : jobs_)
            if (!other->info.finished() && other->info.ref == j->info.ref)
                throw TemplateError(
                    Code::conflict,
                    "template " + j->info.ref.str() + " is already being built (build " + id + ")",
                    "name");
        if (!j->request.upload_id.empty()) {
            auto it = uploads_.find(j->request.upload_id);
            if (it == uploads_.end())
                throw TemplateError(Code::not_found,
                                    "no upload '" + j->request.upload_id + "' (it expires " +
                                        "an hour after its last part)",
                                    "upload_id");
            if (it->second.busy)
                throw TemplateError(Code::conflict,
                                    "upload '" + j->request.upload_id + "' is in use", "upload_id");
            it->second.busy = true;
        } else if (j->request.kind == BuildKind::import && j->request.image.empty()) {
            throw TemplateError(Code::invalid,
                                "an import needs the image archive's upload_id, or an image "
                                "in a registry",
                                "upload_id");
        }
    }
    try {
        prepare_context(*j);
        fs::create_directories(j->dir);
        j->log_fd = UniqueFd(
            ::open((j->dir / "log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
        if (!j->log_fd) throw std::runtime_error("cannot create the build's log");
        persist(*j);
    } catch (...) {
        std::error_code ec;
        unmount_below(j->work);
        fs::remove_all(j->work, ec);
        fs::remove_all(j->dir, ec);
        std::lock_guard lock(mutex_);
        if (auto it = uploads_.find(j->request.upload_id); it != uploads_.end())
            it->second.busy = false;
        throw;
    }
    std::lock_guard lock(mutex_);
    jobs_[j->info.id] = j;
    queue_.push_back(j);
    forget_old_builds();
    work_.notify_all();
    return j->info;
}

void TemplateService::check_archive(Job& j) {
    auto listing = run_process({"tar", "-tf", upload_path(j.request.upload_id).string()},
                               std::chrono::seconds(120));
    if (listing.status.exit_code != 0)
        throw TemplateError(Code::invalid, "the upload is not a tar archive", "upload_id");
    std::string format = j.request.archive_format;
    std::istringstream names(listing.out);
    bool oci = false, docker = false;
    for (std::string name; std::getline(names, name);) {
        if (name == "oci-layout" || name == "./oci-layout") oci = true;
        if (name == "manifest.json" || name == "./manifest.json") docker = true;
    }
    if (format.empty()) format = oci ? "oci-archive" : docker ? "docker-archive" : "";
    if (format.empty() || (format == "oci-archive" && !oci) ||
        (format == "docker-archive" && !docker))
        throw TemplateError(
            Code::invalid,
            "the upload is not " +
                (format.empty() ? std::string("an OCI or Docker image archive") : "a " + format) +
                " (an oci-archive has oci-layout, a docker-archive "
                "manifest.json at its top)",
            "upload_id");
    // The engine's root reads it (buildah pull).
    if (::chown(upload_path(j.request.upload_id).c_str(), options_.engine_host_base,
                options_.engine_host_base) != 0)
        throw std::runtime_error("cannot hand the archive to the build engine");
    j.request.archive_format = format;
    j.base = "archive (" + format + ")";
}

ImageReference TemplateService::allowed_image(const std::string& text, const std::string& field,
                                              const std::string& at) const {
    std::string why;
    auto ref = parse_image_reference(text, &why);
    if (!ref) throw TemplateError(Code::invalid, at + why, field);
    if (!registry_allowed(options_.registries, ref->registry))
        throw TemplateError(Code::invalid,
                            at + registry_refusal(options_.registries, ref->registry), field);
    return *ref;
}

void TemplateService::prepare_context(Job& j) {
    fs::create_directories(j.work);
    const auto context = j.work / "context";
    fs::create_directories(context);
    if (j.request.kind == BuildKind::import && !j.request.image.empty()) {
        j.pulls.push_back(allowed_image(j.request.image, "image"));
        j.base = j.pulls.back().str();
        return;
    }
    if (j.request.kind == BuildKind::import) return check_archive(j);
    if (!j.request.upload_id.empty()) unpack_context(j, context);
    const std::string text = load_dockerfile(j, context);
    const std::string where = j.request.dockerfile.empty() ? "dockerfile_path" : "dockerfile";
    auto reading = read_dockerfile(text);
    auto line_of = [](const DockerfileProblem& p) {
        return p.line ? "Dockerfile line " + std::to_string(p.line) + ": " : "Dockerfile: ";
    };
    if (reading.problem)
        throw TemplateError(Code::invalid, line_of(*reading.problem) + reading.problem->message,
                            where);
    if (auto problem = check_copy_sources(reading.summary, context))
        throw TemplateError(Code::invalid, line_of(*problem) + problem->message, where);
    for (const auto& [line, image] : reading.summary.base_images)
        check_base_image(j, image, "Dockerfile line " + std::to_string(line) + ": ", where);
}

void TemplateService::unpack_context(Job& j, const fs::path& context) {
    // Unpacked as the engine's root, an unprivileged id on the host: whatever the archive
    // holds (absolute names, .., links out) can write nowhere but here, and the engine reads
    // every file of it. Owners and modes of the archive are not kept (COPY makes files
    // root's unless --chown says otherwise).
    const std::string engine_root = std::to_string(options_.engine_host_base);
    if (::chown(context.c_str(), options_.engine_host_base, options_.engine_host_base) != 0 ||
        ::chown(upload_path(j.request.upload_id).c_str(), options_.engine_host_base,
                options_.engine_host_base) != 0)
        throw std::runtime_error("cannot prepare the build context");
    auto r = run_process({"setpriv", "--reuid=" + engine_root, "--regid=" + engine_root,
                          "--clear-groups", "tar", "-x", "--no-same-owner", "--no-same-permissions",
                          "-f", upload_path(j.request.upload_id).string(), "-C", context.string()},
                         std::chrono::seconds(600));
    if (r.status.exit_code != 0)
        throw TemplateError(Code::invalid,
                            "the build context is not a tar archive that unpacks: " +
                                utf8::to_valid(r.err.substr(0, 300)),
                            "upload_id");
}

std::string TemplateService::load_dockerfile(Job& j, const fs::path& context) {
    if (!j.request.dockerfile.empty()) {
        j.dockerfile = j.work / "Dockerfile";
        atomic_file::write(j.dockerfile, j.request.dockerfile);
        return j.request.dockerfile;
    }
    if (!is_safe_relative(j.request.dockerfile_path))
        throw TemplateError(Code::invalid, "must be a relative path inside the context",
                            "dockerfile_path");
    j.dockerfile = context / j.request.dockerfile_path;
    // Resolved on the host: a linked folder in the context must not lead out of it.
    std::error_code ec;
    const auto root = fs::canonical(context, ec);
    const auto resolved = fs::weakly_canonical(j.dockerfile, ec);
    auto [end, unused] = std::mismatch(root.begin(), root.end(), resolved.begin(), resolved.end());
    if (ec || end != root.end())
        throw TemplateError(Code::invalid,
                            "'" + j.request.dockerfile_path + "' leads out of the build context",
                            "dockerfile_path");
    if (fs::is_symlink(j.dockerfile) || !fs::is_regular_file(j.dockerfile))
        throw TemplateError(Code::invalid,
                            "no Dockerfile at '" + j.request.dockerfile_path +
                                "' in the build context (give `dockerfile` or "
                                "`dockerfile_path`)",
                            "dockerfile_path");
    if (fs::file_size(j.dockerfile) > kMaxDockerfileBytes)
        throw TemplateError(Code::invalid, "the Dockerfile is larger than 1 MiB",
                            "dockerfile_path");
    std::ifstream in(j.dockerfile, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void TemplateService::check_base_image(Job& j, const std::string& image, const std::string& at,
                                       const std::string& where) {
    if (j.base.empty()) j.base = image;
    if (image.starts_with("deskbox/")) return check_shipped_base(j, image.substr(8), at, where);
    if (names_registry(image)) {
        // Pulled by the build (from the host's side), if the operator allows the registry.
        auto ref = allowed_image(image, where, at);
        if (std::none_of(j.pulls.begin(), j.pulls.end(),
                         [&](const ImageReference& r) { return r.str() == ref.str(); }))
            j.pulls.push_back(ref);
        return;
    }
    if (auto ref = store_template_named(image)) {
        // A template of the store: the engine's image if it is that one, else its rootfs
        // imported (it came from another node, or the engine's storage was made anew).
        if (std::find(j.store_bases.begin(), j.store_bases.end(), *ref) == j.store_bases.end())
            j.store_bases.push_back(*ref);
        return;
    }
    // No engine disk yet: nothing was built or imported here.
    const bool found =
        engine_disk_mounted() &&
        run_process(engine_spawn({"inspect", "--type", "image", image}), std::chrono::seconds(30))
                .status.exit_code == 0;
    if (!found)
        throw TemplateError(Code::invalid,
                            at + "base image '" + image +
                                "' is not here: build FROM deskbox/minimal or "
                                "deskbox/desktop, a template built here, an image "
                                "imported with POST /v1/templates/imports, or an image in "
                                "a registry named in full (HOST[:PORT]/REPOSITORY:TAG) that "
                                "deskboxd's --template-registry allows",
                            where);
}

std::optional<TemplateRef> TemplateService::store_template_named(std::string image) const {
    if (image.starts_with("localhost/")) image.erase(0, 10);
    try {
        auto ref = parse_ref(image);
        if (auto stored = store_.find(ref);
            stored && fs::exists(store_.rootfs_of(stored->image_id)))
            return ref;
    } catch (const std::invalid_argument&) {
    }
    return std::nullopt;
}

void TemplateService::check_shipped_base(Job& j, std::string name, const std::string& at,
                                         const std::string& where) {
    if (auto colon = name.find(':'); colon != std::string::npos) {
        if (name.substr(colon + 1) != "latest")
            throw TemplateError(Code::invalid, at + "deskbox's templates have only the tag latest",
                                where);
        name.resize(colon);
    }
    if (!hooks_.is_shipped || !hooks_.is_shipped(name))
        throw TemplateError(Code::invalid,
                            at + "deskbox ships no template '" + name +
                                "' (FROM deskbox/minimal or deskbox/desktop)",
                            where);
    try {
        hooks_.shipped_rootfs(name);
    } catch (const std::exception& e) {
        throw TemplateError(Code::unavailable, at + e.what(), where);
    }
    if (std::find(j.shipped_bases.begin(), j.shipped_bases.end(), name) == j.shipped_bases.end())
        j.shipped_bases.push_back(name);
}

void TemplateService::forget_old_builds() {
    std::vector<std::shared_ptr<Job>> finished;
    for (const auto& [id, j] : jobs_)
        if (j->info.finished()) finished.push_back(j);
    if (finished.size() <= options_.builds_kept) return;
    std::sort(finished.begin(), finished.end(),
              [](const auto& a, const auto& b) { return a->info.created_at < b->info.created_at; });
    for (std::size_t i = 0; i + options_.builds_kept < finished.size(); ++i) {
        std::error_code ec;
        fs::remove_all(finished[i]->dir, ec);
        jobs_.erase(finished[i]->info.id);
    }
}

BuildInfo TemplateService::build(const std::string& id) const {
    std::lock_guard lock(mutex_);
    return job(id)->info;
}

std::vector<BuildInfo> TemplateService::builds() const {
    std::lock_guard lock(mutex_);
    std::vector<BuildInfo> out;
    for (const auto& [id, j] : jobs_) out.push_back(j->info);
    std::sort(out.begin(), out.end(),
              [](const BuildInfo& a, const BuildInfo& b) { return a.created_at > b.created_at; });
    return out;
}

LogChunk TemplateService::log(const std::string& id, std::uint64_t offset, std::size_t max_bytes,
                              std::chrono::milliseconds wait) const {
    std::unique_lock lock(mutex_);
    auto j = job(id);
    changed_.wait_for(
        lock, wait, [&] { return stopping_ || j->info.finished() || j->info.log_bytes > offset; });
    LogChunk chunk;
    chunk.offset = offset;
    chunk.state = j->info.state;
    const std::uint64_t size = j->info.log_bytes;
    const bool finished = j->info.finished();
    lock.unlock();
    if (offset > size)
        throw TemplateError(Code::invalid,
                            "offset " + std::to_string(offset) + " is past the log's end (" +
                                std::to_string(size) + " bytes)",
                            "offset");
    std::string bytes;
    std::ifstream in(j->dir / "log", std::ios::binary);
    if (in) {
        in.seekg(static_cast<std::streamoff>(offset));
        bytes.resize(std::min<std::uint64_t>(max_bytes, size - offset));
        in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        bytes.resize(static_cast<std::size_t>(in.gcount()));
    }
    // Never end inside a character: the rest comes with the next read, from next_offset.
    const bool at_end = offset + bytes.size() >= size;
    if (!(at_end && finished)) bytes.resize(utf8::trim_partial(bytes));
    chunk.next_offset = offset + bytes.size();
    chunk.text = utf8::to_valid(bytes);
    chunk.complete = finished && chunk.next_offset >= size;
    return chunk;
}

BuildInfo TemplateService::cancel(const std::string& id) {
    std::unique_lock lock(mutex_);
    auto j = job(id);
    if (j->info.finished()) return j->info;
    j->cancel_requested = true;
    auto queued = std::find(queue_.begin(), queue_.end(), j);
    if (queued != queue_.end()) {
        queue_.erase(queued);
        lock.unlock();
        finish(*j, BuildState::cancelled,
               BuildFailure{"cancelled", "cancelled before it started", 0, "", std::nullopt, ""});
        return build(id);
    }
    // The worker sees the flag within a poll and stops the engine.
    changed_.wait_for(lock, std::chrono::seconds(30), [&] { return j->info.finished(); });
    return j->info;
}

void TemplateService::remove(const TemplateRef& ref) {
    if (!store_.find(ref))
        throw TemplateError(Code::not_found, "no template '" + ref.str() + "'", "name");
    if (hooks_.in_use && hooks_.in_use(ref))
        throw TemplateError(
            Code::conflict,
            "template " + ref.str() + " is in use by a sandbox; delete the sandboxes first",
            "name");
    store_.remove(ref);
    if (engine_ns_ && engine_disk_mounted())
        run_process(engine_spawn({"rmi", "localhost/" + ref.str()}), std::chrono::seconds(60));
    store_.collect_garbage([](const fs::path&) { return false; });
    collect_pulls();
}

void TemplateService::finish(Job& j, BuildState state, std::optional<BuildFailure> failure) {
    std::lock_guard lock(mutex_);
    j.info.state = state;
    j.info.failure = std::move(failure);
    j.info.finished_at = now_rfc3339();
    if (j.started)
        j.info.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - *j.started).count();
    j.log_fd.reset();
    persist(j);
    changed_.notify_all();
}

void TemplateService::worker_loop() {
    while (true) {
        std::shared_ptr<Job> next;
        {
            std::unique_lock lock(mutex_);
            work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
            if (stopping_) {
                for (auto& queued : queue_) {
                    queued->info.state = BuildState::cancelled;
                    queued->info.failure =
                        BuildFailure{"cancelled", "deskboxd stopped", 0, "", std::nullopt, ""};
                    queued->info.finished_at = now_rfc3339();
                    persist(*queued);
                }
                queue_.clear();
                return;
            }
            next = queue_.front();
            queue_.pop_front();
        }
        run(*next);
        std::error_code ec;
        unmount_below(next->work);
        fs::remove_all(next->work, ec);
        std::lock_guard lock(mutex_);
        if (auto it = uploads_.find(next->request.upload_id); it != uploads_.end()) {
            it->second.busy = false;
            it->second.used = std::chrono::steady_clock::now();
        }
    }
}

}  // namespace deskbox::templates
