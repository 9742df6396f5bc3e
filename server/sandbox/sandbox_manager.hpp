// The registry of sandboxes: create (validating the request), find, kill, timeouts, restart
// safety (leftovers of a crashed predecessor are removed at start), and the figures /metrics
// reports.
#pragma once

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/unique_fd.hpp"
#include "server/network/network_core.hpp"
#include "server/network/network_policy.hpp"
#include "server/network/sandbox_network.hpp"
#include "server/runtime/runtime.hpp"
#include "server/runtime/runtime_registry.hpp"
#include "server/sandbox/copy_requests.hpp"
#include "server/sandbox/create_request.hpp"
#include "server/sandbox/sandbox.hpp"
#include "server/secrets/secret_store.hpp"
#include "server/snapshots/snapshot_store.hpp"
#include "server/templates/template_service.hpp"

namespace deskbox::server {

struct ManagerOptions {
    std::filesystem::path state_dir = "/var/lib/deskbox";
    std::filesystem::path images_dir;      // the repo's images/ (template definitions)
    std::filesystem::path template_cache;  // where built rootfs live (DESKBOX_CACHE)
    std::filesystem::path agent_binary;    // deskbox-agent to put into sandboxes
    // PEM certificate(s) every sandbox trusts from its first process on besides deskboxd's own
    // egress CA (<state>/egress-ca, always trusted): --egress-ca-cert, e.g. the CA of an
    // intercepting upstream proxy. Together written to <state>/agent/egress-ca.pem, which
    // guests see at runtime::kGuestEgressCaPath, and installed in their trust stores before
    // they start (SandboxSpec::egress_ca).
    std::string egress_ca_pem;
    std::string default_runtime = "container";
    std::string default_template = "minimal";
    std::size_t max_sandboxes = 20;
    std::chrono::seconds default_timeout{300};
    std::chrono::seconds max_timeout{24 * 3600};
    // limits.disk_mb of a create that does not say (--default-disk-mb; 0: no cap).
    std::uint64_t default_disk_mb = 8192;
    // Disk caps of running sandboxes and a new one together at most this × the state dir's
    // free space (--disk-overcommit; 0: no check). See disk_commitment.hpp.
    double disk_overcommit = 2.0;
    std::chrono::milliseconds agent_timeout{30'000};
    // template -> how many microVM sandboxes of it to keep restored and ready: a create that
    // asks for nothing else than the template's defaults takes one instead of restoring.
    std::map<std::string, std::size_t> microvm_pool;
    // template -> how many container sandboxes of it to keep started to a ready desktop
    // (--container-pool): a create that fits one (sandbox_pool.cpp) takes it; its network
    // policy, timeout and metadata are applied at the claim. Pooled ones count against
    // max_sandboxes; a create that finds the server full of them ends one to make room.
    std::map<std::string, std::size_t> container_pool;
    // `network` of a create that does not say (--default-network; like E2B: the internet).
    network::NetworkPolicy default_network = network::NetworkPolicy::open();
    // The egress proxy and DNS filter (--dns-upstream, --public-range).
    network::NetworkOptions network;
    // Container sandboxes get a user namespace of their own with a slot of these host ids
    // (--userns-range; checked against the host's accounts at start). false: guest ids are
    // host ids (--userns false; weaker, for kernels without idmapped mounts).
    bool user_namespaces = true;
    // A volume a microVM wrote (its kernel had the raw image) is mounted on the host again,
    // after e2fsck, only when true: the host's kernel would parse a filesystem a guest made.
    bool mount_guest_written_volumes = false;
    runtime::HostIdRange host_ids;
    // Templates users build: where the engine keeps its locks and runc state (a tmpfs), and
    // the largest upload (build context or image archive).
    std::filesystem::path templates_run_dir = "/run/deskbox-templates";
    std::uint64_t max_template_upload_bytes = 4ull << 30;
    // Registries a Dockerfile's FROM or an import by reference may pull from
    // (--template-registry; none by default), the pull's timeout and size limit.
    templates::RegistryOptions template_registries;
    // The build engine's disk in MiB (--template-disk-gb); 0: half the state folder's
    // filesystem, at most 32 GiB.
    std::uint64_t template_engine_disk_mb = 0;
    // Given to every sandbox (Sandbox::set_audit_listener): deskboxd's lifecycle events.
    Sandbox::AuditListener audit_listener;
};

// What a fork made: the copies (started), the kind of save they came from, and its cost.
struct ForkResult {
    std::vector<std::shared_ptr<Sandbox>> sandboxes;
    runtime::CopyKind kind = runtime::CopyKind::filesystem;
    long long save_ms = 0, total_ms = 0;
    // POST /v1/sandboxes/{id}/fork's answer; each copy described with or without its tokens.
    nlohmann::json to_json(bool with_tokens) const;
};

class SandboxManager {
  public:
    // `runtimes`: what a create's "runtime" names (deskboxd: container and microvm; tests and
    // the HTTP fuzzer: a FakeRuntime).
    SandboxManager(ManagerOptions options, runtime::RuntimeRegistry runtimes);
    ~SandboxManager();  // kills every sandbox (see keep_sandboxes_on_exit)
    SandboxManager(const SandboxManager&) = delete;
    SandboxManager& operator=(const SandboxManager&) = delete;

