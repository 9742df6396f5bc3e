#include "server/cluster/cluster_service.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <tuple>

#include "common/random.hpp"
#include "server/cluster/template_pull.hpp"
#include "server/http/api_error.hpp"
#include "server/http/json_body.hpp"
#include "server/templates/template_ref.hpp"

namespace deskbox::server {

using nlohmann::json;

namespace {

// The host's MemAvailable in 256 MiB steps: a node's record is written again only when what
// it says changes, and memory moves a little all the time.
std::uint64_t memory_available_mb() {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    std::uint64_t kib = 0;
    std::string unit;
    while (meminfo >> key >> kib >> unit)
        if (key == "MemAvailable:") return (kib / 1024) / 256 * 256;
    return 0;
}

// Online CPUs, and how many the 1-minute load average leaves idle, in steps of a half (the
// record is rewritten only when it changes).
std::pair<unsigned, double> cpu_facts() {
    const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
    const unsigned cpus = online > 0 ? static_cast<unsigned>(online) : 1;
    double load[1] = {0};
    if (::getloadavg(load, 1) != 1) return {cpus, 0};
    const double idle = std::max(0.0, double(cpus) - load[0]);
    return {cpus, std::floor(idle * 2) / 2};
}

std::string header_value(const HttpRequest& request, const char* name) {
    auto it = request.find(name);
    return it == request.end() ? std::string() : std::string(it->value());
}

std::string client_address(HttpExchange& exchange) {
    if (!exchange.stream) return {};
    boost::system::error_code ec;
    auto peer = exchange.stream->socket().remote_endpoint(ec);
    return ec ? std::string() : peer.address().to_string();
}

// What this node tells the cluster about itself and the sandboxes it runs.
class ManagerFacts : public cluster::LocalNode {
  public:
    explicit ManagerFacts(SandboxManager& manager) : manager_(manager) {}

    cluster::NodeRecord facts() override {
        cluster::NodeRecord record;
        record.capacity_sandboxes = manager_.options().max_sandboxes;
        record.memory_available_mb = memory_available_mb();
        std::tie(record.cpus, record.cpus_idle) = cpu_facts();
        record.runtimes = manager_.runtime_names();
        for (const auto& [name, offer] : manager_.template_offers())
            record.templates[name] = {offer.runtimes, offer.template_snapshot, offer.pool_ready,
                                      offer.image_id, offer.fast_start_runtime};
        for (const auto& snapshot : manager_.snapshots().list())
            record.snapshots.push_back(snapshot.name);
        return record;
    }

    std::vector<cluster::SandboxRecord> local_sandboxes() override {
        std::vector<cluster::SandboxRecord> out;
        for (const auto& sandbox : manager_.list()) out.push_back(record_of(*sandbox));
        return out;
    }

    static cluster::SandboxRecord record_of(const Sandbox& sandbox) {
        json summary = sandbox.describe(false);
        return {sandbox.id(),
                "",
                sandbox.config().runtime_name,
                sandbox.config().template_name,
                to_string(sandbox.status()),
                std::move(summary)};
    }

  private:
    SandboxManager& manager_;
};

// `res`, a JSON error, with the node it is about as error.node.
HttpResponse naming_node(HttpResponse res, const std::string& node) {
    json body = json::parse(res.body());
    body["error"]["node"] = node;
    res.body() = body.dump();
    res.prepare_payload();
    return res;
}

// A template this node lacks could not be brought from any node that holds it.
struct TemplateUnavailable {
    std::string ref, node, reason;
};

}  // namespace

struct ClusterService::Impl {
    ClusterConfig config;
    SandboxManager& manager;
    ManagerFacts facts{manager};
    std::unique_ptr<cluster::ClusterNode> node;
    cluster::NodeForwarder forwarder;
    // For questions every peer answers from its own disk at once (does it hold a snapshot of
    // this name?): a live node silent this long is taken as unable to say, not waited for
    // until its lease lapses (the pooled forwarder's limit is an hour, for commands).
    cluster::NodeForwarder quick_questions;
    cluster::TemplatePuller puller;

