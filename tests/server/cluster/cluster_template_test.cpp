// A template users built on one node of a cluster starts sandboxes on every node (issue 27):
// two real deskboxd nodes on one etcd member, a Dockerfile built through node A's API with
// buildah, then creates placed on node B, which pulls the image from A (by its image id, the
// stream checked by SHA-256) and starts real container sandboxes from it. A pull that fails
// answers 502 template_pull_failed naming the node, and leaves nothing on B.
#include <gtest/gtest.h>
#include <unistd.h>

#include <regex>
#include <thread>

#include "tests/server/deskboxd_fixture.hpp"
#include "tests/support/etcd_cluster.hpp"

namespace deskbox {
namespace {

using namespace test;

constexpr int kLeaseSeconds = 10;  // a killed node stays a member this long
const std::string kSecret = "cluster-template-secret-0123456789";
const std::string kTemplate = "greet:v1";
const std::string kDockerfile =
    "FROM deskbox/minimal\n"
    "ENV GREETING=built-on-node-a\n"
    "RUN echo 'made by node a' > /etc/greeting\n";

std::string node_name(int i) {
    return "node-" + std::string(1, char('a' + i));
}

std::vector<std::string> node_flags(const EtcdCluster& etcd, int i) {
    const std::uint64_t first = 3'400'000'000ull + std::uint64_t(i) * 8 * 65536;
    return {"--cluster",         "etcd=" + etcd.endpoint_list(),
            "--node-name",       node_name(i),
            "--cluster-secret",  kSecret,
            "--cluster-lease-s", std::to_string(kLeaseSeconds),
            "--max-sandboxes",   "3",
            "--userns-range",    std::to_string(first) + ":8",
            "--default-network", "false"};
}

// A figure of a node's /metrics ("name{labels}" as written there), or -1.
double metric(Server& node, const std::string& series) {
    const std::string page = node.get("/metrics").body;
    const auto at = page.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(page.substr(at + series.size() + 2));
}

// What a node's record says of a template on node `holder`, as `asked` sees it ({}: nothing).
json offer_seen(Server& asked, const std::string& holder, const std::string& name) {
    for (const auto& n : asked.get("/v1/nodes").js().value("nodes", json::array()))
        if (n.value("name", "") == holder)
            return n.value("templates", json::object()).value(name, json::object());
    return json::object();
}

class ClusterTemplates : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (::geteuid() != 0 || run_process({"buildah", "--version"}).status.exit_code != 0 ||
            !template_built())
            return;
        etcd_ = std::make_unique<EtcdCluster>(1);
        for (int i = 0; i < 2; ++i)
            nodes_.push_back(std::make_unique<Server>(node_flags(*etcd_, i)));
        // Built through node A's API, as a user would.
        auto started = a().post("/v1/templates/builds",
                                {{"name", "greet"}, {"tag", "v1"}, {"dockerfile", kDockerfile}});
        if (started.status != 202u) {
            build_problem_ = started.body;
            return;
        }
        const std::string build = started.js()["build_id"];
        json info;
        eventually(
            [&] {
                info = a().get("/v1/templates/builds/" + build).js();
                return info.value("status", "") != "queued" &&
                       info.value("status", "") != "running";
            },
            600s);
        if (info.value("status", "") != "succeeded") build_problem_ = info.dump();
        image_id_ = a().get("/v1/templates/" + kTemplate).js().value("image_id", "");
    }
    static void TearDownTestSuite() {
        nodes_.clear();
        retired_.clear();  // their temp dirs held the state the restarted nodes used
        etcd_.reset();
    }
    void SetUp() override {
        if (!etcd_) GTEST_SKIP() << "needs root, buildah and the minimal template built";
        ASSERT_TRUE(build_problem_.empty()) << build_problem_ << a().log();
        ASSERT_FALSE(image_id_.empty());
    }
    static Server& a() { return *nodes_.at(0); }
    static Server& b() { return *nodes_.at(1); }

    // Waits until node B's view has A's record offering the template, then drains A: every
    // create must then be made on B, which lacks the template.
    void only_b_takes_creates() {
        ASSERT_TRUE(eventually(
            [&] {
                return offer_seen(b(), node_name(0), kTemplate).value("image_id", "") == image_id_;
            },
            30s))
            << b().get("/v1/nodes").body;
        EXPECT_TRUE(offer_seen(b(), node_name(1), kTemplate).empty()) << "B does not hold it";
        auto drained = b().post("/v1/nodes/" + node_name(0) + "/drain", json::object());
        ASSERT_EQ(drained.status, 200u) << drained.body;
    }

    static std::unique_ptr<EtcdCluster> etcd_;
    static std::vector<std::unique_ptr<Server>> nodes_, retired_;
    static std::string build_problem_, image_id_;
};
std::unique_ptr<EtcdCluster> ClusterTemplates::etcd_;
std::vector<std::unique_ptr<Server>> ClusterTemplates::nodes_, ClusterTemplates::retired_;
std::string ClusterTemplates::build_problem_, ClusterTemplates::image_id_;

