#include "server/cluster/cluster_node.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "server/cluster/etcd_watch.hpp"

namespace deskbox::cluster {

using nlohmann::json;

namespace {

constexpr int kTransactionAttempts = 32;  // concurrent creates retry on a changed allocation

std::int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

bool starts_with(const std::string& s, const std::string& prefix) {
    return s.compare(0, prefix.size(), prefix) == 0;
}

Compare present(const std::string& key) {
    return {key, Compare::Target::version, Compare::Result::greater, 0, {}};
}

// An allocation as read, with the revision a transaction compares against.
struct SeenAllocation {
    Allocation allocation;
    std::int64_t mod_revision = 0;  // 0: the key does not exist
};

SeenAllocation seen_allocation(const std::vector<KeyValue>& range) {
    if (range.empty()) return {};
    return {Allocation::from_json(json::parse(range.front().value)), range.front().mod_revision};
}

}  // namespace

struct ClusterNode::Impl {
    ClusterOptions options;
    LocalNode& local;
    ClusterKeys keys;
    EtcdClient client;

    mutable std::mutex view_mutex;
    std::map<std::string, NodeRecord> nodes;  // alive
    std::set<std::string> drained;
    std::map<std::string, SeenAllocation> allocations;
    std::map<std::string, SandboxRecord> records;

    std::atomic<std::int64_t> lease{0};
    std::atomic<std::uint64_t> renew_failures{0};
    std::atomic<std::uint64_t> registration_count{0};
    std::int64_t started_at_ms = now_ms();
    json last_written;  // the node record as last put (without its times)

    std::mutex stop_mutex;
    std::condition_variable stop_wake;
    bool stopping = false;
    bool stopped = false;
    std::thread heartbeat;
    std::unique_ptr<EtcdWatch> watch;

    // This node's sandboxes as last written to etcd; the heartbeat brings their records in
    // line with what runs (made, changed, gone) whatever path changed them.
    std::mutex written_mutex;
    std::map<std::string, SandboxRecord> written;

    Impl(ClusterOptions o, LocalNode& l)
        : options(std::move(o)),
          local(l),
          keys{options.prefix},
          client(EtcdOptions{options.endpoints, std::chrono::milliseconds(1000),
                             std::chrono::milliseconds(3000)}) {}

    NodeRecord my_record() {
        NodeRecord record = local.facts();
        record.name = options.node_name;
        record.advertise = options.advertise;
        record.version = options.version;
        record.started_at_ms = started_at_ms;
        return record;
    }

    // Takes the node's name under a new lease. A live node of that name elsewhere is refused;
    // an earlier incarnation of this node (same address) is replaced.
    void register_node() {
        // The record first: reading the node's facts may take longer than a short lease lives
        // on a loaded host ("requested lease not found" at the txn).
        NodeRecord record = my_record();
        json written = record.to_json();
        const std::int64_t id = client.grant_lease(options.lease_ttl);
        record.heartbeat_at_ms = now_ms();
        auto result =
            client.txn({Compare::absent(keys.node(options.node_name))},
                       {Operation::put(keys.node(options.node_name), record.to_json().dump(), id)},
                       {Operation::range(keys.node(options.node_name))});
        if (!result.succeeded) {
            const auto& range = result.ranges.at(0);
            const NodeRecord other = NodeRecord::from_json(json::parse(range.at(0).value));
            if (other.advertise != options.advertise) {
                client.revoke_lease(id);
                throw std::invalid_argument("node name '" + options.node_name +
                                            "' is in use by the live node at " + other.advertise);
            }
            client.put(keys.node(options.node_name), record.to_json().dump(), id);
        }
        lease.store(id);
        last_written = std::move(written);
        registration_count.fetch_add(1);
    }

    void heartbeat_loop() {
        const auto period =
            std::max(std::chrono::milliseconds(200),
                     std::chrono::duration_cast<std::chrono::milliseconds>(options.lease_ttl) / 3);
        std::unique_lock lock(stop_mutex);
        while (!stop_wake.wait_for(lock, period, [&] { return stopping; })) {
            lock.unlock();
            try {
                beat();
            } catch (const std::exception& e) {
                renew_failures.fetch_add(1);
                std::fprintf(stderr, "deskboxd: cluster heartbeat: %s\n", e.what());
            }
            lock.lock();
        }
    }

