// The etcd client and watch against real etcd members (tests/support/etcd_cluster.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "server/client/api_client.hpp"
#include "server/cluster/etcd_client.hpp"
#include "server/cluster/etcd_watch.hpp"
#include "tests/support/etcd_cluster.hpp"

namespace deskbox::cluster {
namespace {

using namespace std::chrono_literals;

EtcdOptions options_for(const test::EtcdCluster& etcd) {
    EtcdOptions o;
    o.endpoints = etcd.endpoints();
    return o;
}

// Collects what a watch delivers, for waiting on it from the test's thread.
class Recorder {
  public:
    void add(const std::vector<WatchEvent>& events) {
        std::lock_guard lock(mutex_);
        for (const auto& e : events)
            seen_.push_back((e.type == WatchEvent::Type::put ? "put " : "erase ") + e.kv.key +
                            (e.type == WatchEvent::Type::put ? "=" + e.kv.value : ""));
        changed_.notify_all();
    }
    std::int64_t resync(std::int64_t read_at = 0) {
        std::lock_guard lock(mutex_);
        ++resyncs_;
        changed_.notify_all();
        return read_at;
    }
    // Waits until `count` events arrived; returns them all.
    std::vector<std::string> wait_for(std::size_t count, std::chrono::milliseconds timeout = 10s) {
        std::unique_lock lock(mutex_);
        changed_.wait_for(lock, timeout, [&] { return seen_.size() >= count; });
        return seen_;
    }
    int wait_for_resync(std::chrono::milliseconds timeout = 10s) {
        std::unique_lock lock(mutex_);
        changed_.wait_for(lock, timeout, [&] { return resyncs_ > 0; });
        return resyncs_;
    }