    Impl(ClusterConfig c, SandboxManager& m)
        : config(std::move(c)),
          manager(m),
          forwarder(cluster::ForwarderOptions{config.node_name, config.secret}),
          quick_questions(cluster::ForwarderOptions{config.node_name, config.secret,
                                                    std::chrono::milliseconds(2000),
                                                    std::chrono::milliseconds(5000)}),
          puller(config.secret, std::chrono::milliseconds(2000)) {}

    // The template users built that a create names ("name" or "name:tag"); nullopt for a
    // shipped template (or a name that is no template's).
    std::optional<templates::TemplateRef> user_ref(const json& body) const {
        std::string name = manager.options().default_template;
        if (body.is_object() && body.contains("template") && body["template"].is_string())
            name = body["template"].get<std::string>();
        const auto names = manager.template_names();
        if (name.find(':') == std::string::npos &&
            std::find(names.begin(), names.end(), name) != names.end())
            return std::nullopt;
        try {
            return templates::parse_ref(name);
        } catch (const std::invalid_argument&) {
            return std::nullopt;
        }
    }

    // The live nodes whose record offers `ref` (for `runtime`, unless empty), with the image
    // each points at; this node first.
    std::vector<std::pair<cluster::PullSource, std::string>> holders(
        const templates::TemplateRef& ref, const std::string& runtime) const {
        std::vector<std::pair<cluster::PullSource, std::string>> out;
        for (const auto& status : node->nodes()) {
            if (!status.alive || !status.record) continue;
            auto offer = status.record->templates.find(ref.str());
            if (offer == status.record->templates.end() || offer->second.image_id.empty()) continue;
            const auto& runtimes = offer->second.runtimes;
            if (!runtime.empty() &&
                std::find(runtimes.begin(), runtimes.end(), runtime) == runtimes.end())
                continue;
            out.emplace_back(cluster::PullSource{status.name, status.advertise},
                             offer->second.image_id);
            if (status.name == config.node_name) std::rotate(out.begin(), out.end() - 1, out.end());
        }
        return out;
    }

    bool holds_snapshot(const std::string& name) const {
        try {
            manager.snapshots().inspect(name);
            return true;
        } catch (const std::exception&) {
            return false;
        }
    }

    // The live nodes that hold named snapshot `name`, as this node's store (its record may lag
    // a snapshot just made) and the others' records say.
    std::vector<std::string> snapshot_holders(const std::string& name) const {
        std::vector<std::string> holders;
        if (holds_snapshot(name)) holders.push_back(config.node_name);
        for (const auto& status : node->nodes()) {
            if (!status.alive || !status.record || status.name == config.node_name) continue;
            const auto& held = status.record->snapshots;
            if (std::find(held.begin(), held.end(), name) != held.end())
                holders.push_back(status.name);
        }
        return holders;
    }

    // What placement needs of a create. A user template this node lacks but others hold is
    // placed by name and runtime alone (the node that makes it checks the rest); one some node
    // holds may go to a node without it, which pulls it first.
    cluster::PlacementRequest placement_for(const json& body) const {
        if (body.is_object() && body.contains("snapshot") && body["snapshot"].is_string()) {
            // Started where the snapshot is; checked by that node (404 when no node has it).
            cluster::PlacementRequest request;
            request.snapshot = body["snapshot"].get<std::string>();
            if (snapshot_holders(request.snapshot).empty())
                throw ApiError(404, "not_found",
                               "no node of the cluster holds a snapshot named " + request.snapshot,
                               "snapshot");
            return request;
        }
        const auto ref = user_ref(body);
        if (ref && !manager.templates().find(*ref)) {
            std::string runtime = manager.options().default_runtime;
            if (body.is_object() && body.contains("runtime") && body["runtime"].is_string())
                runtime = body["runtime"].get<std::string>();
            if (!holders(*ref, "").empty())
                return {runtime, ref->str(), !holders(*ref, runtime).empty()};
        }
        const auto placement = manager.placement_of(body);  // 400s for bad requests
        if (!ref) return {placement.runtime, placement.template_name, false};
        return {placement.runtime, ref->str(), !holders(*ref, placement.runtime).empty()};
    }

