// deskboxd in a cluster, end to end: three real etcd members, three real deskboxd nodes on
// loopback (each with its own state dir and host id range), real container sandboxes. A client
// talks to any node; these tests check where creates land, that every node serves every
// sandbox (plain requests, the stream WebSocket), that placement never overbooks under
// concurrent creates, and what clients see when a node crashes, freezes or comes back, or an
// etcd member dies.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "common/temp_dir.hpp"
#include "tests/server/deskboxd_fixture.hpp"
#include "tests/server/event_stream_client.hpp"
#include "tests/server/ws_client.hpp"
#include "tests/support/etcd_cluster.hpp"
#include "tests/support/webhook_receiver.hpp"

namespace deskbox {
namespace {

using namespace test;

constexpr int kNodes = 3;
constexpr int kCapacity = 2;  // --max-sandboxes of each node
constexpr int kLeaseSeconds = 3;
const std::string kSecret = "cluster-test-secret-0123456789";

class ClusterApiTest : public ::testing::Test {
  protected:
    void SetUp() override {
        REQUIRE_TEMPLATE();
        etcd_ = std::make_unique<EtcdCluster>(3);
        for (int i = 0; i < kNodes; ++i) start_node(i);
    }

    static std::string node_name(int i) { return "node-" + std::string(1, char('a' + i)); }

    std::vector<std::string> node_flags(int i) const {
        // Disjoint host id ranges: two servers on one host must not share sandbox uids.
        const std::uint64_t first = 3'000'000'000ull + std::uint64_t(i) * 8 * 65536;
        return {"--cluster",         "etcd=" + etcd_->endpoint_list(),
                "--node-name",       node_name(i),
                "--cluster-secret",  kSecret,
                "--cluster-lease-s", std::to_string(kLeaseSeconds),
                "--max-sandboxes",   std::to_string(kCapacity),
                "--userns-range",    std::to_string(first) + ":8",
                "--default-network", "false"};
    }

    // What a fixture adds to every node's flags.
    virtual std::vector<std::string> extra_flags() const { return {}; }

    // Starts node i, on the state dir of its previous incarnation if it had one.
    void start_node(int i) {
        std::filesystem::path state;
        if (nodes_.count(i)) {
            state = nodes_[i]->state();
            retired_.push_back(std::move(nodes_[i]));  // its temp dir holds that state
        }
        auto flags = node_flags(i);
        for (auto& flag : extra_flags()) flags.push_back(std::move(flag));
        nodes_[i] = std::make_unique<Server>(flags, state);
        ASSERT_GT(nodes_[i]->port(), 0) << nodes_[i]->log();
    }
    Server& node(int i) { return *nodes_.at(i); }
    static int index_of(const json& name) {
        for (int i = 0; i < kNodes; ++i)
            if (name == node_name(i)) return i;
        ADD_FAILURE() << "no node " << name;
        return 0;
    }

    json create_on(int i, json body = json::object()) {
        body["template"] = "minimal";
        body["resolution"] = {800, 600};
        auto a = node(i).post("/v1/sandboxes", body);
        EXPECT_EQ(a.status, 201u) << a.body << node(i).log();
        return a.js();
    }

    // The node each sandbox is on, as GET /v1/sandboxes on node `asked` says.
    std::map<std::string, std::string> placement_seen_by(int asked) {
        std::map<std::string, std::string> out;
        auto a = node(asked).get("/v1/sandboxes");
        EXPECT_EQ(a.status, 200u) << a.body;
        for (const auto& s : a.js().value("sandboxes", json::array()))
            out[s.value("id", "")] = s.value("node", "");
        return out;
    }

    json node_status(int asked, const std::string& name) {
        auto a = node(asked).get("/v1/nodes");
        EXPECT_EQ(a.status, 200u) << a.body;
        for (const auto& n : a.js().value("nodes", json::array()))
            if (n.value("name", "") == name) return n;
        return json();
    }

