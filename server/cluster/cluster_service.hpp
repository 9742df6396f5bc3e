// deskboxd's side of a cluster (--cluster): the layer above SandboxManager that the API router
// asks before it serves a request. It places creates on a node (this one or another), sends
// requests for sandboxes other nodes own to them, lists the whole cluster, and keeps this node's
// records in etcd true to what its manager runs. A server without --cluster has none of it.
#pragma once

#include <chrono>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/cluster/cluster_node.hpp"
#include "server/cluster/node_forwarder.hpp"
#include "server/cluster/owner_routing.hpp"
#include "server/http/http_server.hpp"
#include "server/sandbox/sandbox_manager.hpp"

namespace deskbox::server {

struct ClusterConfig {
    std::vector<std::string> etcd;  // client URLs
    std::string node_name;
    std::string advertise;  // this node's API as the others reach it
    std::string secret;     // shared by the nodes; proves a forwarded request came from one
    std::string prefix = "/deskbox/";
    std::chrono::seconds lease_ttl{10};
};

class ClusterService : public OwnerRouting {
  public:
    // Joins the cluster (throws cluster::EtcdError, std::invalid_argument).
    ClusterService(ClusterConfig config, SandboxManager& manager);
    ~ClusterService() override;
    ClusterService(const ClusterService&) = delete;
    ClusterService& operator=(const ClusterService&) = delete;

    // On a clean exit that kills the sandboxes, the node leaves at once; when they are kept for
    // the next server, its record lapses after the lease (a restart within it is no loss).
    void shutdown(bool sandboxes_kept);

    const std::string& node_name() const;

    // Whether `request` came from another node of this cluster (forwarding headers with the
    // right secret): such a request is served here, never forwarded again. A forwarding
    // header without the secret is an ApiError 403.
    bool from_peer(const HttpRequest& request) const;
    // Whether `request` carries the cluster secret (routes only nodes may call).
    bool secret_valid(const HttpRequest& request) const override;

    // For a request about sandbox `id`: nullopt when this node serves it (its own, or unknown
    // to the cluster: the usual 404); else the answer (forwarded to the owner, or 503 node_lost
    // / node_unreachable). When it relayed the connection (upgrades, ports), exchange.taken is
    // set and the returned response is unused.
    std::optional<HttpResponse> route(HttpExchange& exchange, const std::string& id) override;

    // POST /v1/sandboxes: placed by capacity, made here or on the chosen node. Returns the
    // answer to send (201 with the sandbox, or the owner's error). Throws ApiError, or
    // SandboxError from this node's manager.
    HttpResponse create(HttpExchange& exchange, const nlohmann::json& body);
    // A create another node placed here under `id` (header X-Deskbox-Placement).
    std::optional<std::string> placed_id(const HttpRequest& request) const;

    // GET /v1/sandboxes: every sandbox of the cluster, each with its node (lost ones say so).
    nlohmann::json list() const;
    // What inspect adds: the node.
    void annotate(nlohmann::json& described) const;
    // Another node's answer to a request every node answers for itself (GET /v1/usage), or why
    // there is none (`error`: lost, unreachable).
    struct PeerAnswer {
        std::string node;
        unsigned status = 0;
        std::string body;
        std::string error;
        bool lost = false;  // its lease lapsed: not asked
    };
    // GETs (or `method`s) `target` (path and query) on every other node of the cluster, as a
    // peer (served there, never passed on), with `request`'s credentials; one answer per node,
    // in name order. An answer other than 200 has `error` too.
    std::vector<PeerAnswer> ask_peers(const HttpRequest& request, const std::string& target,
                                      http::verb method = http::verb::get) const;
    // For what a node holds alone (a snapshot, an ended sandbox's samples) and this one lacks:
    // asks the others (not when `request` is itself a peer's) and returns the first answer
    // whose status is one of `taken`, as it is (status and JSON body); nullopt when none gave
    // one. `unreachable` gets the nodes that answered neither that nor 404 (lost, failing).
    std::optional<HttpResponse> answer_from_peers(
        const HttpRequest& request, const std::string& target, http::verb method,
        std::initializer_list<unsigned> taken,
        std::vector<std::string>* unreachable = nullptr) const;