    // Before a create here: a user template this node lacks is pulled from a node that holds
    // it (each in turn). Throws TemplateUnavailable naming the last node tried and why.
    void ensure_template(const json& body) {
        const auto ref = user_ref(body);
        if (!ref || manager.templates().find(*ref)) return;
        std::optional<TemplateUnavailable> failed;
        for (const auto& [source, image_id] : holders(*ref, "")) {
            if (source.node == config.node_name) continue;
            try {
                puller.pull(manager.templates().store(), *ref, image_id, source);
                return;
            } catch (const cluster::PullFailed& e) {
                failed = TemplateUnavailable{ref->str(), e.node(), e.what()};
            }
        }
        if (failed) throw *failed;  // none held it: the create's own 400 says so
    }

    HttpResponse pull_failed(const TemplateUnavailable& e, unsigned version) const {
        return naming_node(
            json_error(502, "template_pull_failed",
                       "template " + e.ref + " is not on node " + config.node_name +
                           " and could not be pulled from node " + e.node + ": " + e.reason,
                       "template", version),
            e.node);
    }

    bool local(const std::string& id) const {
        try {
            manager.find(id);
            return true;
        } catch (const SandboxError&) {
            return false;
        }
    }

    HttpResponse node_lost(const cluster::SandboxLocation& where, unsigned version) const {
        HttpResponse res =
            json_error(503, "node_lost",
                       "sandbox " + where.record.id + " runs on node " + where.record.node +
                           ", which is lost (its lease lapsed); it comes back if "
                           "the node returns",
                       "", version);
        res = naming_node(std::move(res), where.record.node);
        res.set(http::field::retry_after, "5");
        return res;
    }