    void beat() {
        if (!client.keep_alive(lease.load())) {
            // The lease lapsed (etcd unreachable for longer than its TTL, or this process was
            // stopped): the others saw this node as lost. Register again; sandbox records never
            // moved, so they are simply there again.
            std::fprintf(stderr, "deskboxd: cluster lease of node %s lapsed; registering again\n",
                         options.node_name.c_str());
            register_node();
            return;
        }
        NodeRecord record = my_record();
        json described = record.to_json();
        if (described != last_written) {
            record.heartbeat_at_ms = now_ms();
            client.put(keys.node(options.node_name), record.to_json().dump(), lease.load());
            last_written = std::move(described);
        }
        sync_local();
    }

    void sync_local() {
        std::lock_guard lock(written_mutex);
        std::map<std::string, SandboxRecord> current;
        for (auto record : local.local_sandboxes()) {
            record.node = options.node_name;
            current[record.id] = std::move(record);
        }
        for (const auto& [id, record] : current) {
            auto before = written.find(id);
            if (before == written.end()) {
                record_here(record);
            } else if (before->second.state != record.state ||
                       before->second.summary != record.summary) {
                update_record(record);
            }
        }
        for (const auto& [id, record] : written)
            if (!current.count(id)) give_slot_back(id);
        written = std::move(current);
    }

    // A sandbox this node runs gets its record (and slot) if it has none yet.
    void record_here(const SandboxRecord& record) {
        try {
            take_slot(record, std::nullopt);
        } catch (const std::invalid_argument&) {
            update_record(record);  // recorded already (placed here, or adopted)
        }
    }

    // ---- the view ----

    void apply_locked(const std::string& key, const std::string* value) {
        try {
            if (starts_with(key, keys.nodes())) {
                const std::string name = key.substr(keys.nodes().size());
                if (value)
                    nodes[name] = NodeRecord::from_json(json::parse(*value));
                else
                    nodes.erase(name);
            } else if (starts_with(key, keys.drains())) {
                const std::string name = key.substr(keys.drains().size());
                if (value)
                    drained.insert(name);
                else
                    drained.erase(name);
            } else if (starts_with(key, keys.sandboxes())) {
                const std::string id = key.substr(keys.sandboxes().size());
                if (value)
                    records[id] = SandboxRecord::from_json(json::parse(*value));
                else
                    records.erase(id);
            }
        } catch (const std::exception& e) {
            std::fprintf(stderr, "deskboxd: cluster: ignoring malformed %s: %s\n", key.c_str(),
                         e.what());
        }
    }

    void apply_allocation_locked(const KeyValue& kv, bool erased) {
        const std::string name = kv.key.substr(keys.allocations().size());
        if (erased) {
            allocations.erase(name);
            return;
        }
        try {
            SeenAllocation seen{Allocation::from_json(json::parse(kv.value)), kv.mod_revision};
            auto& current = allocations[name];
            if (seen.mod_revision >= current.mod_revision) current = seen;
        } catch (const std::exception&) {
        }
    }

    std::int64_t load_all() {
        std::int64_t revision = 0;
        auto all = client.get_prefix(keys.prefix, &revision);
        std::lock_guard lock(view_mutex);
        nodes.clear();
        drained.clear();
        allocations.clear();
        records.clear();
        for (const auto& kv : all) {
            if (starts_with(kv.key, keys.allocations()))
                apply_allocation_locked(kv, false);
            else
                apply_locked(kv.key, &kv.value);
        }
        return revision;
    }

    void on_events(const std::vector<WatchEvent>& events) {
        std::lock_guard lock(view_mutex);
        for (const auto& event : events) {
            const bool erased = event.type == WatchEvent::Type::erase;
            if (starts_with(event.kv.key, keys.allocations()))
                apply_allocation_locked(event.kv, erased);
            else
                apply_locked(event.kv.key, erased ? nullptr : &event.kv.value);
        }
    }

    PlacementInput placement_input() const {
        std::lock_guard lock(view_mutex);
        PlacementInput input;
        for (const auto& [name, node] : nodes) input.nodes.push_back(node);
        input.drained = drained;
        for (const auto& [name, seen] : allocations) input.allocations[name] = seen.allocation;
        input.min_memory_available_mb = options.min_memory_available_mb;
        return input;
    }

    SeenAllocation allocation_of(const std::string& node) const {
        std::lock_guard lock(view_mutex);
        auto it = allocations.find(node);
        return it == allocations.end() ? SeenAllocation{} : it->second;
    }

    void remember_allocation(const std::string& node, const SeenAllocation& seen) {
        std::lock_guard lock(view_mutex);
        auto& current = allocations[node];
        if (seen.mod_revision >= current.mod_revision) current = seen;
    }