  private:
    std::mutex mutex_;
    std::condition_variable changed_;
    std::vector<std::string> seen_;
    int resyncs_ = 0;
};

TEST(EtcdClient, ReadsWritesAndErasesKeysAndPrefixes) {
    test::EtcdCluster etcd(1);
    EtcdClient client(options_for(etcd));
    EXPECT_FALSE(client.get("/t/a").has_value());
    const auto first = client.put("/t/a", "1");
    client.put("/t/b", std::string("bytes\0\xff", 7));
    client.put("/u/c", "other prefix");
    auto a = client.get("/t/a");
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->value, "1");
    EXPECT_EQ(a->mod_revision, first);
    EXPECT_EQ(a->version, 1);
    std::int64_t revision = 0;
    auto under = client.get_prefix("/t/", &revision);
    ASSERT_EQ(under.size(), 2u);
    EXPECT_EQ(under[0].key, "/t/a");
    EXPECT_EQ(under[1].value, std::string("bytes\0\xff", 7));  // binary-safe through base64
    EXPECT_GE(revision, first + 2);
    EXPECT_EQ(client.erase("/t/a"), 1);
    EXPECT_EQ(client.erase("/t/a"), 0);
    EXPECT_EQ(client.get_prefix("/t/").size(), 1u);
}

TEST(EtcdClient, TransactionsApplyOnlyWhenTheirConditionsHold) {
    test::EtcdCluster etcd(1);
    EtcdClient client(options_for(etcd));
    // Creating a key only if it is absent: the second attempt reads what the first wrote.
    auto made = client.txn({Compare::absent("/k")}, {Operation::put("/k", "first")},
                           {Operation::range("/k")});
    EXPECT_TRUE(made.succeeded);
    auto again = client.txn({Compare::absent("/k")}, {Operation::put("/k", "second")},
                            {Operation::range("/k")});
    EXPECT_FALSE(again.succeeded);
    ASSERT_EQ(again.ranges.size(), 1u);
    ASSERT_EQ(again.ranges[0].size(), 1u);
    EXPECT_EQ(again.ranges[0][0].value, "first");
    // Optimistic concurrency: a write based on a stale read is refused.
    const auto seen = again.ranges[0][0].mod_revision;
    EXPECT_TRUE(
        client.txn({Compare::unchanged_since("/k", seen)}, {Operation::put("/k", "2")}).succeeded);
    EXPECT_FALSE(
        client.txn({Compare::unchanged_since("/k", seen)}, {Operation::put("/k", "3")}).succeeded);
    EXPECT_EQ(client.get("/k")->value, "2");
    EXPECT_TRUE(
        client.txn({Compare::value_is("/k", "2")}, {Operation::erase_prefix("/k")}).succeeded);
    EXPECT_FALSE(client.get("/k").has_value());
}

TEST(EtcdClient, ALeaseKeepsItsKeysUntilItEndsOrIsRevoked) {
    test::EtcdCluster etcd(1);
    EtcdClient client(options_for(etcd));
    const auto lease = client.grant_lease(2s);
    client.put("/lease/kept", "x", lease);
    // Kept alive past its TTL.
    for (int i = 0; i < 6; ++i) {
        std::this_thread::sleep_for(500ms);
        ASSERT_TRUE(client.keep_alive(lease));
    }
    EXPECT_TRUE(client.get("/lease/kept").has_value());
    EXPECT_EQ(client.get("/lease/kept")->lease, lease);
    client.revoke_lease(lease);
    EXPECT_FALSE(client.get("/lease/kept").has_value());
    EXPECT_FALSE(client.keep_alive(lease));
    client.revoke_lease(lease);  // gone already: fine

    const auto expiring = client.grant_lease(1s);
    client.put("/lease/expiring", "y", expiring);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (client.get("/lease/expiring") && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(100ms);
    EXPECT_FALSE(client.get("/lease/expiring").has_value()) << "the lease never expired";
    EXPECT_FALSE(client.keep_alive(expiring));
}

TEST(EtcdClient, LosingOneMemberOfThreeChangesNothingForCallers) {
    test::EtcdCluster etcd(3);
    EtcdClient client(options_for(etcd));
    client.put("/ha/before", "1");
    const std::string used = client.current_endpoint();
    int member = 0;
    while (etcd.endpoint(member) != used) ++member;
    etcd.kill(member);
    // The next requests go to the others; elections settle within a second or so.
    for (int i = 0; i < 20; ++i) client.put("/ha/after/" + std::to_string(i), "x");
    EXPECT_NE(client.current_endpoint(), used);
    EXPECT_EQ(client.get("/ha/before")->value, "1");
    EXPECT_EQ(client.get_prefix("/ha/after/").size(), 20u);
}

TEST(EtcdClient, NoMemberReachableIsAnErrorThatSaysSo) {
    EtcdOptions o;
    o.endpoints = {"http://127.0.0.1:1", "http://127.0.0.1:2"};  // nothing listens there
    EtcdClient client(o);
    try {
        client.get("/x");
        FAIL() << "a read with no member succeeded";
    } catch (const EtcdError& e) {
        EXPECT_TRUE(e.unreachable());
        EXPECT_NE(std::string(e.what()).find("127.0.0.1:2"), std::string::npos) << e.what();
    }
    EXPECT_THROW(parse_endpoints("http://a:1,ftp://b"), std::invalid_argument);
    EXPECT_THROW(parse_endpoints(""), std::invalid_argument);
    EXPECT_EQ(parse_endpoints("http://a:1,,http://b:2").size(), 2u);
    EXPECT_EQ(prefix_end("/a/"), "/a0");
    EXPECT_EQ(prefix_end(std::string("a\xff")), "b");
}

TEST(EtcdWatch, DeliversEveryChangeUnderItsPrefixInOrder) {
    test::EtcdCluster etcd(1);
    EtcdClient client(options_for(etcd));
    client.put("/w/old", "before the watch");
    Recorder recorder;
    WatchOptions o;
    o.prefix = "/w/";
    EtcdWatch watch(
        etcd.endpoints(), o, [&](const auto& events) { recorder.add(events); },
        [&] { return recorder.resync(); });
    // The watch starts "now": wait until it is connected before writing.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (watch.connections() == 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(10ms);
    ASSERT_EQ(watch.connections(), 1u);
    client.put("/w/a", "1");
    client.put("/other", "not watched");
    client.put("/w/a", "2");
    client.erase("/w/old");
    auto seen = recorder.wait_for(3);
    EXPECT_EQ(seen, (std::vector<std::string>{"put /w/a=1", "put /w/a=2", "erase /w/old"}));
}

TEST(EtcdWatch, ResumesOnAnotherMemberWithoutLosingOrRepeatingChanges) {
    test::EtcdCluster etcd(3);
    EtcdClient client(options_for(etcd));
    const auto start = client.put("/r/0", "0");
    Recorder recorder;
    WatchOptions o;
    o.prefix = "/r/";
    o.start_revision = start;  // from the first key on, whatever connects when
    EtcdWatch watch(
        etcd.endpoints(), o, [&](const auto& events) { recorder.add(events); },
        [&] { return recorder.resync(); });
    ASSERT_EQ(recorder.wait_for(1).size(), 1u);
    // The watch streams from member 0 (the first endpoint): kill it mid-stream, write more.
    etcd.kill(0);
    for (int i = 1; i <= 10; ++i) client.put("/r/" + std::to_string(i), std::to_string(i));
    auto seen = recorder.wait_for(11);
    ASSERT_EQ(seen.size(), 11u) << "changes lost while the watch moved";
    for (int i = 0; i <= 10; ++i)
        EXPECT_EQ(seen[i], "put /r/" + std::to_string(i) + "=" + std::to_string(i));
    EXPECT_GE(watch.connections(), 2u);
    // Asked to move again (as a caller that suspects its member would): still nothing repeats.
    watch.reconnect();
    client.put("/r/11", "11");
    seen = recorder.wait_for(12);
    std::this_thread::sleep_for(300ms);
    seen = recorder.wait_for(12, 0ms);
    EXPECT_EQ(seen.size(), 12u);
    EXPECT_EQ(seen.back(), "put /r/11=11");
    EXPECT_EQ(recorder.wait_for_resync(0ms), 0);
}

TEST(EtcdWatch, AHistoryCompactedAwayAsksTheOwnerToReadEverythingAgain) {
    test::EtcdCluster etcd(1);
    EtcdClient client(options_for(etcd));
    const auto old = client.put("/c/a", "1");
    for (int i = 0; i < 5; ++i) client.put("/c/a", std::to_string(i));
    const auto now = client.put("/c/a", "last");
    // Compaction through the gateway, as an operator's auto-compaction would do.
    client::ClientOptions co;
    co.server = etcd.endpoint(0);
    client::ApiClient raw(co);
    auto compacted = raw.send(client::Method::post, "/v3/kv/compaction",
                              "{\"revision\":\"" + std::to_string(now) + "\"}", "application/json");
    ASSERT_EQ(compacted.status, 200u) << compacted.body;
    Recorder recorder;
    WatchOptions o;
    o.prefix = "/c/";
    o.start_revision = old;  // before the compaction
    std::int64_t read_at = 0;
    EtcdWatch watch(
        etcd.endpoints(), o, [&](const auto& events) { recorder.add(events); },
        [&] {
            // As an owner does: read everything, and say when. A change made right after the
            // read (before the watch reconnects) must still arrive.
            client.get_prefix("/c/", &read_at);
            client.put("/c/b", "after");
            return recorder.resync(read_at);
        });
    EXPECT_EQ(recorder.wait_for_resync(), 1);
    auto seen = recorder.wait_for(1);
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.back(), "put /c/b=after");
}

}  // namespace
}  // namespace deskbox::cluster
