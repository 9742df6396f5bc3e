// deskboxd's memory under churn: rounds of sandboxes made, used and killed at once must leave
// the server where it was. It once grew by hundreds of MB per burst and never gave them back
// (per-thread PNG workspaces pinned on handler threads, and big buffers carved from arenas
// that fragment): a server agents use all day was headed for the OOM killer.
#include <gtest/gtest.h>

#include <fstream>
#include <mutex>
#include <regex>
#include <thread>

#include "tests/server/deskboxd_fixture.hpp"

namespace deskbox {
namespace {

using namespace test;

// RssAnon of a process in MiB: what the heap holds (file mappings are the kernel's to drop).
long anon_rss_mb(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("RssAnon:", 0) == 0) return std::stol(line.substr(8)) / 1024;
    return -1;
}

long metric_mb(Server& s, const std::string& name) {
    std::smatch m;
    auto body = s.get("/metrics").body;
    if (!std::regex_search(body, m, std::regex("\n" + name + " ([0-9]+)"))) return -1;
    return std::stol(m[1]) >> 20;
}

TEST(Churn, RoundsOfConcurrentSandboxesLeaveTheServersMemoryWhereItWas) {
    REQUIRE_TEMPLATE();
    constexpr int kPerRound = 16, kRounds = 3;
    // Small disk caps: 16 of the default 8 GiB can pass --disk-overcommit on a fuller disk.
    Server s({"--max-sandboxes", std::to_string(kPerRound), "--default-disk-mb", "512"});
    std::vector<long> rss;
    for (int round = 0; round < kRounds; ++round) {
        std::mutex mutex;
        std::vector<std::string> ids;
        std::vector<std::thread> workers;
        for (int i = 0; i < kPerRound; ++i)
            workers.emplace_back([&] {
                auto a = s.post("/v1/sandboxes", {{"template", "minimal"}});
                EXPECT_EQ(a.status, 201u) << a.body;
                std::string id = a.js().value("id", "");
                if (id.empty()) return;
                EXPECT_EQ(s.get("/v1/sandboxes/" + id + "/screenshot").status, 200u);
                std::lock_guard lock(mutex);
                ids.push_back(id);
            });
        for (auto& w : workers) w.join();
        workers.clear();
        for (const auto& id : ids) workers.emplace_back([&s, id] { s.del("/v1/sandboxes/" + id); });
        for (auto& w : workers) w.join();
        ASSERT_EQ(s.get("/healthz").js().value("sandboxes", -1), 0);
        rss.push_back(anon_rss_mb(s.pid()));
    }
    // The first round warms up (threads, caches, the network core); after it, flat.
    EXPECT_LT(rss.back() - rss.front(), 16)
        << "RssAnon after each round (MiB): " << rss[0] << " " << rss[1] << " " << rss[2];
    // With nothing alive the heap holds about what an idle server does: no sandbox's frames or
    // encoders are left anywhere (the handler threads that ran them may still be alive).
    long in_use = metric_mb(s, "deskboxd_heap_in_use_bytes");
    EXPECT_GE(in_use, 0);
    EXPECT_LT(in_use, 64) << "heap in use with no sandbox (MiB)";
    EXPECT_LT(rss.back(), 128) << "RssAnon with no sandbox (MiB)";
}

}  // namespace
}  // namespace deskbox
