// Templates users build: uploads of build contexts and image archives, a queue of builds run
// one at a time by buildah (rootless, in a user namespace of the server's: each RUN step's root
// is an unprivileged host id, with a container's capabilities, the build's cgroup limits and
// deskbox's network policy; see docs/ARCHITECTURE.md "Templates users build"), their logs
// (followed from a byte offset), cancel
// and timeouts, and the store of finished templates the sandbox manager creates from. A deskboxd
// killed mid-build leaves nothing: the next one marks the build failed and cleans the engine's
// containers, mounts, cgroups and scratch space.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.hpp"
#include "server/network/sandbox_network.hpp"
#include "server/runtime/container/pinned_user_namespace.hpp"
#include "server/templates/build_types.hpp"
#include "server/templates/buildah.hpp"
#include "server/templates/registry.hpp"
#include "server/templates/template_store.hpp"

namespace deskbox::templates {

class TemplateService {
  public:
    struct Options {
        std::filesystem::path dir;      // <state>/templates
        std::filesystem::path run_dir;  // on tmpfs: the engine's runroot and runc state
        // Host id of the root of the engine's user namespace (ids 0..65535 inside are host ids
        // from it): a slot of --userns-range no sandbox gets. 0: builds are refused, saying
        // `no_engine_reason`.
        std::uint32_t engine_host_base = 0;
        std::string no_engine_reason;
        std::uint64_t max_upload_bytes = 4ull << 30;
        std::chrono::minutes upload_lifetime{60};
        std::size_t builds_kept = 100;  // finished builds remembered
        // The engine's disk (every build's layers, cache and pulled bases), an ext4 image of its
        // own so no build can fill the host's disk; 0: half the state folder's filesystem, at
        // most 32 GiB. A larger size grows it at the next start; a smaller one keeps it.
        std::uint64_t engine_disk_mb = 0;
        // Registries FROM and imports by reference may pull from (none by default).
        RegistryOptions registries;
    };
    // What the service asks the server for.
    struct Hooks {
        // Shipped templates (FROM deskbox/<name>): rootfs (throws if not built), definition.
        std::function<bool(const std::string&)> is_shipped;
        std::function<std::filesystem::path(const std::string&)> shipped_rootfs;
        std::function<nlohmann::json(const std::string&)> shipped_definition;
        // A network for a build's RUN steps (nullptr: none), as a sandbox's with this policy, in
        // the given network namespace (owned by the engine's user namespace).
        std::function<std::shared_ptr<network::SandboxNetwork>(
            const std::string&, const network::NetworkPolicy&, const std::string& netns)>
            network;
        // Whether a sandbox runs or may start from this template.
        std::function<bool(const TemplateRef&)> in_use;
    };

    TemplateService(Options options, Hooks hooks);
    ~TemplateService();  // cancels the running build and waits for it
    TemplateService(const TemplateService&) = delete;
    TemplateService& operator=(const TemplateService&) = delete;

    struct UploadInfo {
        std::string id;
        std::uint64_t bytes = 0;
    };
    // A new upload holding `data` (perhaps only its first part), or the next part at `offset`
    // (which must be the bytes so far: a retried part is refused, not doubled).
    UploadInfo create_upload(std::string_view data);
    UploadInfo append_upload(const std::string& id, std::uint64_t offset, std::string_view data);

    // Checks the request (the Dockerfile's syntax, COPY sources, bases) and queues it.
    BuildInfo start(BuildRequest request);
    BuildInfo build(const std::string& id) const;
    std::vector<BuildInfo> builds() const;
    // The log from `offset`, at most `max_bytes`; waits up to `wait` for more when there is none
    // yet and the build goes on.
    LogChunk log(const std::string& id, std::uint64_t offset, std::size_t max_bytes,
                 std::chrono::milliseconds wait) const;
    BuildInfo cancel(const std::string& id);