    // Records `record` on its node and takes a slot there, in one transaction; `limit`: refuse
    // (return false) if the node is at it. Throws std::invalid_argument if the id is taken.
    bool take_slot(const SandboxRecord& record, std::optional<std::size_t> limit) {
        return take_slots({record}, limit);
    }

    // The same for several records of one node at once: all or none, and with `limit` only if
    // the node's allocation stays within it (`seen_out`: the allocation last seen).
    bool take_slots(const std::vector<SandboxRecord>& records, std::optional<std::size_t> limit,
                    std::size_t* seen_out = nullptr) {
        const std::string& node_name = records.at(0).node;
        const std::string alloc_key = keys.allocation(node_name);
        SeenAllocation seen = allocation_of(node_name);
        for (int attempt = 0; attempt < kTransactionAttempts; ++attempt) {
            if (seen_out) *seen_out = seen.allocation.sandboxes;
            if (limit && seen.allocation.sandboxes + records.size() > *limit) return false;
            Allocation next{seen.allocation.sandboxes + records.size()};
            std::vector<Compare> compares = {
                Compare::unchanged_since(alloc_key, seen.mod_revision)};
            std::vector<Operation> writes = {Operation::put(alloc_key, next.to_json().dump())};
            std::vector<Operation> reads = {Operation::range(alloc_key)};
            for (const auto& record : records) {
                compares.push_back(Compare::absent(keys.sandbox(record.id)));
                writes.push_back(Operation::put(keys.sandbox(record.id), record.to_json().dump()));
                reads.push_back(Operation::range(keys.sandbox(record.id)));
            }
            auto result = client.txn(compares, writes, reads);
            if (result.succeeded) {
                remember_allocation(node_name, {next, result.revision});
                return true;
            }
            for (std::size_t i = 0; i < records.size(); ++i)
                if (!result.ranges.at(i + 1).empty())
                    throw std::invalid_argument("sandbox id " + records[i].id +
                                                " is already recorded");
            seen = seen_allocation(result.ranges.at(0));
            remember_allocation(node_name, seen);
        }
        throw EtcdError("the allocation of node " + node_name + " kept changing", false);
    }

    void give_slot_back(const std::string& id) {
        const std::string record_key = keys.sandbox(id);
        for (int attempt = 0; attempt < kTransactionAttempts; ++attempt) {
            auto record_kv = client.get(record_key);
            if (!record_kv) return;
            const SandboxRecord record = SandboxRecord::from_json(json::parse(record_kv->value));
            const std::string alloc_key = keys.allocation(record.node);
            auto alloc_kv = client.get(alloc_key);
            SeenAllocation seen = alloc_kv ? seen_allocation({*alloc_kv}) : SeenAllocation{};
            Allocation next{seen.allocation.sandboxes > 0 ? seen.allocation.sandboxes - 1 : 0};
            auto result = client.txn(
                {Compare::unchanged_since(record_key, record_kv->mod_revision),
                 Compare::unchanged_since(alloc_key, seen.mod_revision)},
                {Operation::erase(record_key), Operation::put(alloc_key, next.to_json().dump())});
            if (result.succeeded) {
                remember_allocation(record.node, {next, result.revision});
                std::lock_guard lock(view_mutex);
                records.erase(id);
                return;
            }
        }
        throw EtcdError("the record of sandbox " + id + " kept changing", false);
    }

    // After (re)starting: records of sandboxes this node no longer runs go, sandboxes it runs
    // (adopted) without a record get one, and its allocation is set to what its records say.
    void reconcile() {
        std::set<std::string> running;
        for (auto record : local.local_sandboxes()) {
            record.node = options.node_name;
            running.insert(record.id);
            record_here(record);
        }
        std::vector<std::string> gone;
        {
            std::lock_guard lock(view_mutex);
            for (const auto& [id, record] : records)
                if (record.node == options.node_name && !running.count(id)) gone.push_back(id);
        }
        for (const auto& id : gone) give_slot_back(id);
        {
            std::lock_guard lock(written_mutex);
            written.clear();
            for (auto record : local.local_sandboxes()) {
                record.node = options.node_name;
                written[record.id] = std::move(record);
            }
        }
        // The allocation may have drifted (a crash between a create and its record's removal):
        // set it to the records' count, both read in one transaction so a reservation made
        // meanwhile changes the allocation and makes the write retry.
        const std::string alloc_key = keys.allocation(options.node_name);
        for (int attempt = 0; attempt < kTransactionAttempts; ++attempt) {
            auto read = client.txn(
                {}, {Operation::range_prefix(keys.sandboxes()), Operation::range(alloc_key)});
            std::size_t count = 0;
            for (const auto& kv : read.ranges.at(0)) {
                try {
                    if (SandboxRecord::from_json(json::parse(kv.value)).node == options.node_name)
                        ++count;
                } catch (const std::exception&) {
                }
            }
            SeenAllocation seen = seen_allocation(read.ranges.at(1));
            if (seen.allocation.sandboxes == count && seen.mod_revision != 0) return;
            Allocation fixed{count};
            auto result = client.txn({Compare::unchanged_since(alloc_key, seen.mod_revision)},
                                     {Operation::put(alloc_key, fixed.to_json().dump())});
            if (result.succeeded) {
                remember_allocation(options.node_name, {fixed, result.revision});
                return;
            }
        }
    }