    std::unique_ptr<EtcdCluster> etcd_;  // outlives the nodes
    std::vector<std::unique_ptr<Server>> retired_;
    std::map<int, std::unique_ptr<Server>> nodes_;
};

TEST_F(ClusterApiTest, CreatesSpreadAndEveryNodeServesEverySandbox) {
    // Through one node only: the emptiest node wins each time.
    std::map<std::string, json> made;
    for (int i = 0; i < kNodes; ++i) {
        json s = create_on(0);
        ASSERT_TRUE(s.contains("node")) << s;
        made[s["node"].get<std::string>()] = s;
    }
    ASSERT_EQ(made.size(), std::size_t(kNodes)) << "three creates, one per node";

    for (const auto& [owner, sandbox] : made) {
        const std::string id = sandbox["id"];
        const std::string base = "/v1/sandboxes/" + id;
        // The template's terminal has focus once it is mapped: typed text goes to it.
        ASSERT_TRUE(eventually(
            [&] { return node(0).get(base + "/windows").body.find("term") != std::string::npos; }));
        for (int asked = 0; asked < kNodes; ++asked) {
            SCOPED_TRACE("sandbox on " + owner + ", asked " + node_name(asked));
            // Every node lists it with its owner (once its watch brought the record).
            EXPECT_TRUE(eventually([&] { return placement_seen_by(asked)[id] == owner; }, 2s));
            auto inspect = node(asked).get(base);
            ASSERT_EQ(inspect.status, 200u) << inspect.body;
            EXPECT_EQ(inspect.js()["node"], owner);
            EXPECT_EQ(inspect.js()["control_token"], sandbox["control_token"]);
            // A command and a screenshot run where the sandbox is.
            EXPECT_EQ(run(node(asked), id, "hostname"), id + "\n");
            auto shot = node(asked).get(base + "/screenshot?format=png");
            ASSERT_EQ(shot.status, 200u) << shot.body.substr(0, 300);
            EXPECT_EQ(shot.headers["Content-Type"], "image/png");
            // Typing through one node shows in a file read through another.
            const std::string word = "via-" + node_name(asked);
            auto typed = node(asked).post(
                base + "/actions",
                {{"actions", {{{"type", "type"}, {"text", "echo " + word + " > /tmp/w\n"}}}}});
            EXPECT_EQ(typed.status, 200u) << typed.body;
            const int reader = (asked + 1) % kNodes;
            EXPECT_TRUE(eventually([&] {
                return run(node(reader), id, "cat /tmp/w 2>/dev/null") == word + "\n";
            })) << "typed through "
                << node_name(asked) << ", read through " << node_name(reader);
        }
        // The stream WebSocket of a sandbox on another node is relayed to its owner.
        const int stranger = owner == node_name(0) ? 1 : 0;
        WsClient ws(node(stranger).port(),
                    base + "/stream?codec=jpeg&token=" + sandbox["view_token"].get<std::string>());
        ASSERT_TRUE(ws.connected()) << ws.status() << ws.refusal_body();
        auto hello = ws.read();
        ASSERT_TRUE(hello && hello->text);
        EXPECT_EQ(hello->json()["type"], "hello");
        EXPECT_EQ(hello->json()["screen"]["width"], 800);
        EXPECT_TRUE(ws.read_until([](const WsClient::Message& m) { return !m.text; }))
            << "a frame arrives through the relay";
        // A wrong token is refused by the owner, through the relay too.
        WsClient refused(node(stranger).port(), base + "/stream?token=wrong");
        EXPECT_FALSE(refused.connected());
        EXPECT_EQ(refused.status(), 401);
    }

    // GET /v1/nodes agrees, on every node.
    for (int asked = 0; asked < kNodes; ++asked)
        for (int i = 0; i < kNodes; ++i) {
            json n = node_status(asked, node_name(i));
            EXPECT_EQ(n["state"], "up") << n;
            EXPECT_EQ(n["sandboxes"], 1) << n;
            EXPECT_EQ(n["capacity"], kCapacity) << n;
            const json runtimes = n["templates"]["minimal"]["runtimes"];
            EXPECT_NE(std::find(runtimes.begin(), runtimes.end(), "container"), runtimes.end())
                << n;
        }

    // A kill through a stranger frees the owner's slot (the owner releases it before it
    // answers; the stranger's view follows by its watch).
    const json& victim = made.begin()->second;
    const int stranger = made.begin()->first == node_name(0) ? 1 : 0;
    auto killed = node(stranger).del("/v1/sandboxes/" + victim["id"].get<std::string>());
    EXPECT_EQ(killed.status, 200u) << killed.body;
    EXPECT_TRUE(eventually(
        [&] { return node_status(stranger, made.begin()->first)["sandboxes"] == 0; }, 2s));
    EXPECT_EQ(node(stranger).get("/v1/sandboxes/" + victim["id"].get<std::string>()).status, 404u);
}

// A named snapshot stays on the node that made it; a create from it through any node is placed
// there, and one from a name no node holds is 404.
TEST_F(ClusterApiTest, ASnapshotStartsASandboxThroughAnyNode) {
    json source = create_on(0);
    const std::string id = source["id"];
    const int owner = index_of(source["node"]);
    run(node(owner), id, "echo kept > /home/user/state");
    const int stranger = (owner + 1) % kNodes;
    // Made through a node that does not run the sandbox.
    auto made = node(stranger).post("/v1/sandboxes/" + id + "/snapshots", {{"name", "shared"}});
    ASSERT_EQ(made.status, 201u) << made.body << node(owner).log();
    // Every node learns where it is from the owner's next heartbeat.
    for (int asked = 0; asked < kNodes; ++asked)
        EXPECT_TRUE(eventually(
            [&] {
                const json held = node_status(asked, node_name(owner))["snapshots"];
                return held.is_array() &&
                       std::find(held.begin(), held.end(), "shared") != held.end();
            },
            10s))
            << node_status(asked, node_name(owner));
    for (int asked = 0; asked < kNodes; ++asked) {
        auto copy = node(asked).post("/v1/sandboxes", {{"snapshot", "shared"}});
        ASSERT_EQ(copy.status, 201u) << copy.body << node(asked).log();
        EXPECT_EQ(copy.js()["node"], node_name(owner)) << "placed where the snapshot is";
        const std::string copy_id = copy.js()["id"];
        EXPECT_EQ(run(node(asked), copy_id, "cat /home/user/state"), "kept\n");
        EXPECT_EQ(node(asked).del("/v1/sandboxes/" + copy_id).status, 200u);
    }
    auto unknown = node(stranger).post("/v1/sandboxes", {{"snapshot", "nowhere"}});
    EXPECT_EQ(unknown.status, 404u) << unknown.body;
    EXPECT_EQ(unknown.js()["error"]["field"], "snapshot") << unknown.body;
    // Listed, inspected and deleted through any node, on the one that holds it.
    for (int asked = 0; asked < kNodes; ++asked) {
        const json listed = node(asked).get("/v1/snapshots").js();
        ASSERT_EQ(listed["snapshots"].size(), 1u) << listed;
        EXPECT_EQ(listed["snapshots"][0]["name"], "shared");
        EXPECT_EQ(listed["snapshots"][0]["node"], node_name(owner));
        EXPECT_EQ(listed["missing_nodes"], json::array()) << listed;
        const auto inspected = node(asked).get("/v1/snapshots/shared");
        ASSERT_EQ(inspected.status, 200u) << inspected.body;
        EXPECT_EQ(inspected.js()["source_sandbox"], id);
        EXPECT_EQ(inspected.js()["node"], node_name(owner));
    }
    EXPECT_EQ(node(stranger).get("/v1/snapshots/nowhere").status, 404u);
    const auto deleted = node(stranger).del("/v1/snapshots/shared");
    ASSERT_EQ(deleted.status, 200u) << deleted.body;
    EXPECT_EQ(deleted.js()["node"], node_name(owner)) << deleted.body;
    EXPECT_EQ(node(owner).get("/v1/snapshots/shared").status, 404u);
    EXPECT_EQ(node(stranger).del("/v1/snapshots/shared").status, 404u);
    EXPECT_EQ(node(0).del("/v1/sandboxes/" + id).status, 200u);
}

// A snapshot's name is unique in the cluster: a name one node holds is 409 on every other,
// naming the holder; two saves of one name at once keep one; a live node that cannot say stops
// the save (503), a lost one does not (a warning), and a name two nodes ended up holding that
// way is refused for creates (409 snapshot_ambiguous) rather than started from either.
TEST_F(ClusterApiTest, ASnapshotNameIsTakenOnceInTheCluster) {
    std::map<int, std::string> sandbox_of;  // node index -> its sandbox
    for (int i = 0; i < kNodes; ++i) {
        json s = create_on(0);
        sandbox_of[index_of(s["node"])] = s.value("id", "");
    }
    ASSERT_EQ(sandbox_of.size(), std::size_t(kNodes)) << "one sandbox on each node";
    auto snapshot = [&](int through, int owner, const std::string& name) {
        return node(through).post("/v1/sandboxes/" + sandbox_of[owner] + "/snapshots",
                                  {{"name", name}});
    };
    auto listed = [&](const std::string& name) {
        std::vector<std::string> holders;
        for (const auto& s : node(0).get("/v1/snapshots").js().value("snapshots", json::array()))
            if (s.value("name", "") == name) holders.push_back(s.value("node", ""));
        return holders;
    };

    auto first = snapshot(1, 0, "taken");
    ASSERT_EQ(first.status, 201u) << first.body;
    EXPECT_EQ(first.js()["node"], node_name(0));
    EXPECT_FALSE(first.js().contains("warnings")) << first.body;
    for (int through = 0; through < kNodes; ++through) {
        auto again = snapshot(through, 1 + through % 2, "taken");
        EXPECT_EQ(again.status, 409u) << again.body;
        EXPECT_EQ(again.js()["error"]["code"], "snapshot_exists") << again.body;
        EXPECT_EQ(again.js()["error"]["node"], node_name(0)) << again.body;
        EXPECT_NE(again.js()["error"].value("message", "").find("on node " + node_name(0)),
                  std::string::npos)
            << again.body;
    }
    EXPECT_EQ(listed("taken"), std::vector<std::string>{node_name(0)});

    // Two saves of one name at once: the name's cluster lock lets one through, the other is
    // refused (it is being saved, or it exists, on the first one's node).
    Answer on_b, on_c;
    {
        std::thread b([&] { on_b = snapshot(0, 1, "race"); });
        std::thread c([&] { on_c = snapshot(0, 2, "race"); });
        b.join();
        c.join();
    }
    EXPECT_EQ((std::multiset<unsigned>{on_b.status, on_c.status}),
              (std::multiset<unsigned>{201u, 409u}))
        << on_b.body << "\n"
        << on_c.body;
    const Answer& kept = on_b.status == 201u ? on_b : on_c;
    const Answer& refused = on_b.status == 201u ? on_c : on_b;
    EXPECT_EQ(listed("race"), std::vector<std::string>{kept.js().value("node", "?")});
    EXPECT_EQ(refused.js()["error"]["code"], "snapshot_exists") << refused.body;
    EXPECT_EQ(refused.js()["error"]["node"], kept.js()["node"]) << refused.body;

    // Node c holds "both"; frozen, it cannot say whether it does: nothing is saved.
    ASSERT_EQ(snapshot(2, 2, "both").status, 201u);
    ASSERT_EQ(::kill(node(2).pid(), SIGSTOP), 0);
    auto silent = snapshot(0, 0, "both");
    const bool lost = eventually([&] { return node_status(0, node_name(2))["state"] == "lost"; },
                                 std::chrono::seconds(4 * kLeaseSeconds));
    // Lost (its lease lapsed), it is not asked: saved, with a warning naming it.
    auto warned = lost ? snapshot(0, 0, "both") : Answer{};
    ::kill(node(2).pid(), SIGCONT);
    EXPECT_EQ(silent.status, 503u) << silent.body;
    EXPECT_EQ(silent.js()["error"]["code"], "cluster_unavailable") << silent.body;
    EXPECT_EQ(silent.js()["error"]["node"], node_name(2)) << silent.body;
    ASSERT_TRUE(lost);
    ASSERT_EQ(warned.status, 201u) << warned.body;
    ASSERT_EQ(warned.js()["warnings"].size(), 1u) << warned.body;
    EXPECT_NE(warned.js()["warnings"][0].get<std::string>().find("node " + node_name(2)),
              std::string::npos)
        << warned.body;
    // Back, with its own "both": once the nodes' records say so (a heartbeat after each
    // save), a create from the name is refused, naming both.
    for (int holder : {0, 2})
        ASSERT_TRUE(eventually(
            [&] {
                const json held = node_status(1, node_name(holder))["snapshots"];
                return held.is_array() && std::find(held.begin(), held.end(), "both") != held.end();
            },
            std::chrono::seconds(4 * kLeaseSeconds)))
            << node(holder).log();
    auto ambiguous = node(1).post("/v1/sandboxes", {{"snapshot", "both"}});
    EXPECT_EQ(ambiguous.status, 409u) << ambiguous.body;
    EXPECT_EQ(ambiguous.js()["error"]["code"], "snapshot_ambiguous") << ambiguous.body;
    EXPECT_NE(ambiguous.js()["error"].value("message", "").find(node_name(0) + ", " + node_name(2)),
              std::string::npos)
        << ambiguous.body;
    // Deleting one through its node makes the name one snapshot's again.
    ASSERT_EQ(node(2).del("/v1/snapshots/both").status, 200u);
    auto started = node(1).post("/v1/sandboxes", {{"snapshot", "both"}});
    EXPECT_EQ(started.status, 201u) << started.body;
    EXPECT_EQ(started.js()["node"], node_name(0)) << started.body;
}

// A fork through any node is made on the source's node (the copies start from its save there),
// each copy on a slot of that node promised in the cluster first: the answer names their node,
// every node reaches them at once, and a node without room for the count refuses it (429)
// naming itself and its free places.
TEST_F(ClusterApiTest, AForkThroughAnyNodeMakesTheCopiesOnTheSourcesNode) {
    json source = create_on(0);
    const std::string id = source["id"];
    const int owner = index_of(source["node"]);
    const int stranger = (owner + 1) % kNodes, third = (owner + 2) % kNodes;
    run(node(owner), id, "echo kept > /home/user/state");

    auto forked = node(stranger).post("/v1/sandboxes/" + id + "/fork", {{"count", 1}});
    ASSERT_EQ(forked.status, 201u) << forked.body << node(owner).log();
    const json copies = forked.js()["sandboxes"];
    ASSERT_EQ(copies.size(), 1u) << forked.body;
    EXPECT_EQ(copies[0]["node"], node_name(owner)) << forked.body;
    EXPECT_TRUE(copies[0].contains("control_token")) << forked.body;
    const std::string copy = copies[0]["id"];
    EXPECT_NE(copy, id);
    // Routed from every node at once: its record was there before the answer.
    for (int asked : {third, stranger, owner}) {
        EXPECT_EQ(run(node(asked), copy, "cat /home/user/state"), "kept\n") << node_name(asked);
        EXPECT_EQ(node(asked).get("/v1/sandboxes/" + copy).js()["node"], node_name(owner));
    }
    EXPECT_EQ(node_status(third, node_name(owner))["sandboxes"], 2);

    // The owner is full (two of two): a fork is refused, and nothing is left promised.
    auto full = node(third).post("/v1/sandboxes/" + id + "/fork", {{"count", 1}});
    EXPECT_EQ(full.status, 429u) << full.body;
    EXPECT_EQ(full.js()["error"]["code"], "too_many_sandboxes") << full.body;
    EXPECT_EQ(full.js()["error"]["field"], "count") << full.body;
    EXPECT_NE(full.js()["error"].value("message", "").find("node " + node_name(owner)),
              std::string::npos)
        << full.body;
    EXPECT_NE(full.js()["error"].value("message", "").find("has 0 free"), std::string::npos)
        << full.body;
    EXPECT_EQ(node_status(third, node_name(owner))["sandboxes"], 2);

    // The copy killed through another node frees its slot; two copies still do not fit.
    ASSERT_EQ(node(stranger).del("/v1/sandboxes/" + copy).status, 200u);
    ASSERT_TRUE(
        eventually([&] { return node_status(third, node_name(owner))["sandboxes"] == 1; }, 2s));
    auto two = node(third).post("/v1/sandboxes/" + id + "/fork", {{"count", 2}});
    EXPECT_EQ(two.status, 429u) << two.body;
    EXPECT_NE(two.js()["error"].value("message", "").find("has 1 free"), std::string::npos)
        << two.body;
    auto again = node(third).post("/v1/sandboxes/" + id + "/fork", {{"count", 1}});
    ASSERT_EQ(again.status, 201u) << again.body;
    EXPECT_EQ(again.js()["sandboxes"][0]["node"], node_name(owner));
}

TEST_F(ClusterApiTest, ConcurrentCreatesOnEveryNodeNeverExceedCapacity) {
    constexpr int kCreates = 20;
    std::vector<Answer> answers(kCreates);
    {
        std::vector<std::thread> clients;
        for (int c = 0; c < kCreates; ++c)
            clients.emplace_back([&, c] {
                answers[c] = node(c % kNodes).post("/v1/sandboxes", {{"template", "minimal"}});
            });
        for (auto& t : clients) t.join();
    }
    std::map<std::string, int> per_node;
    int made = 0, full = 0;
    for (const auto& a : answers) {
        if (a.status == 201u) {
            ++made;
            ++per_node[a.js().value("node", "")];
        } else {
            EXPECT_EQ(a.status, 503u) << a.body;
            EXPECT_EQ(a.js()["error"]["code"], "capacity_exhausted") << a.body;
            ++full;
        }
    }
    EXPECT_EQ(made, kNodes * kCapacity);
    EXPECT_EQ(full, kCreates - kNodes * kCapacity);
    for (const auto& [name, count] : per_node) EXPECT_LE(count, kCapacity) << name;
    // Each node runs what the cluster says it runs.
    for (int i = 0; i < kNodes; ++i) {
        auto health = node(i).get("/healthz");
        EXPECT_EQ(health.js()["sandboxes"], per_node[node_name(i)]) << node_name(i);
    }
}

TEST_F(ClusterApiTest, DrainedNodesGetNoNewSandboxesAndUnknownNodesAre404) {
    auto drained = node(1).post("/v1/nodes/" + node_name(0) + "/drain", json::object());
    ASSERT_EQ(drained.status, 200u) << drained.body;
    EXPECT_EQ(drained.js()["drained"], true);
    for (int i = 0; i < 4; ++i) EXPECT_NE(create_on(0).value("node", ""), node_name(0));
    EXPECT_EQ(node(2).post("/v1/nodes/no-such-node/drain", json::object()).status, 404u);
    auto undrained = node(2).post("/v1/nodes/" + node_name(0) + "/undrain", json::object());
    EXPECT_EQ(undrained.js()["drained"], false) << undrained.body;
    EXPECT_EQ(create_on(1).value("node", ""), node_name(0)) << "the only node with room";
}

TEST_F(ClusterApiTest, ForwardingHeadersWithoutTheSecretAreRefused) {
    json s = create_on(0);
    const std::string base = "/v1/sandboxes/" + s["id"].get<std::string>();
    auto forged = node(0).call(
        http::verb::get, base, {},
        {{"X-Deskbox-Forwarded-By", node_name(1)}, {"X-Deskbox-Cluster-Secret", "not-the-secret"}});
    EXPECT_EQ(forged.status, 403u) << forged.body;
    auto placed = node(0).call(http::verb::post, "/v1/sandboxes", "{}",
                               {{"X-Deskbox-Placement", "sb-000000000001"}});
    EXPECT_EQ(placed.status, 403u) << placed.body;
}

TEST_F(ClusterApiTest, ACrashedNodeIsLostAndItsSandboxesReturnWithIt) {
    json s = create_on(0);
    const int owner = index_of(s["node"]);
    const int other = (owner + 1) % kNodes;
    const std::string base = "/v1/sandboxes/" + s["id"].get<std::string>();
    run(node(other), s["id"], "echo kept > /tmp/kept");

    node(owner).kill_hard();
    ASSERT_TRUE(eventually([&] { return node_status(other, node_name(owner))["state"] == "lost"; },
                           std::chrono::seconds(4 * kLeaseSeconds)));
    auto lost = node(other).get(base);
    EXPECT_EQ(lost.status, 503u) << lost.body;
    EXPECT_EQ(lost.js()["error"]["code"], "node_lost");
    EXPECT_EQ(lost.js()["error"]["node"], node_name(owner));
    EXPECT_EQ(lost.headers["Retry-After"], "5");
    bool listed_lost = false;
    const json listed = node(other).get("/v1/sandboxes").js();
    for (const auto& e : listed["sandboxes"])
        listed_lost |= e["id"] == s["id"] && e["state"] == "lost" && e["node"] == node_name(owner);
    EXPECT_TRUE(listed_lost) << listed;
    // Its slot stays promised: its sandboxes are never made again elsewhere; and nothing new
    // is placed on it.
    EXPECT_EQ(node_status(other, node_name(owner))["sandboxes"], 1);
    for (int i = 0; i < 2; ++i) EXPECT_NE(create_on(other)["node"], node_name(owner));

    // The node comes back on its state dir: it adopts its sandbox, and clients reach it again.
    start_node(owner);
    ASSERT_TRUE(eventually([&] { return node(other).get(base).status == 200u; },
                           std::chrono::seconds(4 * kLeaseSeconds)))
        << node(owner).log();
    EXPECT_EQ(run(node(other), s["id"], "cat /tmp/kept"), "kept\n");
    EXPECT_EQ(node_status(other, node_name(owner))["state"], "up");
}

// Each node keeps the ledger of its own sandboxes; GET /v1/usage through any node covers them
// all (JSON and CSV), and names a node whose usage could not be read.
TEST_F(ClusterApiTest, UsageThroughAnyNodeCoversEveryNode) {
    std::set<std::string> where;
    std::vector<std::string> ids;
    for (int i = 0; i < kNodes; ++i) {
        json s = create_on(0, {{"metadata", {{"customer", "acme"}}}});
        where.insert(s.value("node", ""));
        ids.push_back(s.value("id", ""));
    }
    ASSERT_EQ(where.size(), std::size_t(kNodes)) << "one sandbox on each node";
    for (const auto& id : ids) EXPECT_EQ(node(0).del("/v1/sandboxes/" + id).status, 200u);
    for (int asked = 0; asked < kNodes; ++asked) {
        auto a = node(asked).get("/v1/usage?group_by=metadata.customer");
        ASSERT_EQ(a.status, 200u) << a.body;
        const json report = a.js();
        ASSERT_EQ(report["groups"].size(), 1u) << report;
        EXPECT_EQ(report["groups"][0]["key"], "acme");
        EXPECT_EQ(report["groups"][0]["sandboxes"], kNodes) << report;
        EXPECT_EQ(report["total"]["sandboxes"], kNodes);
        EXPECT_EQ(report["missing_nodes"], json::array());
    }
    auto csv = node(1).get("/v1/usage?group_by=metadata.customer&format=csv");
    EXPECT_NE(csv.body.find("\n\"acme\",3,"), std::string::npos) << csv.body;
    // Each ended sandbox's samples, through any node: the one that ran it answers.
    for (const auto& id : ids)
        for (int asked = 0; asked < kNodes; ++asked) {
            auto m = node(asked).get("/v1/sandboxes/" + id + "/metrics");
            ASSERT_EQ(m.status, 200u) << "node " << asked << ": " << m.body;
            EXPECT_EQ(m.js()["id"], id) << m.body;
            EXPECT_GE(m.js()["samples"].size(), 1u) << m.body;
        }
    auto bad_step = node(0).get("/v1/sandboxes/" + ids[1] + "/metrics?step=0");
    EXPECT_EQ(bad_step.status, 400u) << bad_step.body;
    EXPECT_EQ(node(0).get("/v1/sandboxes/sb-none/metrics").status, 404u);

    node(2).kill_hard();
    ASSERT_TRUE(eventually([&] { return node_status(0, node_name(2))["state"] == "lost"; },
                           std::chrono::seconds(4 * kLeaseSeconds)));
    const json partial = node(0).get("/v1/usage?group_by=metadata.customer").js();
    ASSERT_EQ(partial["missing_nodes"].size(), 1u) << partial;
    EXPECT_EQ(partial["missing_nodes"][0]["node"], node_name(2));
    EXPECT_EQ(partial["groups"][0]["sandboxes"], kNodes - 1) << partial;
    auto partial_csv = node(0).get("/v1/usage?format=csv");
    EXPECT_EQ(partial_csv.headers["X-Deskbox-Missing-Nodes"], node_name(2));
}

TEST_F(ClusterApiTest, AFrozenNodeIsLostUntilItThaws) {
    json s = create_on(1);
    const int owner = index_of(s["node"]);
    const int other = (owner + 1) % kNodes;
    const std::string base = "/v1/sandboxes/" + s["id"].get<std::string>();
    ASSERT_EQ(::kill(node(owner).pid(), SIGSTOP), 0);
    // (Only GET /v1/nodes until then: a request forwarded to a frozen node waits for it.)
    const bool lost =
        eventually([&] { return node_status(other, node_name(owner))["state"] == "lost"; },
                   std::chrono::seconds(4 * kLeaseSeconds));
    const unsigned lost_status = lost ? node(other).get(base).status : 0;
    ::kill(node(owner).pid(), SIGCONT);
    EXPECT_TRUE(lost) << "a node that stops renewing its lease is lost";
    EXPECT_EQ(lost_status, 503u);
    EXPECT_TRUE(eventually([&] { return node(other).get(base).status == 200u; },
                           std::chrono::seconds(4 * kLeaseSeconds)))
        << node(owner).log();
    EXPECT_EQ(run(node(other), s["id"], "echo back"), "back\n");
}

TEST_F(ClusterApiTest, AnEtcdMemberDyingChangesNothingForClients) {
    json before = create_on(0);
    etcd_->kill(0);
    // Nodes connected to the dead member move to another; creates and routing go on.
    json after = create_on(1);
    for (const json& s : {before, after})
        for (int asked = 0; asked < kNodes; ++asked)
            EXPECT_EQ(run(node(asked), s["id"], "echo ok"), "ok\n") << node_name(asked);
    for (int i = 0; i < kNodes; ++i)
        EXPECT_EQ(node_status(i, node_name(i))["state"], "up") << node(i).log();
    etcd_->restart(0);
    etcd_->wait_healthy();
}

// Every node posts its lifecycle events to one receiver (a webhook in each node's config).
class ClusterApiWebhookTest : public ClusterApiTest {
  protected:
    void SetUp() override {
        const json hook = {{"url", receiver_.url()},
                           {"secret", "cluster-hook-secret"},
                           {"timeout_ms", 2000},
                           {"retry_initial_ms", 50},
                           {"retry_max_ms", 400}};
        std::ofstream(config_) << json{{"webhooks", json::array({hook})}}.dump();
        ClusterApiTest::SetUp();
    }
    std::vector<std::string> extra_flags() const override { return {"--config", config_.string()}; }