    // Takes over the microVM sandboxes a previous server saved to snapshots (paused; a
    // resume restores them); returns their ids. Unusable ones are removed.
    std::vector<std::string> adopt_snapshots();
    // Takes over the container and microVM sandboxes a previous server left running (it
    // exited keeping them, or crashed): same ids, tokens and deadlines; agent, mirror, VNC and
    // network are connected anew (a microVM keeps its router, which its QEMU held). Returns their
    // ids; one that cannot be adopted is left for clean_leftovers, with an audit line saying why.
    // Call before clean_leftovers.
    std::vector<std::string> adopt_running();
    // What the destructor does with running sandboxes: kill them (the default), or leave the
    // ones the runtime can keep running for the next server (an upgrade's SIGTERM).
    void keep_sandboxes_on_exit(bool keep) { keep_on_exit_ = keep; }
    // Removes what a crashed predecessor left; returns the ids it cleaned. Saved snapshots
    // are not leftovers: call adopt_snapshots first.
    std::vector<std::string> clean_leftovers();
    // Recordings outlive their sandboxes: <state>/recordings/<recording id>.mp4 (+ .events.jsonl).
    std::filesystem::path recordings_dir() const { return options_.state_dir / "recordings"; }

    // Throws SandboxError. `id`: the id a cluster reserved for it (sb- and 12 hex digits); empty:
    // a new one. A ready pooled sandbox keeps its own id, so callers read the id it returns.
    std::shared_ptr<Sandbox> create(const nlohmann::json& request, const std::string& id = {});
    // What a create asks to run, validated as create would (SandboxError, invalid, for a bad
    // request, naming the field): where a cluster may place it.
    struct Placement {
        std::string runtime;
        std::string template_name;
    };
    Placement placement_of(const nlohmann::json& request) const;
    std::shared_ptr<Sandbox> find(const std::string& id) const;  // throws SandboxError (not_found)
    std::vector<std::shared_ptr<Sandbox>> list() const;
    // Ends it and answers what it was, as every lifecycle answer does: the sandbox object
    // (describe, without tokens) with state "killed". Throws SandboxError (not_found).
    nlohmann::json kill(const std::string& id);
    void set_timeout(const std::string& id, const nlohmann::json& body);
    // PATCH .../network: Sandbox::change_network with the secrets its rules name checked.
    nlohmann::json change_network(Sandbox& sandbox, const NetworkChange& change);

