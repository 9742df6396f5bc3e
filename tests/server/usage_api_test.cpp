// Usage and metrics through deskboxd with real containers: a CPU burner and a memory hog show
// up in the samples, and the totals agree with the cgroup's own counters; the ledger survives a
// SIGKILL of deskboxd without counting anything twice; usage grouped by a metadata key sums
// each customer's sandboxes; bad parameters are 400 naming them.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "tests/server/deskboxd_fixture.hpp"

namespace deskbox {
namespace {

using namespace test;

const std::vector<std::string> kFastSampling = {"--usage-sample-s", "1"};

std::string create(Server& s, json body) {
    body["network"] = false;
    auto created = s.post("/v1/sandboxes", body);
    EXPECT_EQ(created.status, 201u) << created.body << s.log();
    return created.js().value("id", "");
}

long long now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// The sandbox's cgroup directory of a v1 controller (deskboxd names it after the sandbox).
std::filesystem::path cgroup_of(const std::string& controller, const std::string& id) {
    const std::filesystem::path root = "/sys/fs/cgroup/" + controller;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        if (it.depth() > 3) it.disable_recursion_pending();
        if (it->path().filename() == id) return it->path();
    }
    return {};
}

double cgroup_cpu_seconds(const std::string& id) {
    std::ifstream in(cgroup_of("cpuacct", id) / "cpuacct.usage");
    unsigned long long ns = 0;
    in >> ns;
    return ns / 1e9;
}

// The cgroup's usage without its inactive page cache, as the runtime reads it.
double cgroup_resident_bytes(const std::string& id) {
    const auto dir = cgroup_of("memory", id);
    std::ifstream usage(dir / "memory.usage_in_bytes");
    double used = 0;
    usage >> used;
    std::ifstream stat(dir / "memory.stat");
    std::string key;
    double value = 0;
    while (stat >> key >> value)
        if (key == "total_inactive_file") return used - value;
    return used;
}

// The sandbox's samples; none (no error) before its first one, which the sampler takes within
// an interval of the create.
json samples(Server& s, const std::string& id, const std::string& query = "") {
    auto a = s.get("/v1/sandboxes/" + id + "/metrics" + query);
    if (a.status == 404) return json::array();
    EXPECT_EQ(a.status, 200u) << a.body;
    const json j = a.js();
    return j.value("samples", json::array());
}

// Waits for a sample taken after `after_ms` and answers it.
json sample_after(Server& s, const std::string& id, long long after_ms) {
    json found;
    EXPECT_TRUE(eventually(
        [&] {
            const json all = samples(s, id);
            if (all.empty() || all.back().value("at_ms", 0LL) <= after_ms) return false;
            found = all.back();
            return true;
        },
        10s, 100ms))
        << "no sample after " << after_ms;
    return found;
}

// The ledger's CPU seconds at a sample taken between two reads of the cgroup's counter lie
// between them, within 5 %.
void expect_cpu_matches_cgroup(Server& s, const std::string& id) {
    const double before = cgroup_cpu_seconds(id);
    const long long asked = now_ms();
    const json sample = sample_after(s, id, asked);
    const double after = cgroup_cpu_seconds(id);
    const double ledger = sample["totals"].value("cpu_seconds", -1.0);
    EXPECT_GT(before, 0.0);
    EXPECT_GE(ledger, before * 0.95) << "cgroup " << before << ".." << after;
    EXPECT_LE(ledger, after * 1.05) << "cgroup " << before << ".." << after;
}

TEST(Usage, CpuBurnerAndMemoryHogShowUpInSamplesAndMatchTheCgroup) {
    REQUIRE_TEMPLATE();
    Server s(kFastSampling);
    const std::string id = create(s, {});
    ASSERT_FALSE(id.empty());
    const long long burn_start = now_ms();
    start(s, id, "timeout 6 sh -c 'while :; do :; done'");
    // Within 10 s a sample shows the burner (a tenth of a CPU or more: the machine may be busy; an
    // idle desktop uses about 1 %).
    EXPECT_TRUE(eventually(
        [&] {
            const json all = samples(s, id);
            for (const auto& sample : all)
                if (sample.value("at_ms", 0LL) > burn_start &&
                    sample.value("cpu_percent", 0.0) > 10)
                    return true;
            return false;
        },
        10s, 200ms))
        << samples(s, id).dump();

    // 160 MiB in a tmpfs file: resident (shared memory), not page cache it could drop.
    run(s, id, "head -c 160M /dev/zero > /dev/shm/hog && echo ok");
    const long long hogged = now_ms();
    EXPECT_TRUE(eventually(
        [&] {
            const json all = samples(s, id);
            return !all.empty() && all.back().value("at_ms", 0LL) > hogged &&
                   all.back().value("memory_resident_bytes", 0.0) > 160.0 * (1 << 20);
        },
        10s, 200ms))
        << samples(s, id).back().dump();
    const json sample = sample_after(s, id, now_ms());
    const double cgroup = cgroup_resident_bytes(id);
    EXPECT_NEAR(sample.value("memory_resident_bytes", 0.0), cgroup, cgroup * 0.05);
    EXPECT_GT(sample.value("memory_reserved_bytes", 0.0),
              sample.value("memory_resident_bytes", 0.0));

    // Once the burner is done (6 s), the totals are the cgroup's.
    EXPECT_TRUE(eventually([&] { return now_ms() > burn_start + 6500; }, 15s, 100ms));
    expect_cpu_matches_cgroup(s, id);

    // Inspect shows the running totals.
    const json inspected = s.get("/v1/sandboxes/" + id).js();
    EXPECT_GT(inspected["usage"].value("cpu_seconds", 0.0), 1.0) << inspected.dump();
    EXPECT_GT(inspected["usage"].value("memory_gib_seconds", 0.0), 0.0);
    EXPECT_GT(inspected["usage"].value("lifetime_seconds", 0.0), 1.0);

    // A step gives one sample per step, its CPU % over the whole step.
    const json stepped = samples(s, id, "?step=3");
    const json every = samples(s, id);
    EXPECT_LT(stepped.size(), every.size());
    EXPECT_GE(stepped.size(), every.size() / 4);
}

// A sandbox killed before any round sampled it is counted up to its kill: one sample is taken
// while its cgroup can still be read.
TEST(Usage, ASandboxKilledBetweenRoundsIsCountedToItsEnd) {
    REQUIRE_TEMPLATE();
    Server s({"--usage-sample-s", "3600"});  // the first round would come in an hour
    const std::string id = create(s, {{"metadata", {{"customer", "brief"}}}});
    ASSERT_FALSE(id.empty());
    run(s, id, "timeout 1 sh -c 'while :; do :; done'; echo ok");
    const long long killed_at = now_ms();
    ASSERT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
    const json report = s.get("/v1/usage?group_by=metadata.customer").js();
    ASSERT_EQ(report["groups"].size(), 1u) << report.dump();
    const json& brief = report["groups"][0];
    EXPECT_EQ(brief["key"], "brief");
    EXPECT_EQ(brief["sandboxes"], 1);
    EXPECT_GT(brief.value("cpu_seconds", 0.0), 0.3) << brief.dump();
    EXPECT_GT(brief.value("lifetime_seconds", 0.0), 1.0) << brief.dump();
    EXPECT_GT(brief.value("vcpu_seconds", 0.0), 0.0) << brief.dump();
    const json metrics = s.get("/v1/sandboxes/" + id + "/metrics").js();
    ASSERT_FALSE(metrics["samples"].empty()) << metrics.dump();
    EXPECT_GE(metrics["samples"].back().value("at_ms", 0LL), killed_at - 50) << metrics.dump();
}

TEST(Usage, SurvivesASigkillRestartWithoutCountingTwice) {
    REQUIRE_TEMPLATE();
    TempDir state("deskboxd-usage");
    std::string id;
    double cpu_before = 0;
    long long created = 0;
    {
        Server s(kFastSampling, state.path());
        created = now_ms();
        id = create(s, {{"metadata", {{"customer", "acme"}}}});
        ASSERT_FALSE(id.empty());
        run(s, id, "timeout 2 sh -c 'while :; do :; done'; echo done");
        cpu_before = sample_after(s, id, now_ms())["totals"].value("cpu_seconds", 0.0);
        EXPECT_GT(cpu_before, 0.5);
        s.kill_hard();
    }
    Server restarted(kFastSampling, state.path());
    ASSERT_EQ(restarted.get("/v1/sandboxes/" + id).status, 200u) << restarted.log();
    run(restarted, id, "timeout 1 sh -c 'while :; do :; done'; echo done");
    // The adopted sandbox continues from its last line: the ledger still agrees with the
    // cgroup (counting the first server's seconds twice would be about twice as much).
    expect_cpu_matches_cgroup(restarted, id);
    const json last = sample_after(restarted, id, now_ms());
    EXPECT_GT(last["totals"].value("cpu_seconds", 0.0), cpu_before);
    // Its lifetime is the wall time since its creation, not more.
    const double lifetime = last["totals"].value("lifetime_seconds", 0.0);
    EXPECT_LE(lifetime, (now_ms() - created) / 1000.0 + 2) << last.dump();
    EXPECT_GE(lifetime, (now_ms() - created) / 1000.0 * 0.5) << last.dump();

    // /v1/usage sums the one sandbox once.
    const json usage = restarted.get("/v1/usage?group_by=metadata.customer").js();
    ASSERT_EQ(usage["groups"].size(), 1u) << usage.dump();
    EXPECT_EQ(usage["groups"][0]["key"], "acme");
    EXPECT_EQ(usage["groups"][0]["sandboxes"], 1);
    EXPECT_NEAR(usage["groups"][0].value("cpu_seconds", 0.0),
                last["totals"].value("cpu_seconds", 0.0),
                0.05 * last["totals"].value("cpu_seconds", 0.0) + 0.5);
    EXPECT_EQ(restarted.del("/v1/sandboxes/" + id).status, 200u);
}

TEST(Usage, GroupByMetadataSumsEachCustomersSandboxes) {
    REQUIRE_TEMPLATE();
    Server s(
        {"--usage-sample-s", "1", "--price-vcpu-second", "0.001", "--price-gib-second", "0.0005"});
    const std::vector<std::pair<std::string, json>> wanted = {
        {"a", {{"metadata", {{"customer", "a"}}}}},
        {"a", {{"metadata", {{"customer", "a"}}}, {"limits", {{"cpus", 1}}}}},
        {"b", {{"metadata", {{"customer", "b"}}}}},
    };
    std::vector<std::pair<std::string, std::string>> made;  // customer, id
    for (const auto& [customer, body] : wanted) made.emplace_back(customer, create(s, body));
    run(s, made[0].second, "timeout 1 sh -c 'while :; do :; done'; echo done");
    for (const auto& [customer, id] : made) sample_after(s, id, now_ms());
    // Product metrics: sandboxes per template, failed commands and creates by cause.
    EXPECT_EQ(run(s, made[2].second, "echo x; exit 3"), "x\n");
    EXPECT_EQ(s.post("/v1/sandboxes", {{"template", "no-such-template"}}).status, 400u);
    const std::string page = s.get("/metrics").body;
    for (const char* line :
         {"deskbox_template_sandboxes{template=\"minimal\",state=\"running\"} 3\n",
          "deskbox_operation_errors_total{operation=\"command\",cause=\"exit_nonzero\"} 1\n",
          "deskbox_operation_errors_total{operation=\"create\",cause=\"bad_request\"} 1\n",
          "deskbox_sandbox_lifetime_seconds_count 0\n"})
        EXPECT_NE(page.find(line), std::string::npos) << line << page;
    for (const auto& [customer, id] : made) EXPECT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
    // Ended: each one's totals are final, and its samples stay readable.
    std::map<std::string, std::map<std::string, double>> expected;
    std::map<std::string, int> counts;
    EXPECT_TRUE(eventually(
        [&] {
            const json j = s.get("/v1/sandboxes/" + made[2].second + "/metrics").js();
            return j.value("state", "") == "ended";
        },
        10s, 100ms));
    for (const auto& [customer, id] : made) {
        const json j = s.get("/v1/sandboxes/" + id + "/metrics").js();
        ASSERT_EQ(j.value("state", ""), "ended") << j.dump();
        const json totals = j["samples"].back()["totals"];
        for (const auto& name : {"cpu_seconds", "vcpu_seconds", "memory_gib_seconds",
                                 "memory_reserved_gib_seconds", "lifetime_seconds"})
            expected[customer][name] += totals.value(name, 0.0);
        counts[customer] += 1;
    }
    EXPECT_GT(expected["a"]["cpu_seconds"], expected["b"]["cpu_seconds"]);
    EXPECT_NE(s.get("/metrics").body.find("deskbox_sandbox_lifetime_seconds_count 3\n"),
              std::string::npos);

    const json usage = s.get("/v1/usage?group_by=metadata.customer").js();
    ASSERT_EQ(usage["groups"].size(), 2u) << usage.dump();
    for (const auto& group : usage["groups"]) {
        const std::string customer = group.value("key", "");
        EXPECT_EQ(group.value("sandboxes", 0), counts[customer]) << customer;
        for (const auto& [name, value] : expected[customer])
            EXPECT_NEAR(group.value(name, -1.0), value, 1e-6 + value * 1e-9) << customer << name;
        EXPECT_NEAR(group.value("cost", -1.0),
                    expected[customer]["vcpu_seconds"] * 0.001 +
                        expected[customer]["memory_reserved_gib_seconds"] * 0.0005,
                    1e-9);
    }
    // Two vCPUs reserved against one: customer a's second sandbox reserved half.
    const json by_template = s.get("/v1/usage?group_by=template").js();
    ASSERT_EQ(by_template["groups"].size(), 1u);
    EXPECT_EQ(by_template["groups"][0]["key"], "minimal");
    EXPECT_EQ(by_template["groups"][0]["sandboxes"], 3);

    const Answer csv = s.get("/v1/usage?group_by=metadata.customer&format=csv");
    EXPECT_EQ(csv.status, 200u);
    EXPECT_EQ(csv.headers.at("Content-Type"), "text/csv; charset=utf-8");
    EXPECT_EQ(csv.body.rfind("key,sandboxes,cpu_seconds,", 0), 0u) << csv.body;
    EXPECT_NE(csv.body.find("\n\"a\",2,"), std::string::npos) << csv.body;
    EXPECT_NE(csv.body.find("\n\"b\",1,"), std::string::npos) << csv.body;

    // A period before any of them ran sums nothing.
    const json before = s.get("/v1/usage?to=2020-01-01T00:00:00Z").js();
    EXPECT_EQ(before["groups"].size(), 0u) << before.dump();
    const json by_day = s.get("/v1/usage?group_by=day").js();
    ASSERT_GE(by_day["groups"].size(), 1u);
    EXPECT_EQ(by_day["total"].value("sandboxes", 0), 3) << by_day.dump();
}

TEST(Usage, BadParametersAre400NamingThem) {
    Server s(kFastSampling);
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"/v1/usage?from=yesterday", "from"},
        {"/v1/usage?from=2026-13-01T00:00:00Z", "from"},
        {"/v1/usage?to=2026-02-30T00:00:00Z", "to"},
        {"/v1/usage?from=2026-12-02T00:00:00Z&to=2026-12-01T00:00:00Z", "to"},
        {"/v1/usage?group_by=customer", "group_by"},
        {"/v1/usage?group_by=metadata.", "group_by"},
        {"/v1/usage?format=xml", "format"},
        {"/v1/usage?frm=1", "frm"},
    };
    for (const auto& [target, field] : bad) {
        const Answer a = s.get(target);
        EXPECT_EQ(a.status, 400u) << target << " " << a.body;
        EXPECT_EQ(a.js()["error"].value("field", ""), field) << target << " " << a.body;
    }
    EXPECT_EQ(s.get("/v1/usage?from=1796000000&to=2026-12-07T02:00:00.5%2B01:00").status, 200u);
    const Answer unknown = s.get("/v1/sandboxes/sb-000000000000/metrics");
    EXPECT_EQ(unknown.status, 404u) << unknown.body;
    const json empty = s.get("/v1/usage").js();
    EXPECT_EQ(empty["groups"].size(), 0u);
    EXPECT_EQ(empty["total"].value("sandboxes", -1), 0);
}

TEST(Usage, BadMetricsParametersAre400NamingThem) {
    REQUIRE_TEMPLATE();
    Server s(kFastSampling);
    const std::string id = create(s, {});
    sample_after(s, id, 0);
    for (const auto& [query, field] : std::vector<std::pair<std::string, std::string>>{
             {"?step=0", "step"}, {"?step=1.5", "step"}, {"?from=x", "from"}, {"?to=-1", "to"}}) {
        const Answer a = s.get("/v1/sandboxes/" + id + "/metrics" + query);
        EXPECT_EQ(a.status, 400u) << query << " " << a.body;
        EXPECT_EQ(a.js()["error"].value("field", ""), field) << query << " " << a.body;
    }
}

}  // namespace
}  // namespace deskbox