    WebhookReceiver receiver_;
    TempDir dir_{"cluster-webhook"};
    std::filesystem::path config_ = dir_.path() / "deskboxd.json";
};

// Event ids name the node that wrote them: a receiver all nodes post to gets ids unique across
// the cluster (the same running numbers on every node would collide), each node's own events in
// order. A node's stream resumes after its ids and refuses another node's, naming that node; a
// sandbox's stream through a node that does not run it is relayed to the one that does.
TEST_F(ClusterApiWebhookTest, EventIdsAreUniqueAcrossNodesAndResumeOnTheirNode) {
    std::map<std::string, json> sandbox_on;  // node -> its sandbox
    for (int i = 0; i < kNodes; ++i) {
        json s = create_on(0);
        sandbox_on[s.value("node", "")] = s;
    }
    ASSERT_EQ(sandbox_on.size(), std::size_t(kNodes)) << "one sandbox on each node";
    std::set<std::string> ids;
    ASSERT_TRUE(eventually(
        [&] {
            ids.clear();
            for (const auto& r : receiver_.accepted()) ids.insert(json::parse(r.body)["id"]);
            return ids.size() >= std::size_t(2 * kNodes);  // created and ready of each
        },
        30s))
        << ids.size();
    std::map<std::string, std::vector<std::uint64_t>> numbers;  // node -> its events' numbers
    for (const auto& r : receiver_.accepted()) {
        const json event = json::parse(r.body);
        const std::string id = event["id"];
        EXPECT_EQ(r.header("Deskbox-Event-Id"), id);
        const auto colon = id.find(':');
        ASSERT_NE(colon, std::string::npos) << id;
        const std::string writer = id.substr(0, colon);
        ASSERT_TRUE(sandbox_on.count(writer)) << id;
        EXPECT_EQ(event["sandbox_id"], sandbox_on[writer]["id"]) << "a node sends its own";
        numbers[writer].push_back(std::stoull(id.substr(colon + 1)));
    }
    EXPECT_EQ(ids.size(), std::size_t(2 * kNodes));
    for (const auto& [writer, seen] : numbers)
        EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end())) << writer;