    void update_record(const SandboxRecord& record) {
        client.txn({present(keys.sandbox(record.id))},
                   {Operation::put(keys.sandbox(record.id), record.to_json().dump())});
    }

    SandboxLocation locate_locked(const SandboxRecord& record) const {
        SandboxLocation location{record, false, {}};
        if (auto node = nodes.find(record.node); node != nodes.end()) {
            location.node_alive = true;
            location.advertise = node->second.advertise;
        }
        return location;
    }
};

ClusterNode::ClusterNode(ClusterOptions options, LocalNode& local) {
    if (!valid_node_name(options.node_name))
        throw std::invalid_argument("node name '" + options.node_name +
                                    "': letters, digits, '.', '_', '-', at most 63");
    if (options.advertise.empty()) throw std::invalid_argument("no address to advertise");
    if (options.lease_ttl.count() < 1) throw std::invalid_argument("the lease TTL must be >= 1 s");
    if (options.prefix.empty() || options.prefix.back() != '/') options.prefix += "/";
    impl_ = std::make_unique<Impl>(std::move(options), local);
    impl_->register_node();
    const std::int64_t revision = impl_->load_all();
    WatchOptions watch_options;
    watch_options.prefix = impl_->keys.prefix;
    watch_options.start_revision = revision + 1;
    impl_->watch = std::make_unique<EtcdWatch>(
        impl_->options.endpoints, watch_options,
        [impl = impl_.get()](const std::vector<WatchEvent>& events) { impl->on_events(events); },
        [impl = impl_.get()] { return impl->load_all(); });
    impl_->reconcile();
    impl_->heartbeat = std::thread([impl = impl_.get()] { impl->heartbeat_loop(); });
}

ClusterNode::~ClusterNode() {
    stop(false);
}

void ClusterNode::stop(bool leave) {
    {
        std::lock_guard lock(impl_->stop_mutex);
        if (impl_->stopped) return;
        impl_->stopped = true;
        impl_->stopping = true;
        impl_->stop_wake.notify_all();
    }
    if (impl_->heartbeat.joinable()) impl_->heartbeat.join();
    std::vector<Operation> forget;  // a node that leaves takes its sandboxes and slots along
    if (leave) {
        for (const auto& where : sandboxes())
            if (where.record.node == impl_->options.node_name)
                forget.push_back(Operation::erase(impl_->keys.sandbox(where.record.id)));
        forget.push_back(Operation::erase(impl_->keys.allocation(impl_->options.node_name)));
    }
    impl_->watch.reset();
    if (leave) {
        try {
            impl_->client.txn({}, forget);
            impl_->client.revoke_lease(impl_->lease.load());
        } catch (const std::exception& e) {
            std::fprintf(stderr, "deskboxd: cluster: could not leave: %s\n", e.what());
        }
    }
}

const std::string& ClusterNode::name() const {
    return impl_->options.node_name;
}
const ClusterOptions& ClusterNode::options() const {
    return impl_->options;
}

std::string ClusterNode::reserve(const std::string& id, const PlacementRequest& request) {
    for (int attempt = 0; attempt < kTransactionAttempts; ++attempt) {
        PlacementInput input = impl_->placement_input();
        PlacementResult placed = place(request, input);
        if (placed.candidates.empty())
            throw PlacementError(placed.reason, placed.capacity_exhausted);
        for (const auto& candidate : placed.candidates) {
            std::size_t capacity = 0;
            for (const auto& node : input.nodes)
                if (node.name == candidate) capacity = node.capacity_sandboxes;
            SandboxRecord record{id,         candidate,     request.runtime, request.template_name,
                                 "creating", json::object()};
            if (impl_->take_slot(record, capacity)) return candidate;
            // Full meanwhile: the next candidate (the view now has its new allocation).
        }
    }
    throw PlacementError("every node filled up while placing", true);
}

bool ClusterNode::reserve_here(const std::vector<SandboxRecord>& records, std::size_t capacity,
                               std::size_t* promised) {
    if (records.empty()) return true;
    std::vector<SandboxRecord> mine = records;
    for (auto& record : mine) {
        record.node = impl_->options.node_name;
        record.state = "creating";
    }
    return impl_->take_slots(mine, capacity, promised);
}

void ClusterNode::record_local(const SandboxRecord& record) {
    SandboxRecord mine = record;
    mine.node = impl_->options.node_name;
    std::lock_guard lock(impl_->written_mutex);
    impl_->record_here(mine);
    impl_->written[mine.id] = mine;
}

void ClusterNode::update(const SandboxRecord& record) {
    SandboxRecord mine = record;
    mine.node = impl_->options.node_name;
    impl_->update_record(mine);
}

void ClusterNode::release(const std::string& id) {
    impl_->give_slot_back(id);
}

std::string ClusterNode::try_lock(const std::string& name) {
    const std::string key = impl_->keys.lock(name);
    for (int attempt = 0; attempt < kTransactionAttempts; ++attempt) {
        auto result =
            impl_->client.txn({Compare::absent(key)},
                              {Operation::put(key, impl_->options.node_name, impl_->lease.load())},
                              {Operation::range(key)});
        if (result.succeeded) return {};
        // Held; unless it went between the compare and the read: then try again.
        if (!result.ranges.at(0).empty()) return result.ranges.at(0).at(0).value;
    }
    throw EtcdError("lock " + name + " kept changing hands", false);
}

void ClusterNode::unlock(const std::string& name) {
    const std::string key = impl_->keys.lock(name);
    impl_->client.txn({Compare::value_is(key, impl_->options.node_name)}, {Operation::erase(key)});
}

ClusterLock::~ClusterLock() {
    try {
        node_.unlock(name_);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deskboxd: cluster: lock %s not given back (its lease ends it): %s\n",
                     name_.c_str(), e.what());
    }
}