    std::vector<StoredTemplate> templates() const { return store_.list(); }
    std::optional<StoredTemplate> find(const TemplateRef& ref) const { return store_.find(ref); }
    std::filesystem::path store_rootfs(const StoredTemplate& t) const {
        return store_.rootfs_of(t.image_id);
    }
    void remove(const TemplateRef& ref);
    bool engine_available() const { return engine_available_; }
    // The store itself: what other nodes pull from, and where pulled images go
    // (template_transfer.hpp).
    TemplateStore& store() { return store_; }
    const TemplateStore& store() const { return store_; }
    // The host id of the engine's root (0: builds are refused).
    std::uint32_t engine_host_base() const { return options_.engine_host_base; }

  private:
    struct Job;
    struct StepResult {
        ExitStatus status;
        bool cancelled = false, timed_out = false;
    };
    class StepFailed;

    // template_service.cpp: requests, queue, records, recovery.
    void worker_loop();
    void recover();
    void persist(const Job& job) const;
    void finish(Job& job, BuildState state, std::optional<BuildFailure> failure);
    std::shared_ptr<Job> job(const std::string& id) const;
    std::filesystem::path upload_path(const std::string& id) const;
    // A build's context, Dockerfile and base images, checked before the engine runs.
    void prepare_context(Job& job);
    // The uploaded context unpacked into `context` as the engine's root.
    void unpack_context(Job& job, const std::filesystem::path& context);
    // The Dockerfile's text (given, or found in the context); sets job.dockerfile.
    std::string load_dockerfile(Job& job, const std::filesystem::path& context);
    // A FROM image (`at`: "Dockerfile line N: "): a template deskbox ships, or one the engine has.
    void check_base_image(Job& job, const std::string& image, const std::string& at,
                          const std::string& where);
    void check_shipped_base(Job& job, std::string name, const std::string& at,
                            const std::string& where);
    // An import's upload: an OCI or Docker archive, handed to the engine's root.
    void check_archive(Job& job);
    // A registry reference (FROM, an import's `image`) the operator allows, or a 400 in `field`.
    ImageReference allowed_image(const std::string& text, const std::string& field,
                                 const std::string& at = {}) const;
    void forget_old_builds();
    // template_build_steps.cpp: what the worker does for one build.
    void run(Job& job);
    void build_dockerfile(Job& job);
    void import_archive(Job& job);
    void import_reference(Job& job);
    // Brings a registry image into the engine's storage (once per digest), named as the
    // Dockerfile wrote it; returns it pinned (registry/repository@sha256:...). A reference
    // pinned to a digest that is here asks the registry nothing; a tag whose registry cannot
    // be reached uses the copy pulled at it before, if one is here (the log says so).
    std::string pull_image(Job& job, const ImageReference& image);
    // The reference's manifest digest and declared size, read in the pull's network; sets the
    // job's registry_unreachable when the registry did not answer.
    std::string resolve_digest(Job& job, const ImageReference& image);
    // The image pulled (`pinned`) named for FROM, noted as the build's and as used now.
    std::string use_pulled(Job& job, const ImageReference& image, const std::string& pinned);
    bool image_here(Job& job, const std::string& image);
    // Removes pulled images that no template stands on, no build uses and none used within
    // --template-pull-keep-h.
    void collect_pulls();
    void ensure_shipped_base(Job& job, const std::string& name);
    // A template of the store as the engine's image localhost/<name>:<tag>, from its rootfs
    // and the config its record keeps.
    void ensure_store_base(Job& job, const TemplateRef& ref);
    // The template `image` (name[:tag], or localhost/name:tag) names, if the store has it whole.
    std::optional<TemplateRef> store_template_named(std::string image) const;
    // `rootfs` committed as the engine's `image`, configured by `config` (buildah config's
    // flags) and labelled with the rootfs it came from; nothing done if it already is.
    void import_rootfs_image(Job& job, const std::filesystem::path& rootfs,
                             const std::string& image, std::vector<std::string> config);
    void add_deskbox_layer(Job& job, const std::string& image);
    void export_rootfs(Job& job, const std::string& final_image);
    StepResult run_engine(Job& job, std::vector<std::string> args, bool progress = false);
    std::string engine_output(Job& job, std::vector<std::string> args);
    // template_engine.cpp: the engine's user namespace, storage and how it is run.
    void start_engine();
    // Mounts the engine's disk (made or grown first) where its storage lives; idempotent.
    void mount_engine_disk();
    bool engine_disk_mounted() const;
    std::filesystem::path engine_disk_image() const;
    std::uint64_t engine_disk_mb() const;  // the size the disk should have
    // A failure saying the engine's disk filled up during the build, or nullopt.
    std::optional<BuildFailure> engine_disk_full(const Job& job) const;
    // The engine disk's used bytes, or 0 when unreadable.
    std::uint64_t engine_disk_used() const;
    // Notes the engine disk's use; throws StepFailed when the running build has written past
    // its disk limit.
    void check_disk_limit(Job& job) const;
    void ensure_engine();
    EnginePaths engine() const;
    // The engine with `args`; with a job: in the build's cgroup (`merge_stderr`: 2>&1).
    SpawnOptions engine_spawn(std::vector<std::string> args, const Job* job = nullptr,
                              bool merge_stderr = false) const;
    // Another tool (skopeo) the same way: in the engine's namespaces, as its root, with its
    // environment, in the build's cgroup and the job's pull network if it has one.
    SpawnOptions engine_tool_spawn(std::vector<std::string> command, const Job* job = nullptr,
                                   bool merge_stderr = false) const;
    // A tar stream from `from` on one side of the id boundary to `to` on the other.
    RunResult copy_across(const std::filesystem::path& from, const std::filesystem::path& to,
                          bool into_engine) const;
    // Writes the engine's mounted image `image` (a path inside it) to `rootfs` on the host in
    // one rsync, run by the engine's root through an id-shifted view of the store's filesystem
    // (files it writes get the ids they have inside, as a shipped rootfs has), hard-linking
    // files unchanged from `references` on that filesystem. Throws RuntimeError if the view
    // cannot be made (a filesystem without idmapped mounts): export through a stage then.
    // The same in two passes, for filesystems without idmapped mounts: a tar stream out of the
    // engine into `temp`/stage (ids as inside), then rsync from there to `temp`/rootfs.
    RunResult export_through_stage(const std::filesystem::path& image,
                                   const std::filesystem::path& temp,
                                   const std::vector<std::filesystem::path>& references) const;
    RunResult rsync_out_of_engine(const std::filesystem::path& image,
                                  const std::filesystem::path& rootfs,
                                  const std::vector<std::filesystem::path>& references) const;
    void log_line(Job& job, const std::string& line);
    void kill_build_processes(const Job& job);
    // Makes the build's cgroup with its limits; the cgroup.procs files the engine joins.
    std::vector<std::filesystem::path> limit_build_cgroup(const Job& job);
    std::string cgroup_of(const Job& job) const;
    BudOptions bud_options(const Job& job) const;
    // Rootfses an export hard-links unchanged files from (rsync --link-dest).
    std::vector<std::filesystem::path> export_references(const Job& job) const;

    Options options_;
    Hooks hooks_;
    EnginePaths engine_;  // `enter` guarded by engine_mutex_ (the namespace may be remade)
    mutable std::mutex engine_mutex_;
    std::mutex pulls_mutex_;             // around each use of the engine disk's PulledImages record
    std::filesystem::path engine_disk_;  // the engine disk's mount point: storage/, tmp/
    bool engine_disk_mounted_ = false;   // guarded by engine_mutex_
    std::optional<runtime::PinnedUserNamespace> engine_ns_;
    TemplateStore store_;
    std::string builds_cgroup_;  // every build's cgroup lies under it (one per state folder)
    bool engine_available_ = false;

    mutable std::mutex mutex_;
    mutable std::condition_variable changed_;  // a log grew or a build's state changed
    std::condition_variable work_;
    std::map<std::string, std::shared_ptr<Job>> jobs_;
    std::deque<std::shared_ptr<Job>> queue_;
    struct Upload {
        std::uint64_t bytes = 0;
        std::chrono::steady_clock::time_point used;
        bool busy = false;
    };
    std::map<std::string, Upload> uploads_;
    bool stopping_ = false;
    std::thread worker_;
};

}  // namespace deskbox::templates
