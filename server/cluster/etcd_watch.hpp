// A watch on a key prefix through etcd's JSON gateway: one long POST /v3/watch whose chunked
// answer carries a JSON message per change. Runs on a thread of its own and calls back for each
// batch of events, in revision order.
//
// It never gives up while it lives: when the member it streams from goes away it moves to the
// next endpoint and resumes just after the last revision it delivered, so no change is lost or
// repeated. If etcd compacted that history meanwhile (or the watch could not be resumed), it
// calls `on_resync` instead: the owner then reads the whole prefix again and says at which
// revision. A member that stops
// answering without closing the connection (SIGSTOP, a partition: its kernel still ACKs) cannot
// be told from a quiet prefix, so a connection that brought nothing for `max_idle` is replaced
// by a new one from the same revision (one cheap request; etcd's own progress notifications come
// only every ten minutes by default).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/cluster/etcd_client.hpp"

namespace deskbox::cluster {

struct WatchEvent {
    enum class Type { put, erase };
    Type type = Type::put;
    KeyValue kv;  // for erase: the key and mod_revision only
};

struct WatchOptions {
    std::string prefix;
    std::int64_t start_revision = 0;  // 0: from now on
    std::chrono::milliseconds connect_timeout{1000};
    std::chrono::milliseconds max_idle{30000};
    std::chrono::milliseconds retry_delay{200};  // after every member failed once
};

class EtcdWatch {
  public:
    using OnEvents = std::function<void(const std::vector<WatchEvent>&)>;
    // Reads the prefix again and returns the revision of that read: the watch goes on from the
    // next one, so nothing falls between the read and the watch (0: from now on).
    using OnResync = std::function<std::int64_t()>;

    // Starts watching at once. The callbacks run on the watch's thread, one at a time.
    EtcdWatch(std::vector<std::string> endpoints, WatchOptions options, OnEvents on_events,
              OnResync on_resync);
    ~EtcdWatch();  // stops and joins
    EtcdWatch(const EtcdWatch&) = delete;
    EtcdWatch& operator=(const EtcdWatch&) = delete;

    // The revision of the last event delivered (or the start revision).
    std::int64_t revision() const;
    // How many times it connected (1 while the first connection lasts).
    std::uint64_t connections() const;
    // Restart from the current revision on the next endpoint (tests; a caller that suspects
    // its member).
    void reconnect();

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace deskbox::cluster
