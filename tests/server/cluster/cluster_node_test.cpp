// Cluster membership, placement transactions and loss against a real 3-member etcd; the nodes
// are ClusterNode objects in this process with a fake LocalNode (no sandboxes, no HTTP).
#include "server/cluster/cluster_node.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "server/cluster/etcd_client.hpp"
#include "tests/support/etcd_cluster.hpp"
#include "tests/support/eventually.hpp"

namespace deskbox::cluster {
namespace {

using namespace std::chrono_literals;

class FakeLocal : public LocalNode {
  public:
    explicit FakeLocal(std::size_t capacity) : capacity_(capacity) {}
    NodeRecord facts() override {
        std::lock_guard lock(mutex_);
        NodeRecord r;
        r.capacity_sandboxes = capacity_;
        r.memory_available_mb = 8192;
        r.runtimes = {"container"};
        r.templates["minimal"] = TemplateOffer{{"container"}, false, 0, "", ""};
        return r;
    }
    std::vector<SandboxRecord> local_sandboxes() override {
        std::lock_guard lock(mutex_);
        return running_;
    }
    void run(const std::string& id) {
        std::lock_guard lock(mutex_);
        running_.push_back({id, "", "container", "minimal", "running", {{"id", id}}});
    }

  private:
    std::mutex mutex_;
    std::size_t capacity_;
    std::vector<SandboxRecord> running_;
};

ClusterOptions options_for(const test::EtcdCluster& etcd, const std::string& name,
                           std::chrono::seconds ttl = 10s) {
    ClusterOptions o;
    o.endpoints = etcd.endpoints();
    o.node_name = name;
    o.advertise = "http://" + name + ".test:8700";
    o.lease_ttl = ttl;
    o.prefix = "/t/";
    return o;
}

using test::eventually;

bool alive(const ClusterNode& viewer, const std::string& name) {
    auto status = viewer.node(name);
    return status && status->alive;
}

TEST(ClusterNode, NodesSeeEachOtherAndANameIsOneNodesOnly) {
    test::EtcdCluster etcd(3);
    FakeLocal la(5), lb(5);
    ClusterNode a(options_for(etcd, "a"), la), b(options_for(etcd, "b"), lb);
    ASSERT_TRUE(eventually([&] { return alive(a, "b") && alive(b, "a"); }));
    EXPECT_EQ(a.node("b")->advertise, "http://b.test:8700");
    EXPECT_EQ(a.node("b")->record->capacity_sandboxes, 5u);
    auto impostor = options_for(etcd, "a");
    impostor.advertise = "http://elsewhere:8700";
    try {
        FakeLocal lc(5);
        ClusterNode c(impostor, lc);
        FAIL() << "a second live node took the name 'a'";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("http://a.test:8700"), std::string::npos) << e.what();
    }
    auto bad = options_for(etcd, "no/slash");
    FakeLocal ld(1);
    EXPECT_THROW(ClusterNode(bad, ld), std::invalid_argument);
}

TEST(ClusterNode, ConcurrentReservationsNeverOverbookANode) {
    test::EtcdCluster etcd(3);
    FakeLocal l1(3), l2(3), l3(3);
    ClusterNode n1(options_for(etcd, "n1"), l1), n2(options_for(etcd, "n2"), l2),
        n3(options_for(etcd, "n3"), l3);
    ClusterNode* nodes[] = {&n1, &n2, &n3};
    ASSERT_TRUE(eventually([&] {
        return alive(n1, "n2") && alive(n1, "n3") && alive(n2, "n3") && alive(n3, "n1") &&
               alive(n2, "n1") && alive(n3, "n2");
    }));
    // 20 creates at once, through every node: 9 slots in all.
    std::atomic<int> placed{0}, full{0}, other{0};
    std::mutex placed_mutex;
    std::vector<std::string> placed_ids;
    std::vector<std::thread> threads;
    for (int i = 0; i < 20; ++i)
        threads.emplace_back([&, i] {
            try {
                nodes[i % 3]->reserve("sb-" + std::to_string(i), {"container", "minimal"});
                ++placed;
                std::lock_guard lock(placed_mutex);
                placed_ids.push_back("sb-" + std::to_string(i));
            } catch (const PlacementError& e) {
                (e.capacity_exhausted() ? full : other)++;
            }
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(placed.load(), 9);
    EXPECT_EQ(full.load(), 11);
    EXPECT_EQ(other.load(), 0);
    // What etcd holds: per node at most its capacity, and the allocation equals its records.
    EtcdClient client({etcd.endpoints()});
    std::map<std::string, int> records;
    for (const auto& kv : client.get_prefix("/t/sandboxes/"))
        ++records[SandboxRecord::from_json(nlohmann::json::parse(kv.value)).node];
    for (const char* name : {"n1", "n2", "n3"}) {
        EXPECT_EQ(records[name], 3) << name;
        auto alloc = client.get(std::string("/t/alloc/") + name);
        ASSERT_TRUE(alloc.has_value());
        EXPECT_EQ(Allocation::from_json(nlohmann::json::parse(alloc->value)).sandboxes, 3u);
    }
    // A release gives the slot back to the next create.
    ASSERT_FALSE(placed_ids.empty());
    n1.release(placed_ids.front());
    n1.release(placed_ids.front());  // idempotent
    EXPECT_NO_THROW(n2.reserve("sb-new", {"container", "minimal"}));
    EXPECT_THROW(n2.reserve("sb-newer", {"container", "minimal"}), PlacementError);
}

TEST(ClusterNode, ADrainedNodeGetsNothingNew) {
    test::EtcdCluster etcd(1);
    FakeLocal la(10), lb(10);
    ClusterNode a(options_for(etcd, "a"), la), b(options_for(etcd, "b"), lb);
    ASSERT_TRUE(eventually([&] { return alive(a, "b"); }));
    a.set_drained("b", true);
    ASSERT_TRUE(eventually([&] { return b.node("b")->drained; }));
    for (int i = 0; i < 6; ++i)
        EXPECT_EQ(b.reserve("d" + std::to_string(i), {"container", "minimal"}), "a");
    b.set_drained("b", false);
    EXPECT_EQ(b.reserve("d-after", {"container", "minimal"}), "b");  // the emptier one again
}

TEST(ClusterNode, ANodeThatStopsRenewingIsLostAndComesBackWithItsSandboxes) {
    test::EtcdCluster etcd(3);
    FakeLocal la(10), lb(10);
    ClusterNode a(options_for(etcd, "a", 2s), la);
    auto b = std::make_unique<ClusterNode>(options_for(etcd, "b", 2s), lb);
    ASSERT_TRUE(eventually([&] { return alive(a, "b"); }));
    a.set_drained("a", true);  // so the reservation lands on b
    ASSERT_EQ(a.reserve("on-b", {"container", "minimal"}), "b");
    a.set_drained("a", false);
    lb.run("on-b");
    b->update({"on-b", "b", "container", "minimal", "running", {{"id", "on-b"}}});

    // A crash: b stops renewing without leaving. Within the TTL (+ a heartbeat) it is lost.
    const auto crashed = std::chrono::steady_clock::now();
    b->stop(false);
    b.reset();
    ASSERT_TRUE(eventually([&] { return !alive(a, "b"); }, 10s));
    const auto noticed = std::chrono::steady_clock::now() - crashed;
    EXPECT_LT(noticed, 6s);
    auto where = a.locate("on-b");
    ASSERT_TRUE(where.has_value());
    EXPECT_EQ(where->record.node, "b");
    EXPECT_FALSE(where->node_alive);
    EXPECT_EQ(where->record.state, "running");
    // Nothing is placed on a lost node.
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(a.reserve("x" + std::to_string(i), {"container", "minimal"}), "a");

    // b comes back (a restart that adopted its sandbox): alive again, the sandbox with it.
    ClusterNode b2(options_for(etcd, "b", 2s), lb);
    ASSERT_TRUE(eventually([&] { return alive(a, "b"); }));
    ASSERT_TRUE(eventually([&] { return a.locate("on-b")->node_alive; }));
    EXPECT_EQ(b2.registrations(), 1u);
}

// A lock is one node's at a time, given back by its holder only, and dropped with the holder's
// lease when the holder crashes.
TEST(ClusterNode, ALockIsOneNodesAndGoesWithItsLease) {
    test::EtcdCluster etcd(1);
    FakeLocal la(10), lb(10);
    ClusterNode a(options_for(etcd, "a", 2s), la);
    auto b = std::make_unique<ClusterNode>(options_for(etcd, "b", 2s), lb);
    EXPECT_EQ(a.try_lock("snapshot-name/x"), "");
    EXPECT_EQ(b->try_lock("snapshot-name/x"), "a");
    EXPECT_EQ(a.try_lock("snapshot-name/x"), "a") << "a second taker on the holder too";
    EXPECT_EQ(b->try_lock("snapshot-name/y"), "") << "another name is another lock";
    b->unlock("snapshot-name/x");  // not b's: left alone
    EXPECT_EQ(b->try_lock("snapshot-name/x"), "a");
    ASSERT_EQ(a.try_lock("snapshot-name/z"), "");
    {
        ClusterLock held(a, "snapshot-name/z");
        EXPECT_EQ(b->try_lock("snapshot-name/z"), "a");
    }
    EXPECT_EQ(b->try_lock("snapshot-name/z"), "") << "given back when the ClusterLock went";
    a.unlock("snapshot-name/x");
    EXPECT_EQ(b->try_lock("snapshot-name/x"), "");
    // b crashes holding x and y: its lease lapses, and the locks with it.
    b->stop(false);
    b.reset();
    EXPECT_EQ(a.try_lock("snapshot-name/x"), "b");
    EXPECT_TRUE(eventually([&] { return a.try_lock("snapshot-name/x").empty(); }, 10s));
    EXPECT_EQ(a.try_lock("snapshot-name/y"), "");
}

TEST(ClusterNode, ARestartForgetsSandboxesItNoLongerRunsAndRecordsTheOnesItAdopted) {
    test::EtcdCluster etcd(1);
    FakeLocal la(10);
    auto a = std::make_unique<ClusterNode>(options_for(etcd, "a"), la);
    a->reserve("kept", {"container", "minimal"});
    a->reserve("lost-in-crash", {"container", "minimal"});
    a->stop(false);
    a.reset();
    // After the restart only "kept" runs, plus one made while etcd did not know.
    la.run("kept");
    la.run("adopted-unrecorded");
    ClusterNode again(options_for(etcd, "a"), la);
    EXPECT_TRUE(again.locate("kept").has_value());
    EXPECT_TRUE(again.locate("adopted-unrecorded").has_value());
    EXPECT_FALSE(again.locate("lost-in-crash").has_value());
    EtcdClient client({etcd.endpoints()});
    EXPECT_EQ(
        Allocation::from_json(nlohmann::json::parse(client.get("/t/alloc/a")->value)).sandboxes,
        2u);
}

TEST(ClusterNode, LosingAnEtcdMemberChangesNothing) {
    test::EtcdCluster etcd(3);
    FakeLocal la(10), lb(10);
    ClusterNode a(options_for(etcd, "a", 2s), la), b(options_for(etcd, "b", 2s), lb);
    ASSERT_TRUE(eventually([&] { return alive(a, "b") && alive(b, "a"); }));
    etcd.kill(0);
    for (int i = 0; i < 10; ++i) a.reserve("m" + std::to_string(i), {"container", "minimal"});
    // Longer than the lease: both kept renewing through the other members.
    std::this_thread::sleep_for(3s);
    EXPECT_TRUE(alive(a, "b"));
    EXPECT_TRUE(alive(b, "a"));
    EXPECT_EQ(a.registrations(), 1u);
    EXPECT_EQ(b.registrations(), 1u);
    ASSERT_TRUE(eventually([&] { return b.sandboxes().size() == 10u; }));
}

}  // namespace
}  // namespace deskbox::cluster
