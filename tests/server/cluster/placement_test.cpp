#include "server/cluster/placement.hpp"

#include <gtest/gtest.h>

namespace deskbox::cluster {
namespace {

NodeRecord node(const std::string& name, std::size_t capacity,
                std::vector<std::string> runtimes = {"container", "microvm"}) {
    NodeRecord n;
    n.name = name;
    n.advertise = "http://" + name + ":8700";
    n.capacity_sandboxes = capacity;
    n.memory_available_mb = 8192;
    n.runtimes = runtimes;
    n.templates["minimal"] = TemplateOffer{runtimes, false, 0, "", ""};
    return n;
}

PlacementRequest minimal(const std::string& runtime = "container") {
    return {runtime, "minimal"};
}

TEST(Placement, TheNodeWithTheMostFreeSlotsWinsThenFewerSandboxesThenTheName) {
    PlacementInput in;
    in.nodes = {node("a", 10), node("b", 20), node("c", 10)};
    in.allocations = {{"a", {5}}, {"b", {5}}, {"c", {2}}};
    // Free fractions: a 0.5, b 0.75, c 0.8.
    EXPECT_EQ(place(minimal(), in).candidates, (std::vector<std::string>{"c", "b", "a"}));
    in.allocations = {{"a", {5}}, {"b", {10}}, {"c", {5}}};  // all 0.5: fewer sandboxes first
    EXPECT_EQ(place(minimal(), in).candidates, (std::vector<std::string>{"a", "c", "b"}));
    in.allocations.clear();  // all empty: by name
    EXPECT_EQ(place(minimal(), in).candidates, (std::vector<std::string>{"a", "b", "c"}));
}

TEST(Placement, FullDrainedAndPressuredNodesAreSkipped) {
    PlacementInput in;
    in.nodes = {node("a", 2), node("b", 2), node("c", 2)};
    in.allocations = {{"a", {2}}};
    in.drained = {"b"};
    in.nodes[2].memory_available_mb = 100;  // below the reserve
    auto result = place(minimal(), in);
    EXPECT_TRUE(result.candidates.empty());
    EXPECT_TRUE(result.capacity_exhausted);
    EXPECT_NE(result.reason.find("is full"), std::string::npos) << result.reason;
    EXPECT_NE(result.reason.find("1 drained"), std::string::npos) << result.reason;
    EXPECT_NE(result.reason.find("1 low on memory"), std::string::npos) << result.reason;
    in.nodes[2].memory_available_mb = 4096;
    EXPECT_EQ(place(minimal(), in).candidates, std::vector<std::string>{"c"});
}

TEST(Placement, ABuiltTemplateGoesWhereItIsReadyOrWhereItCanBePulled) {
    PlacementInput in;
    in.nodes = {node("a", 4), node("b", 4), node("c", 4, {"microvm"})};
    in.nodes[0].templates["app:v1"] = TemplateOffer{{"container"}, false, 0, "0123456789ab", ""};
    PlacementRequest app{"container", "app:v1"};
    // Only where it is built, unless the request says it can be pulled.
    EXPECT_EQ(place(app, in).candidates, std::vector<std::string>{"a"});
    app.pullable = true;
    EXPECT_EQ(place(app, in).candidates, (std::vector<std::string>{"a", "b"}))
        << "b pulls it first; c does not run containers";
    // Ready ranks half the slots higher: a 1/4 full holder beats an empty puller, a 3/4 full
    // one does not...
    in.allocations = {{"a", {1}}};
    EXPECT_EQ(place(app, in).candidates, (std::vector<std::string>{"a", "b"}));
    in.allocations = {{"a", {3}}};
    EXPECT_EQ(place(app, in).candidates, (std::vector<std::string>{"b", "a"}));
    // ...and a drained holder leaves the pullers.
    in.allocations.clear();
    in.drained = {"a"};
    EXPECT_EQ(place(app, in).candidates, std::vector<std::string>{"b"});
    app.pullable = false;
    auto result = place(app, in);
    EXPECT_TRUE(result.candidates.empty());
    EXPECT_FALSE(result.capacity_exhausted);
}

TEST(Placement, EveryNodeFullIsCapacityNotAMissingFeature) {
    PlacementInput in;
    in.nodes = {node("a", 1), node("b", 1)};
    in.allocations = {{"a", {1}}, {"b", {1}}};
    auto result = place(minimal(), in);
    EXPECT_TRUE(result.candidates.empty());
    EXPECT_TRUE(result.capacity_exhausted);
    EXPECT_EQ(result.reason, "every node that can run it is full (2 nodes, 2 sandboxes)");
}

TEST(Placement, RuntimeAndTemplateMustBeThereAndTheReasonSaysWhichIsMissing) {
    PlacementInput in;
    in.nodes = {node("a", 5, {"container"}), node("b", 5, {"container"})};
    auto vm = place(minimal("microvm"), in);
    EXPECT_TRUE(vm.candidates.empty());
    EXPECT_FALSE(vm.capacity_exhausted);
    EXPECT_EQ(vm.reason, "no node runs the microvm runtime");

    in.nodes[1].runtimes.push_back("microvm");  // runs microVMs, but the template is not built
    vm = place(minimal("microvm"), in);
    EXPECT_EQ(vm.reason, "no node has template 'minimal' built for microvm");
    in.nodes[1].templates["minimal"].runtimes.push_back("microvm");
    EXPECT_EQ(place(minimal("microvm"), in).candidates, std::vector<std::string>{"b"});

    PlacementRequest other{"container", "desktop"};
    EXPECT_EQ(place(other, in).reason, "no node has template 'desktop' built for container");
    EXPECT_EQ(place(minimal(), PlacementInput{}).reason, "no node of the cluster is up");
    in.drained = {"a", "b"};
    EXPECT_EQ(place(minimal(), in).reason, "every node is drained");
}

TEST(Placement, AStartFromASnapshotGoesWhereTheSnapshotIs) {
    PlacementInput in;
    in.nodes = {node("a", 4), node("b", 4), node("c", 4, {"microvm"})};
    in.nodes[1].snapshots = {"warm"};
    in.nodes[2].snapshots = {"vm-warm"};
    in.allocations = {{"a", {0}}, {"b", {3}}};
    PlacementRequest from;
    from.snapshot = "warm";
    // Only the holder, however full the others are not.
    EXPECT_EQ(place(from, in).candidates, std::vector<std::string>{"b"});
    from.snapshot = "vm-warm";
    EXPECT_EQ(place(from, in).candidates, std::vector<std::string>{"c"}) << "template offers aside";
    from.snapshot = "nowhere";
    auto none = place(from, in);
    EXPECT_TRUE(none.candidates.empty());
    EXPECT_FALSE(none.capacity_exhausted);
    EXPECT_NE(none.reason.find("snapshot 'nowhere'"), std::string::npos) << none.reason;
    // The holder full: capacity, not a missing snapshot.
    from.snapshot = "warm";
    in.allocations["b"] = {4};
    auto full = place(from, in);
    EXPECT_TRUE(full.candidates.empty());
    EXPECT_TRUE(full.capacity_exhausted) << full.reason;
    in.drained = {"b"};
    EXPECT_TRUE(place(from, in).candidates.empty());
}

TEST(Placement, MicrovmsGoWhereTheyStartFast) {
    PlacementInput in;
    in.nodes = {node("a", 10), node("b", 10), node("c", 10)};
    in.allocations = {{"b", {4}}, {"c", {4}}};
    // The offers say which runtime their snapshot and pool are for (placement knows no names).
    for (auto& n : in.nodes) n.templates["minimal"].fast_start_runtime = "microvm";
    in.nodes[1].templates["minimal"].template_snapshot = true;  // b: 0.6 + 0.2
    in.nodes[2].templates["minimal"].pool_ready = 1;            // c: 0.6 + 0.5
    EXPECT_EQ(place(minimal("microvm"), in).candidates,
              (std::vector<std::string>{"c", "a", "b"}));  // a: 1.0 free beats b's 0.8
    // Containers do not care.
    EXPECT_EQ(place(minimal("container"), in).candidates.front(), "a");
}

TEST(Records, RoundTripThroughJsonAndNodeNamesAreChecked) {
    NodeRecord n = node("node-1", 7);
    n.templates["minimal"].pool_ready = 2;
    n.templates["minimal"].fast_start_runtime = "microvm";
    n.heartbeat_at_ms = 42;
    n.cpus = 16;
    n.cpus_idle = 11.5;
    auto back = NodeRecord::from_json(n.to_json());
    EXPECT_EQ(back.to_json(), n.to_json());
    EXPECT_EQ(back.cpus, 16u);
    EXPECT_EQ(back.cpus_idle, 11.5);
    SandboxRecord r{"sb-1", "node-1", "container", "minimal", "running", {{"id", "sb-1"}}};
    EXPECT_EQ(SandboxRecord::from_json(r.to_json()).to_json(), r.to_json());
    EXPECT_EQ(Allocation::from_json(Allocation{3}.to_json()).sandboxes, 3u);
    EXPECT_TRUE(valid_node_name("node-1.rack_2"));
    EXPECT_FALSE(valid_node_name(""));
    EXPECT_FALSE(valid_node_name("-a"));
    EXPECT_FALSE(valid_node_name("a/b"));
    EXPECT_FALSE(valid_node_name(std::string(64, 'a')));
}

}  // namespace
}  // namespace deskbox::cluster
