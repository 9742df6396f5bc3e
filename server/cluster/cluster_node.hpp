// This deskboxd as a member of a cluster: its record in etcd kept alive under a lease, a
// watched view of every node and sandbox record, and the transactions that place, record and
// release sandboxes (cluster_records.hpp has the keys). Nothing here knows HTTP or sandboxes:
// the server tells it what it runs through LocalNode, and asks it where things are.
//
// Liveness is the lease: a node that stops renewing it (crash, SIGSTOP, partition) vanishes
// from nodes/ after the lease's TTL, and every other node then shows its sandboxes as lost.
// When it comes back it registers again with a new lease, under the same name, and its
// sandboxes are simply there again (their records never moved).
//
// Every heartbeat also brings this node's sandbox records in line with LocalNode's list: new
// ones are recorded, changed ones (state, summary) rewritten, vanished ones released. The
// explicit record_local/release calls only make that happen sooner.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "server/cluster/cluster_records.hpp"
#include "server/cluster/etcd_client.hpp"
#include "server/cluster/placement.hpp"

namespace deskbox::cluster {

// What the server tells the cluster about itself.
class LocalNode {
  public:
    virtual ~LocalNode() = default;
    // Capacity, memory, runtimes and templates (name, advertise and times are filled in).
    virtual NodeRecord facts() = 0;
    // The sandboxes running here now (node is filled in).
    virtual std::vector<SandboxRecord> local_sandboxes() = 0;
};

struct ClusterOptions {
    std::vector<std::string> endpoints;  // etcd client URLs
    std::string node_name;
    std::string advertise;  // "http://host:port" the other nodes reach this one at
    std::string prefix = "/deskbox/";
    std::chrono::seconds lease_ttl{10};
    std::string version;
    std::uint64_t min_memory_available_mb = 256;
};

// No node can take a sandbox (reason names why); capacity_exhausted: only because all are full.
class PlacementError : public std::runtime_error {
  public:
    PlacementError(const std::string& reason, bool capacity_exhausted)
        : std::runtime_error(reason), capacity_exhausted_(capacity_exhausted) {}
    bool capacity_exhausted() const { return capacity_exhausted_; }

  private:
    bool capacity_exhausted_;
};

// A node as GET /v1/nodes shows it.
struct NodeStatus {
    std::string name, advertise;
    bool alive = false, drained = false;
    std::size_t sandboxes = 0;         // records naming it
    std::optional<NodeRecord> record;  // while alive
};

// Where a sandbox lives, as the view knows it.
struct SandboxLocation {
    SandboxRecord record;
    bool node_alive = false;
    std::string advertise;  // the owner's URL while it is alive
};

class ClusterNode {
  public:
    // Registers at once (throws EtcdError if etcd cannot be reached, std::invalid_argument for
    // bad options or a name another live node uses) and starts the heartbeat and the watch.
    ClusterNode(ClusterOptions options, LocalNode& local);
    // Stops the heartbeat and the watch. With `leave`, the node's record goes at once (its lease
    // is revoked); without, it lapses after the TTL, so a restart within it is not seen as a loss.
    void stop(bool leave);
    ~ClusterNode();  // stop(false) if not stopped
    ClusterNode(const ClusterNode&) = delete;
    ClusterNode& operator=(const ClusterNode&) = delete;

    const std::string& name() const;
    const ClusterOptions& options() const;

    // Picks a node for a new sandbox and records it there ("creating"), in one transaction
    // that checks the node's allocation was not changed since read. Returns the node's name.
    // Throws PlacementError, or EtcdError.
    std::string reserve(const std::string& id, const PlacementRequest& request);
    // Slots on this node for sandboxes it is about to make itself (a fork's copies), recorded
    // "creating" under their ids, in one transaction: all or none, and only while the node's
    // allocation (its own sandboxes and those placed on it from anywhere) stays within
    // `capacity`. False when it would not (`promised`: the allocation seen). Throws EtcdError,
    // std::invalid_argument for an id recorded already.
    bool reserve_here(const std::vector<SandboxRecord>& records, std::size_t capacity,
                      std::size_t* promised = nullptr);
    // The same for a sandbox this node makes without asking (a pool, or one adopted): recorded
    // here even if that goes beyond capacity (it exists already).
    void record_local(const SandboxRecord& record);
    // Updates the record of a sandbox this node owns (state and summary).
    void update(const SandboxRecord& record);
    // Removes the record and gives the slot back (the sandbox is gone). Idempotent.
    void release(const std::string& id);

    // Where `id` lives: the watched view, or etcd itself for one this view has not seen yet.
    std::optional<SandboxLocation> locate(const std::string& id);
    // Every sandbox record of the cluster, with its node's liveness.
    std::vector<SandboxLocation> sandboxes() const;
    std::vector<NodeStatus> nodes() const;
    std::optional<NodeStatus> node(const std::string& name) const;
    void set_drained(const std::string& name, bool drained);  // throws std::invalid_argument

    // A lock only one node holds at a time (`name`, a key segment such as "snapshot-name/x"):
    // a key under this node's lease, so a node that dies or is cut off drops it when the lease
    // lapses. Returns "" when this node took it, else the node that holds it (this one too,
    // for a second taker here). Throws EtcdError.
    std::string try_lock(const std::string& name);
    // Gives it back if this node still holds it (one lost with a lapsed lease is left alone).
    // Throws EtcdError.
    void unlock(const std::string& name);

    // Counters for /metrics and tests.
    std::uint64_t lease_renewals_failed() const;
    std::uint64_t registrations() const;  // 1 + times the lease was lost and made again

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Holds a lock of `node` (try_lock succeeded) until destroyed.
class ClusterLock {
  public:
    ClusterLock(ClusterNode& node, std::string name) : node_(node), name_(std::move(name)) {}
    ~ClusterLock();  // unlock; a failure is said on stderr (the lease ends it anyway)
    ClusterLock(const ClusterLock&) = delete;
    ClusterLock& operator=(const ClusterLock&) = delete;

  private:
    ClusterNode& node_;
    std::string name_;
};

}  // namespace deskbox::cluster