    const ManagerOptions& options() const { return options_; }
    std::map<std::string, std::size_t> count_by_state() const;
    std::vector<std::string> template_names() const;
    std::vector<std::string> runtime_names() const;
    // What each template offers here: the runtimes it is built for, whether a microVM template
    // snapshot of it exists, how many pooled microVMs of it wait, a user template's image. Looked
    // up at most once a minute (a new snapshot shows up by then), and again as soon as a user
    // template was stored or removed (a build, a pull from another node, a delete).
    struct TemplateOffer {
        std::vector<std::string> runtimes;
        bool template_snapshot = false;
        std::size_t pool_ready = 0;
        std::string fast_start_runtime;  // the runtime the two above are about
        std::string image_id;            // a template users built: its store image
    };
    std::map<std::string, TemplateOffer> template_offers() const;
    network::NetworkService& network_service() { return *network_; }
    // Templates users build or import (server/templates/).
    templates::TemplateService& templates() { return *templates_; }
    // Volumes (server/volumes/): named filesystems sandboxes mount.
    volumes::VolumeStore& volumes() { return *volumes_; }
    // Named snapshots (server/snapshots/): saved copies of sandboxes that outlive them.
    snapshots::SnapshotStore& snapshots() { return *snapshots_; }
    // Secrets (server/secrets/): write-only values credential rules inject.
    secrets::SecretStore& secrets() { return *secrets_; }
    // Saves sandbox `id` as a named snapshot. Throws SandboxError (not_found, conflict
    // snapshot_exists, no_space).
    snapshots::SnapshotInfo snapshot_sandbox(const std::string& id, const SnapshotRequest& request);
    // Starts `request.count` copies of sandbox `id` from one save of it; the source runs on.
    // All or none: one that fails takes the others with it. `ids`: the copies' ids (a cluster
    // reserved slots under them; as many as the count), or empty for new ones. Throws
    // SandboxError (conflict, too_many_sandboxes when the server has fewer free places than
    // the count).
    ForkResult fork(const std::string& id, const ForkRequest& request,
                    const std::vector<std::string>& ids = {});
    // Whether a sandbox was created from `ref` ("name:tag"; "name" means name:latest).
    bool template_in_use(const templates::TemplateRef& ref) const;

  private:
    // Builds one adopted sandbox of its server record (network attached, not yet reattached).
    using AdoptOne = std::function<std::shared_ptr<Sandbox>(
        const std::string& id, const nlohmann::json& record, const SandboxConfig& net_config,
        const std::filesystem::path& audit_path)>;
    // Adopts each of `ids` whose record names `runtime_name`: `take` builds it, then its agent
    // must answer within `reattach_timeout`. One that fails is left for clean_leftovers, with
    // an audit line saying why.
    std::vector<std::string> adopt_each(const std::vector<std::string>& ids,
                                        const std::string& runtime_name,
                                        std::chrono::milliseconds reattach_timeout,
                                        const AdoptOne& take);
    // The request checked against this server's defaults (SandboxError, invalid, naming the field).
    CreateRequest parse_create(const nlohmann::json& request) const;
    runtime::Runtime& runtime_for(const std::string& name) const;  // invalid if unknown
    std::filesystem::path template_rootfs(const std::string& name) const;
    std::vector<std::string> shipped_template_names() const;  // images/templates/*
    // A template users built ("name" or "name:tag"), when `name` is one.
    std::optional<templates::StoredTemplate> user_template(const std::string& name) const;
    void start_template_service();
    // Why the template engine cannot have a user namespace of its own here (empty: it can).
    std::string engine_ids_problem() const;
    nlohmann::json template_definition(const std::string& name) const;
    void reaper_loop();
    // Builds and boots a sandbox (not registered). `pooled`: made ahead for the pool.
    // `id`: the sandbox's id, or empty for a new one.
    // `copy_dir`: start from that saved copy (a named snapshot's or a fork's).
    std::shared_ptr<Sandbox> start_sandbox(const nlohmann::json& request, SandboxConfig config,
                                           const nlohmann::json& definition,
                                           const std::string& id = {},
                                           const std::filesystem::path& copy_dir = {});
    // create(), from the copy in `copy_dir` when it is not empty.
    std::shared_ptr<Sandbox> create_sandbox(const nlohmann::json& request, const std::string& id,
                                            const std::filesystem::path& copy_dir);
    // A create naming "snapshot": the snapshot's settings with the request's on top (invalid
    // for a field the snapshot fixes and the request changes; not_found for an unknown one).
    nlohmann::json request_from_snapshot(const nlohmann::json& request) const;
    // Boots `sandbox` from the copy in `dir` (SandboxError: invalid when the runtime cannot,
    // conflict when the copy does not fit `spec`).
    void boot_from_copy(Sandbox& sandbox, runtime::Runtime& runtime,
                        const runtime::SandboxSpec& spec, const std::filesystem::path& dir,
                        std::chrono::milliseconds timeout);
    // A ready pooled sandbox for this request, or null (none, or the request does not fit one).
    std::shared_ptr<Sandbox> take_pooled(const nlohmann::json& request,
                                         const SandboxConfig& config);
    // Whether a pooled sandbox made with `pooled` can serve a create asking for `asked`.
    bool fits_pool(const nlohmann::json& request, const SandboxConfig& asked,
                   const SandboxConfig& pooled) const;
    void pool_loop();
    // Makes one sandbox of `target` for the pool and waits until its desktop is ready; null
    // when that failed (logged).
    struct PoolTarget {
        std::string runtime, template_name;
        std::size_t size = 0;
    };
    std::shared_ptr<Sandbox> make_pooled(const PoolTarget& target);
    // Disk caps promised to running, starting and pooled sandboxes (disk_commitment.hpp).
    std::uint64_t promised_disk_mb_locked() const;
    // Whether a new sandbox capped at `disk_mb` fits the disk commitment now.
    bool disk_fits_locked(std::uint64_t disk_mb, std::uint64_t free_mb) const;
    // Takes one waiting pooled sandbox out of the pool, for the caller to end and give its place
    // to a create (null: none waits).
    std::shared_ptr<Sandbox> take_evictable_locked();
    // The host side of a sandbox's network and what its runtime needs from it.
    // `existing_netns`: an adopted container's namespace, or an adopted microVM's router
    // (SandboxNetwork::Options).
    std::shared_ptr<network::SandboxNetwork> make_network(const SandboxConfig& config,
                                                          const std::string& existing_netns = {});
    static runtime::NetworkAttachment attachment_for(
        const std::shared_ptr<network::SandboxNetwork>& network);
    // For a microVM template snapshot: a network that reaches nothing, made on first use.
    runtime::NetworkAttachment throwaway_attachment();
    std::size_t pooled_count_locked() const;
    // Places a new sandbox of its own (not a pooled one claimed) can still take.
    std::size_t free_places_locked() const;
    // Every secret the policy's credential rules name exists, else SandboxError (invalid,
    // secret_not_found) naming `field`.
    void check_policy_references(const network::NetworkPolicy& policy,
                                 const std::string& field = "network.rules") const;
    // The mounts of config.volumes for sandbox `id` (SandboxError naming volumes[i]:
    // not_found unknown, conflict a second writer, invalid a runtime that cannot mount them).
    std::vector<volumes::VolumeLease> acquire_volumes(const SandboxConfig& config,
                                                      const runtime::Runtime& runtime);
    // <state>/namespaces/<id>: a container sandbox's pinned user and network namespaces.
    std::filesystem::path namespaces_dir(const std::string& id) const;