    json with_node(json described, const std::string& node_name, bool alive) const {
        described["node"] = node_name;
        if (!alive) described["state"] = "lost";
        return described;
    }
};

ClusterService::ClusterService(ClusterConfig config, SandboxManager& manager)
    : impl_(std::make_unique<Impl>(std::move(config), manager)) {
    if (impl_->config.secret.size() < 16)
        throw std::invalid_argument("the cluster secret needs at least 16 characters");
    cluster::ClusterOptions options;
    options.endpoints = impl_->config.etcd;
    options.node_name = impl_->config.node_name;
    options.advertise = impl_->config.advertise;
    options.prefix = impl_->config.prefix;
    options.lease_ttl = impl_->config.lease_ttl;
    options.version = "0.1";
    impl_->node = std::make_unique<cluster::ClusterNode>(options, impl_->facts);
}

ClusterService::~ClusterService() = default;

void ClusterService::shutdown(bool sandboxes_kept) {
    impl_->node->stop(!sandboxes_kept);
}

const std::string& ClusterService::node_name() const {
    return impl_->config.node_name;
}

bool ClusterService::from_peer(const HttpRequest& request) const {
    const bool claims = request.find(cluster::kForwardedByHeader) != request.end() ||
                        request.find(kPlacementHeader) != request.end();
    if (!claims) return false;
    if (!cluster::secret_matches(impl_->config.secret,
                                 header_value(request, cluster::kClusterSecretHeader)))
        throw ApiError(403, "forbidden", "cluster headers without the cluster's secret");
    return true;
}

bool ClusterService::secret_valid(const HttpRequest& request) const {
    return cluster::secret_matches(impl_->config.secret,
                                   header_value(request, cluster::kClusterSecretHeader));
}

std::optional<HttpResponse> ClusterService::route(HttpExchange& exchange, const std::string& id) {
    const HttpRequest& request = exchange.request;
    if (from_peer(request) || impl_->local(id)) return std::nullopt;
    auto where = impl_->node->locate(id);
    if (!where || where->record.node == impl_->config.node_name) return std::nullopt;
    if (!where->node_alive) return impl_->node_lost(*where, request.version());
    if (cluster::NodeForwarder::needs_relay(request) && exchange.stream) {
        impl_->forwarder.relay(std::move(*exchange.stream), std::move(exchange.request),
                               where->advertise, where->record.node);
        exchange.taken = true;
        return HttpResponse{};
    }
    return impl_->forwarder.forward(request, where->advertise, where->record.node,
                                    client_address(exchange));
}

std::optional<std::string> ClusterService::placed_id(const HttpRequest& request) const {
    if (request.find(kPlacementHeader) == request.end() || !from_peer(request)) return std::nullopt;
    return header_value(request, kPlacementHeader);
}

HttpResponse ClusterService::create(HttpExchange& exchange, const json& body) {
    try {
        return place_and_create(exchange, body);
    } catch (const TemplateUnavailable& e) {
        return impl_->pull_failed(e, exchange.request.version());
    }
}

HttpResponse ClusterService::place_and_create(HttpExchange& exchange, const json& body) {
    const HttpRequest& request = exchange.request;
    if (auto id = placed_id(request)) {
        // Placed here by another node, which reserved the slot under this id.
        return make_here(body, *id);
    }
    if (body.is_object() && body.contains("snapshot") && body["snapshot"].is_string())
        refuse_ambiguous_snapshot(request, body["snapshot"].get<std::string>());
    // Bad requests are refused here, before a slot is taken anywhere.
    const auto placement = impl_->placement_for(body);
    const std::string id = "sb-" + random::hex(6);
    std::string chosen;
    try {
        chosen = impl_->node->reserve(id, placement);
    } catch (const cluster::PlacementError& e) {
        if (e.capacity_exhausted())
            throw ApiError(503, "capacity_exhausted",
                           std::string("no room in the cluster: ") + e.what());
        throw ApiError(409, "no_node_can_run", e.what(), "template");
    } catch (const cluster::EtcdError& e) {
        throw ApiError(503, "cluster_unavailable", e.what());
    }
    if (chosen == node_name()) {
        try {
            return make_here(body, id);
        } catch (...) {
            impl_->node->release(id);
            throw;
        }
    }
    auto where = impl_->node->node(chosen);
    if (!where || !where->record) {
        impl_->node->release(id);
        throw ApiError(503, "node_unreachable", "node " + chosen + " left while placing");
    }
    HttpRequest forwarded = request;
    forwarded.set(kPlacementHeader, id);
    HttpResponse answer =
        impl_->forwarder.forward(forwarded, where->advertise, chosen, client_address(exchange));
    if (answer.result_int() / 100 != 2) impl_->node->release(id);
    return answer;
}

HttpResponse ClusterService::make_here(const json& body, const std::string& reserved_id) {
    impl_->ensure_template(body);
    auto sandbox = impl_->manager.create(body, reserved_id);
    created_here(*sandbox);
    // A ready pooled microVM keeps its own id: the slot reserved under the other goes back.
    if (sandbox->id() != reserved_id) removed_here(reserved_id);
    return json_response(201, impl_->with_node(sandbox->describe(true), node_name(), true));
}

json ClusterService::list() const {
    json out = json::array();
    std::set<std::string> seen;
    for (const auto& sandbox : impl_->manager.list()) {
        out.push_back(impl_->with_node(sandbox->describe(false), node_name(), true));
        seen.insert(sandbox->id());
    }
    for (const auto& where : impl_->node->sandboxes()) {
        if (seen.count(where.record.id)) continue;
        if (where.record.node == node_name()) continue;  // being made here, or just gone
        json described = where.record.summary.is_object() && !where.record.summary.empty()
                             ? where.record.summary
                             : json{{"id", where.record.id},
                                    {"state", where.record.state},
                                    {"runtime", where.record.runtime},
                                    {"template", where.record.template_name}};
        out.push_back(impl_->with_node(std::move(described), where.record.node, where.node_alive));
    }
    return out;
}

std::vector<ClusterService::PeerAnswer> ClusterService::ask_peers(const HttpRequest& request,
                                                                  const std::string& target,
                                                                  http::verb method) const {
    return ask_peers_via(impl_->forwarder, request, target, method);
}

std::vector<ClusterService::PeerAnswer> ClusterService::ask_peers_via(
    cluster::NodeForwarder& forwarder, const HttpRequest& request, const std::string& target,
    http::verb method) const {
    std::vector<PeerAnswer> out;
    for (const auto& status : impl_->node->nodes()) {
        if (status.name == impl_->config.node_name) continue;
        PeerAnswer answer{status.name, 0, {}, {}, false};
        if (!status.alive) {
            answer.error = "node lost (its record lapsed)";
            answer.lost = true;
            out.push_back(std::move(answer));
            continue;
        }
        cluster::ForwardRequest peer{method, target, 11};
        peer.set(http::field::accept, "application/json");
        if (auto auth = request.find(http::field::authorization); auth != request.end())
            peer.set(http::field::authorization, auth->value());
        auto response = forwarder.forward(peer, status.advertise, status.name, {});
        answer.status = response.result_int();
        answer.body = std::move(response.body());
        if (answer.status != 200) answer.error = "answered HTTP " + std::to_string(answer.status);
        out.push_back(std::move(answer));
    }
    std::sort(out.begin(), out.end(),
              [](const PeerAnswer& a, const PeerAnswer& b) { return a.node < b.node; });
    return out;
}

std::optional<HttpResponse> ClusterService::answer_from_peers(
    const HttpRequest& request, const std::string& target, http::verb method,
    std::initializer_list<unsigned> taken, std::vector<std::string>* unreachable) const {
    if (from_peer(request)) return std::nullopt;
    for (auto& answer : ask_peers(request, target, method)) {
        if (std::find(taken.begin(), taken.end(), answer.status) != taken.end()) {
            HttpResponse res{static_cast<http::status>(answer.status), 11};
            res.set(http::field::content_type, "application/json");
            res.body() = std::move(answer.body);
            return res;
        }
        if (answer.status != 404 && unreachable) unreachable->push_back(answer.node);
    }
    return std::nullopt;
}

ClusterService::SnapshotNameCheck ClusterService::check_snapshot_name(
    const HttpRequest& request, const std::string& name) const {
    SnapshotNameCheck check;
    // First the lock: a node saving the name now has not committed it, so no peer would say it
    // holds it; and one that saved it and let go has committed it, so its answer says so.
    const std::string lock = "snapshot-name/" + name;
    std::string holder;
    try {
        holder = impl_->node->try_lock(lock);
    } catch (const cluster::EtcdError& e) {
        check.refusal = json_error(503, "cluster_unavailable",
                                   "cannot make sure no other node saves a snapshot named " + name +
                                       " at the same time: " + e.what(),
                                   "", request.version());
        return check;
    }
    if (!holder.empty()) {
        check.refusal = naming_node(
            json_error(409, "snapshot_exists",
                       "node " + holder + " is saving a snapshot named " + name +
                           " right now (names are unique in the cluster); pick another name",
                       "name", request.version()),
            holder);
        return check;
    }
    check.lock = std::make_unique<cluster::ClusterLock>(*impl_->node, lock);
    for (auto& answer :
         ask_peers_via(impl_->quick_questions, request, "/v1/snapshots/" + name, http::verb::get)) {
        if (answer.status == 200) {
            check.refusal = naming_node(
                json_error(409, "snapshot_exists",
                           "a snapshot named " + name + " exists on node " + answer.node +
                               " (names are unique in the cluster); delete it or pick another "
                               "name",
                           "name", request.version()),
                answer.node);
            return check;
        }
        if (answer.lost) {
            check.unasked.push_back(answer.node);
        } else if (answer.status != 404 && !check.refusal) {
            // Saving now could make a second snapshot of the name; the client may try again.
            HttpResponse res = json_error(
                503, "cluster_unavailable",
                "node " + answer.node + " could not say whether it holds a snapshot named " + name +
                    " (" + answer.error + "); names are unique in the cluster, so none " +
                    "is saved until every live node answers: try again",
                "", request.version());
            res.set(http::field::retry_after, "2");
            check.refusal = naming_node(std::move(res), answer.node);
        }
    }
    return check;
}

void ClusterService::refuse_ambiguous_snapshot(const HttpRequest& request,
                                               const std::string& name) const {
    if (impl_->snapshot_holders(name).size() < 2) return;
    // Records lag a delete by a heartbeat: the nodes themselves say whether both still hold it.
    std::vector<std::string> holders;
    if (impl_->holds_snapshot(name)) holders.push_back(node_name());
    for (const auto& answer :
         ask_peers_via(impl_->quick_questions, request, "/v1/snapshots/" + name, http::verb::get))
        if (answer.status == 200) holders.push_back(answer.node);
    if (holders.size() < 2) return;
    std::sort(holders.begin(), holders.end());
    std::string listed;
    for (const auto& holder : holders) listed += (listed.empty() ? "" : ", ") + holder;
    throw ApiError(409, "snapshot_ambiguous",
                   "nodes " + listed + " each hold a snapshot named " + name +
                       " (saved while one of them was lost); delete the one not wanted through "
                       "its node (GET /v1/snapshots lists them with their node)",
                   "snapshot");
}

void ClusterService::annotate(json& described) const {
    described["node"] = node_name();
}

namespace {

json node_json(const cluster::NodeStatus& status) {
    json node = {{"name", status.name},
                 {"advertise", status.advertise},
                 {"state", status.alive ? "up" : "lost"},
                 {"drained", status.drained},
                 {"sandboxes", status.sandboxes}};
    if (status.record) {
        node["capacity"] = status.record->capacity_sandboxes;
        node["memory_available_mb"] = status.record->memory_available_mb;
        node["cpus"] = status.record->cpus;
        node["cpus_idle"] = status.record->cpus_idle;
        node["runtimes"] = status.record->runtimes;
        node["version"] = status.record->version;
        json templates = json::object();
        for (const auto& [name, offer] : status.record->templates)
            templates[name] = offer.to_json();
        node["templates"] = templates;
        node["snapshots"] = status.record->snapshots;
    }
    return node;
}

}  // namespace

json single_node_view(SandboxManager& manager) {
    ManagerFacts facts(manager);
    cluster::NodeStatus status;
    char host[256] = {};
    status.name = ::gethostname(host, sizeof host - 1) == 0 ? host : "localhost";
    status.alive = true;
    status.sandboxes = manager.list().size();
    status.record = facts.facts();
    status.record->name = status.name;
    return {
        {"clustered", false}, {"node", status.name}, {"nodes", json::array({node_json(status)})}};
}

json ClusterService::nodes() const {
    json list = json::array();
    for (const auto& status : impl_->node->nodes()) list.push_back(node_json(status));
    return {{"clustered", true}, {"node", node_name()}, {"nodes", list}};
}

json ClusterService::set_drained(const std::string& name, bool drained) {
    if (!impl_->node->node(name))
        throw ApiError(404, "not_found", "no node named " + name + " in the cluster", "name");
    try {
        impl_->node->set_drained(name, drained);
    } catch (const cluster::EtcdError& e) {
        throw ApiError(503, "cluster_unavailable", e.what());
    }
    return node_json(*impl_->node->node(name));
}

std::unique_ptr<ClusterService::LocalReservation> ClusterService::reserve_here(
    const std::string& runtime, const std::string& template_name, int count) {
    std::vector<std::string> ids;
    std::vector<cluster::SandboxRecord> records;
    for (int i = 0; i < count; ++i) {
        ids.push_back("sb-" + random::hex(6));
        records.push_back(
            {ids.back(), node_name(), runtime, template_name, "creating", json::object()});
    }
    const std::size_t capacity = impl_->manager.options().max_sandboxes;
    std::size_t promised = 0;
    bool taken = false;
    try {
        taken = impl_->node->reserve_here(records, capacity, &promised);
    } catch (const cluster::EtcdError& e) {
        throw ApiError(503, "cluster_unavailable", e.what());
    }
    if (!taken) {
        const std::size_t free = capacity - std::min(capacity, promised);
        throw ApiError(429, "too_many_sandboxes",
                       "a fork of " + std::to_string(count) + " needs " + std::to_string(count) +
                           " free places on node " + node_name() +
                           " (the copies start where the source runs); it runs at most " +
                           std::to_string(capacity) + " sandboxes and has " + std::to_string(free) +
                           " free",
                       "count");
    }
    return std::make_unique<LocalReservation>(*this, std::move(ids));
}

ClusterService::LocalReservation::~LocalReservation() {
    if (kept_) return;
    for (const auto& id : ids_) cluster_.removed_here(id);
}

void ClusterService::LocalReservation::keep(const std::vector<std::shared_ptr<Sandbox>>& made) {
    for (const auto& sandbox : made) cluster_.created_here(*sandbox);
    kept_ = true;
}

void ClusterService::created_here(const Sandbox& sandbox) {
    try {
        impl_->node->record_local(ManagerFacts::record_of(sandbox));
    } catch (const std::exception& e) {
        // The next heartbeat's sync records it.
        std::fprintf(stderr, "deskboxd: cluster: recording %s: %s\n", sandbox.id().c_str(),
                     e.what());
    }
}

void ClusterService::removed_here(const std::string& id) {
    try {
        impl_->node->release(id);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deskboxd: cluster: releasing %s: %s\n", id.c_str(), e.what());
    }
}

std::string ClusterService::metrics() const {
    std::ostringstream out;
    out << "# HELP deskbox_cluster_requests_forwarded_total Requests sent to the node that owns "
           "the sandbox.\n# TYPE deskbox_cluster_requests_forwarded_total counter\n"
        << "deskbox_cluster_requests_forwarded_total " << impl_->forwarder.forwarded() << "\n"
        << "# HELP deskbox_cluster_connections_relayed_total Streams and ports relayed to the "
           "owning node.\n# TYPE deskbox_cluster_connections_relayed_total counter\n"
        << "deskbox_cluster_connections_relayed_total " << impl_->forwarder.relayed() << "\n"
        << "# HELP deskbox_cluster_registrations_total Times this node registered (1 + lapsed "
           "leases).\n# TYPE deskbox_cluster_registrations_total counter\n"
        << "deskbox_cluster_registrations_total " << impl_->node->registrations() << "\n"
        << "# HELP deskbox_cluster_lease_renewals_failed_total Heartbeats etcd did not take.\n"
           "# TYPE deskbox_cluster_lease_renewals_failed_total counter\n"
        << "deskbox_cluster_lease_renewals_failed_total " << impl_->node->lease_renewals_failed()
        << "\n";
    const auto pulls = impl_->puller.figures();
    out << "# HELP deskbox_cluster_template_pulls_total Templates pulled from other nodes, by "
           "outcome.\n# TYPE deskbox_cluster_template_pulls_total counter\n"
        << "deskbox_cluster_template_pulls_total{outcome=\"installed\"} " << pulls.pulled << "\n"
        << "deskbox_cluster_template_pulls_total{outcome=\"failed\"} " << pulls.failed << "\n"
        << "# HELP deskbox_cluster_template_pull_waits_total Creates that waited for a pull of "
           "their template already under way.\n# TYPE deskbox_cluster_template_pull_waits_total "
           "counter\n"
        << "deskbox_cluster_template_pull_waits_total " << pulls.joined << "\n"
        << "# HELP deskbox_cluster_template_pull_last_bytes Bytes of the last template pulled.\n"
           "# TYPE deskbox_cluster_template_pull_last_bytes gauge\n"
        << "deskbox_cluster_template_pull_last_bytes " << pulls.last_bytes << "\n"
        << "# HELP deskbox_cluster_template_pull_last_seconds Time the last pull took.\n"
           "# TYPE deskbox_cluster_template_pull_last_seconds gauge\n"
        << "deskbox_cluster_template_pull_last_seconds " << pulls.last_seconds << "\n";
    std::size_t up = 0, lost = 0;
    for (const auto& status : impl_->node->nodes()) (status.alive ? up : lost)++;
    out << "# HELP deskbox_cluster_nodes Nodes of the cluster by state.\n"
           "# TYPE deskbox_cluster_nodes gauge\n"
        << "deskbox_cluster_nodes{state=\"up\"} " << up << "\n"
        << "deskbox_cluster_nodes{state=\"lost\"} " << lost << "\n";
    return out.str();
}

}  // namespace deskbox::server