    // A snapshot's name is unique in the cluster (a create from it must mean one copy). Before
    // this node saves one named `name`, it takes the name's cluster lock, then every other node
    // is asked whether it holds one (GET /v1/snapshots/{name} as a peer, `request`'s
    // credentials, answered within a few seconds).
    struct SnapshotNameCheck {
        // 409 snapshot_exists naming the node that holds it, or 503 cluster_unavailable naming
        // a live node that did not say (try again); none: go on.
        std::optional<HttpResponse> refusal;
        // Lost nodes (their lease lapsed): not asked, and the save goes on (see ARCHITECTURE,
        // "Named snapshots and forks", In a cluster): the answer warns of them.
        std::vector<std::string> unasked;
        // Without a refusal: held until the save is done, so a node saving the same name at
        // the same moment is refused (409 naming this node) instead of passing the check too.
        std::unique_ptr<cluster::ClusterLock> lock;
    };
    SnapshotNameCheck check_snapshot_name(const HttpRequest& request,
                                          const std::string& name) const;

    // GET /v1/nodes, and drain/undrain.
    nlohmann::json nodes() const;
    nlohmann::json set_drained(const std::string& name, bool drained);

    // Slots of this node promised in etcd for sandboxes about to be made here by this node
    // itself (a fork's copies: they need the source's saved copy, which is here), under the ids
    // they will have, so that from the start they are routed to from any node and placement
    // elsewhere cannot fill the node meanwhile. Given back when destroyed, unless kept.
    class LocalReservation {
      public:
        LocalReservation(ClusterService& cluster, std::vector<std::string> ids)
            : cluster_(cluster), ids_(std::move(ids)) {}
        ~LocalReservation();
        LocalReservation(const LocalReservation&) = delete;
        LocalReservation& operator=(const LocalReservation&) = delete;
        const std::vector<std::string>& ids() const { return ids_; }
        // They were made: their records follow (created_here) and the slots stay theirs.
        void keep(const std::vector<std::shared_ptr<Sandbox>>& made);

      private:
        ClusterService& cluster_;
        std::vector<std::string> ids_;
        bool kept_ = false;
    };
    // `count` slots for sandboxes of `runtime` and `template_name`. Throws ApiError: 429
    // too_many_sandboxes naming the node's capacity when fewer are free (its own sandboxes and
    // those placed on it from any node count), 503 cluster_unavailable when etcd cannot say.
    std::unique_ptr<LocalReservation> reserve_here(const std::string& runtime,
                                                   const std::string& template_name, int count);

    // This node made or removed a sandbox: its record follows at once (else at the next sync).
    void created_here(const Sandbox& sandbox);
    void removed_here(const std::string& id);

    // Figures for /metrics.
    std::string metrics() const;

  private:
    // ask_peers through `forwarder` (its timeouts).
    std::vector<PeerAnswer> ask_peers_via(cluster::NodeForwarder& forwarder,
                                          const HttpRequest& request, const std::string& target,
                                          http::verb method) const;
    HttpResponse place_and_create(HttpExchange& exchange, const nlohmann::json& body);
    // A create from snapshot `name` that more than one node holds (saved while one was lost):
    // ApiError 409 snapshot_ambiguous naming them, rather than a start from either.
    void refuse_ambiguous_snapshot(const HttpRequest& request, const std::string& name) const;
    // Makes the sandbox on this node for a slot reserved under `reserved_id`: 201 with it. A
    // template users built that this node lacks is pulled from a node that holds it first.
    HttpResponse make_here(const nlohmann::json& body, const std::string& reserved_id);

    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// GET /v1/nodes of a server without --cluster: this one node, as a cluster would show it.
nlohmann::json single_node_view(SandboxManager& manager);

inline constexpr const char* kPlacementHeader = "X-Deskbox-Placement";

}  // namespace deskbox::server