    ManagerOptions options_;
    UniqueFd state_lock_;  // flock of <state>/deskboxd.lock: one server per state dir
    runtime::HostIdSlots host_id_slots_{options_.host_ids};
    runtime::HostIdSlots::Lease engine_ids_;  // the template engine's: the range's last slot
    std::filesystem::path agent_dir_;
    // Before the runtimes and sandboxes: it outlives every sandbox network.
    std::unique_ptr<network::NetworkService> network_;
    // Before the sandboxes: their leases unmount through it.
    std::unique_ptr<volumes::VolumeStore> volumes_;
    std::unique_ptr<snapshots::SnapshotStore> snapshots_;
    std::unique_ptr<secrets::SecretStore> secrets_;
    runtime::RuntimeRegistry runtimes_;

    mutable std::mutex mutex_;
    std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
    std::size_t starting_ = 0;
    std::uint64_t starting_disk_mb_ = 0;  // the disk caps of the starting_ ones
    mutable std::map<std::string, std::filesystem::path> rootfs_cache_;  // template -> rootfs
    // template_offers() without the pool's counts, and when it was looked up.
    mutable std::mutex offers_mutex_;
    mutable std::map<std::string, TemplateOffer> built_offers_;
    mutable std::chrono::steady_clock::time_point offers_at_{};
    mutable std::uint64_t offers_store_generation_ = 0;  // the user templates they were read at
    std::condition_variable reaper_wake_;
    bool stopping_ = false;
    std::atomic<bool> keep_on_exit_{false};
    std::thread reaper_;
    // The runtime ManagerOptions::microvm_pool fills: the first with template snapshots
    // (empty: none has them).
    std::string pool_runtime_;
    // What the pool keeps: microvm_pool's and container_pool's templates with their runtimes.
    std::vector<PoolTarget> pool_targets_;
    // (runtime, template) -> ready sandboxes
    std::map<std::pair<std::string, std::string>, std::vector<std::shared_ptr<Sandbox>>> pool_;
    std::condition_variable pool_wake_;
    std::thread pool_filler_;
    // Last: its builds use the network service, and it goes before anything it asks.
    std::unique_ptr<templates::TemplateService> templates_;
};

}  // namespace deskbox::server