    for (int i = 0; i < kNodes; ++i) {
        SCOPED_TRACE(node_name(i));
        const json& mine = sandbox_on[node_name(i)];
        EventStreamClient all(node(i).port(), "/v1/events?after=0");
        EXPECT_NE(all.header().find("200 OK"), std::string::npos);
        const json created = all.next(), ready = all.next();
        EXPECT_EQ(created.value("id", ""), node_name(i) + ":1") << created;
        EXPECT_EQ(created.value("sandbox_id", ""), mine["id"]);
        EXPECT_EQ(ready.value("type", ""), "ready") << ready;
        // Resumed on its node, after its own id.
        EventStreamClient resumed(node(i).port(), "/v1/events",
                                  "Last-Event-ID: " + created.value("id", "") + "\r\n");
        resumed.header();
        EXPECT_EQ(resumed.next().value("id", ""), ready.value("id", ""));
        // Another node has no such place in its log: refused, naming the node to ask.
        const int other = (i + 1) % kNodes;
        auto refused = node(other).get("/v1/events?after=" + created.value("id", ""));
        EXPECT_EQ(refused.status, 400u) << refused.body;
        EXPECT_EQ(refused.js()["error"].value("field", ""), "after");
        EXPECT_NE(refused.js()["error"].value("message", "").find("ask node " + node_name(i)),
                  std::string::npos)
            << refused.body;
        // The sandbox's own stream, with its token, through a node that does not run it.
        EventStreamClient relayed(
            node(other).port(),
            "/v1/sandboxes/" + mine["id"].get<std::string>() +
                "/events?after=0&token=" + mine["view_token"].get<std::string>());
        EXPECT_NE(relayed.header().find("200 OK"), std::string::npos);
        EXPECT_EQ(relayed.next(5s).value("id", ""), created.value("id", ""));
    }
}

}  // namespace
}  // namespace deskbox