std::optional<SandboxLocation> ClusterNode::locate(const std::string& id) {
    {
        std::lock_guard lock(impl_->view_mutex);
        if (auto it = impl_->records.find(id); it != impl_->records.end())
            return impl_->locate_locked(it->second);
    }
    // Made a moment ago on another node, before the watch brought it here.
    auto kv = impl_->client.get(impl_->keys.sandbox(id));
    if (!kv) return std::nullopt;
    SandboxRecord record = SandboxRecord::from_json(json::parse(kv->value));
    std::lock_guard lock(impl_->view_mutex);
    return impl_->locate_locked(record);
}

std::vector<SandboxLocation> ClusterNode::sandboxes() const {
    std::lock_guard lock(impl_->view_mutex);
    std::vector<SandboxLocation> out;
    for (const auto& [id, record] : impl_->records) out.push_back(impl_->locate_locked(record));
    return out;
}

std::vector<NodeStatus> ClusterNode::nodes() const {
    std::lock_guard lock(impl_->view_mutex);
    std::map<std::string, NodeStatus> out;
    for (const auto& [name, record] : impl_->nodes)
        out[name] = {name, record.advertise, true, false, 0, record};
    for (const auto& [id, record] : impl_->records) {
        auto& status = out[record.node];
        status.name = record.node;
        ++status.sandboxes;
    }
    for (const auto& [name, seen] : impl_->allocations) out[name].name = name;
    for (const auto& name : impl_->drained) {
        out[name].name = name;
        out[name].drained = true;
    }
    std::vector<NodeStatus> list;
    for (auto& [name, status] : out) list.push_back(std::move(status));
    return list;
}

std::optional<NodeStatus> ClusterNode::node(const std::string& name) const {
    for (auto& status : nodes())
        if (status.name == name) return status;
    return std::nullopt;
}

void ClusterNode::set_drained(const std::string& name, bool drained) {
    if (!valid_node_name(name)) throw std::invalid_argument("no such node name: " + name);
    if (drained)
        impl_->client.put(impl_->keys.drain(name), "{}");
    else
        impl_->client.erase(impl_->keys.drain(name));
    std::lock_guard lock(impl_->view_mutex);
    if (drained)
        impl_->drained.insert(name);
    else
        impl_->drained.erase(name);
}

std::uint64_t ClusterNode::lease_renewals_failed() const {
    return impl_->renew_failures.load();
}
std::uint64_t ClusterNode::registrations() const {
    return impl_->registration_count.load();
}

}  // namespace deskbox::cluster