TEST_F(ClusterTemplates, BuiltOnOneNodeRunsOnAnotherAfterOnePull) {
    only_b_takes_creates();
    // The node-to-node route opens with the cluster secret only: no API key, no secret, no pull.
    EXPECT_EQ(b().get("/v1/cluster/templates/" + image_id_ + "?ref=" + kTemplate).status, 401u);

    // Two creates at once through A: both placed on B, which pulls the image once.
    std::vector<Answer> made(2);
    {
        std::vector<std::thread> clients;
        for (auto& answer : made)
            clients.emplace_back([&answer] {
                answer = a().post("/v1/sandboxes", {{"template", kTemplate}});
            });
        for (auto& t : clients) t.join();
    }
    for (const auto& answer : made) {
        ASSERT_EQ(answer.status, 201u) << answer.body << b().log();
        EXPECT_EQ(answer.js()["node"], node_name(1));
        const std::string id = answer.js()["id"];
        // The Dockerfile's file and ENV are there, through either node.
        EXPECT_EQ(run(a(), id, "cat /etc/greeting"), "made by node a\n");
        EXPECT_EQ(run(b(), id, "echo $GREETING"), "built-on-node-a\n");
    }
    EXPECT_EQ(metric(b(), "deskbox_cluster_template_pulls_total{outcome=\"installed\"}"), 1)
        << "concurrent creates share one pull";
    const double bytes = metric(b(), "deskbox_cluster_template_pull_last_bytes");
    const double seconds = metric(b(), "deskbox_cluster_template_pull_last_seconds");
    EXPECT_GT(bytes, 100e6) << "a whole rootfs came";
    std::printf("pulled %.0f MB in %.2f s (%.0f MB/s)\n", bytes / 1e6, seconds,
                bytes / 1e6 / seconds);
    RecordProperty("pull_bytes", std::to_string(bytes));
    RecordProperty("pull_seconds", std::to_string(seconds));

    // B holds it now, under the same image id, and says so to the cluster.
    EXPECT_EQ(b().get("/v1/templates/" + kTemplate).js().value("image_id", ""), image_id_);
    EXPECT_TRUE(eventually(
        [&] { return offer_seen(a(), node_name(1), kTemplate).value("image_id", "") == image_id_; },
        30s));
    // A third create on B finds it there: no second pull.
    auto third = b().post("/v1/sandboxes", {{"template", kTemplate}});
    ASSERT_EQ(third.status, 201u) << third.body;
    EXPECT_EQ(metric(b(), "deskbox_cluster_template_pulls_total{outcome=\"installed\"}"), 1);

    // Templates live per node: deleting A's copy leaves B's and its sandboxes alone; B refuses
    // to delete its own while its sandboxes run.
    EXPECT_EQ(a().del("/v1/templates/" + kTemplate).status, 200u);
    EXPECT_EQ(run(b(), third.js()["id"], "cat /etc/greeting"), "made by node a\n");
    EXPECT_EQ(b().del("/v1/templates/" + kTemplate).status, 409u);
    for (const auto& answer : made)
        EXPECT_EQ(b().del("/v1/sandboxes/" + answer.js()["id"].get<std::string>()).status, 200u);
    EXPECT_EQ(b().del("/v1/sandboxes/" + third.js()["id"].get<std::string>()).status, 200u);
    EXPECT_EQ(b().del("/v1/templates/" + kTemplate).status, 200u);
}

TEST_F(ClusterTemplates, AFailedPullIs502NamingTheNodeAndLeavesNothing) {
    // A holds the template again (the first test deleted every copy); B lacks it.
    if (a().get("/v1/templates/" + kTemplate).status != 200u) {
        auto again = a().post("/v1/templates/builds",
                              {{"name", "greet"}, {"tag", "v1"}, {"dockerfile", kDockerfile}});
        ASSERT_EQ(again.status, 202u) << again.body;
        ASSERT_TRUE(
            eventually([&] { return a().get("/v1/templates/" + kTemplate).status == 200u; }, 300s))
            << a().get("/v1/templates/builds").body;
        image_id_ = a().get("/v1/templates/" + kTemplate).js().value("image_id", "");
    }
    only_b_takes_creates();
    const auto images = b().state() / "templates" / "images";
    auto expect_nothing_on_b = [&](const Answer& answer, const std::string& reason) {
        EXPECT_EQ(answer.status, 502u) << answer.body;
        const json error = answer.js()["error"];
        EXPECT_EQ(error["code"], "template_pull_failed") << answer.body;
        EXPECT_EQ(error["node"], node_name(0)) << answer.body;
        EXPECT_NE(error.value("message", "").find(reason), std::string::npos) << answer.body;
        EXPECT_EQ(b().get("/v1/templates/" + kTemplate).status, 404u);
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(images, ec))
            ADD_FAILURE() << "left on B: " << e.path();
        EXPECT_EQ(b().get("/v1/sandboxes").js()["sandboxes"].size(), 0u);
    };

    // A's image folder is gone (a disk lost, an operator's rm) while its record still offers
    // it: A refuses the pull, B answers 502 naming A and why.
    const auto a_image = a().state() / "templates" / "images" / image_id_;
    const auto moved = a().state() / "templates" / "images" / ".tmp-test-away";
    std::filesystem::rename(a_image, moved);
    expect_nothing_on_b(b().post("/v1/sandboxes", {{"template", kTemplate}}), "answered 404");
    std::filesystem::rename(moved, a_image);

    // A dies: until its lease lapses the cluster still lists it as the holder; the pull cannot
    // connect, and through A's peer B the answer says so.
    a().kill_hard();
    expect_nothing_on_b(b().post("/v1/sandboxes", {{"template", kTemplate}}), "refused");
    EXPECT_GE(metric(b(), "deskbox_cluster_template_pulls_total{outcome=\"failed\"}"), 2);

    // A comes back on its state once its lease lapsed (and cleans what its kill left).
    ASSERT_TRUE(eventually(
        [&] {
            for (const auto& n : b().get("/v1/nodes").js().value("nodes", json::array()))
                if (n.value("name", "") == node_name(0)) return n.value("state", "") == "lost";
            return true;
        },
        30s));
    const auto state = a().state();
    retired_.push_back(std::move(nodes_[0]));
    nodes_[0] = std::make_unique<Server>(node_flags(*etcd_, 0), state);
    ASSERT_GT(a().port(), 0) << a().log();
}

}  // namespace
}  // namespace deskbox
