// A client of etcd's v3 API through its JSON gateway (HTTP/1.1 + JSON, base64 keys and values),
// which every etcd 3.4+ member serves on its client URL: no gRPC stack needed. Key-value reads and
// writes, transactions (the only way deskbox changes shared state that others may change at the
// same time), leases and their keep-alive, and watches (etcd_watch.hpp).
//
// Endpoints are tried in turn: a member that does not answer (refused, reset, timed out) is
// skipped and the next one asked, so losing one member of three changes nothing for callers. A
// request that reached a member but failed there (etcd's own error answer) is not retried: it
// is an EtcdError with etcd's message. Thread-safe: each request takes a connection of its own
// from a small pool.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace deskbox::cluster {

// etcd answered with an error, or no member could be reached (unreachable() then).
class EtcdError : public std::runtime_error {
  public:
    EtcdError(const std::string& message, bool unreachable)
        : std::runtime_error(message), unreachable_(unreachable) {}
    bool unreachable() const { return unreachable_; }

  private:
    bool unreachable_;
};

struct KeyValue {
    std::string key, value;
    std::int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
};

// One condition of a transaction (etcd's Compare).
struct Compare {
    enum class Target { version, create_revision, mod_revision, value };
    enum class Result { equal, not_equal, greater, less };
    std::string key;
    Target target = Target::mod_revision;
    Result result = Result::equal;
    std::int64_t number = 0;  // version / revisions
    std::string value;        // Target::value

    // The key does not exist (version 0).
    static Compare absent(std::string key);
    // The key's last change was at `revision` (0: it does not exist).
    static Compare unchanged_since(std::string key, std::int64_t revision);
    static Compare value_is(std::string key, std::string value);
};

// One operation of a transaction.
struct Operation {
    enum class Kind { put, erase, range };
    Kind kind = Kind::put;
    std::string key, value;
    std::string range_end;   // erase/range: up to (not including) this key; empty: the key alone
    std::int64_t lease = 0;  // put: attach to this lease (0: none)

    static Operation put(std::string key, std::string value, std::int64_t lease = 0);
    static Operation erase(std::string key);
    static Operation erase_prefix(const std::string& prefix);
    static Operation range(std::string key);
    static Operation range_prefix(const std::string& prefix);
};

struct TxnResult {
    bool succeeded = false;
    std::int64_t revision = 0;
    // For each range operation of the branch that ran, the keys it read (in order).
    std::vector<std::vector<KeyValue>> ranges;
};

struct EtcdOptions {
    std::vector<std::string> endpoints;  // "http://host:port", at least one
    std::chrono::milliseconds connect_timeout{1000};
    std::chrono::milliseconds request_timeout{3000};
};

// "http://a:2379,http://b:2379" -> endpoints. Throws std::invalid_argument naming a bad one.
std::vector<std::string> parse_endpoints(const std::string& list);

// The key just after every key that starts with `prefix` (etcd's range_end for a prefix).
std::string prefix_end(const std::string& prefix);

class EtcdClient {
  public:
    explicit EtcdClient(EtcdOptions options);  // throws std::invalid_argument
    ~EtcdClient();
    EtcdClient(const EtcdClient&) = delete;
    EtcdClient& operator=(const EtcdClient&) = delete;

    std::optional<KeyValue> get(const std::string& key);
    // Every key under `prefix`, sorted; `revision` gets the store's revision of the read.
    std::vector<KeyValue> get_prefix(const std::string& prefix, std::int64_t* revision = nullptr);
    std::int64_t put(const std::string& key, const std::string& value, std::int64_t lease = 0);
    // Returns how many keys went.
    std::int64_t erase(const std::string& key);
    TxnResult txn(const std::vector<Compare>& compares, const std::vector<Operation>& success,
                  const std::vector<Operation>& failure = {});

    // A lease that ends `ttl` after its last keep-alive; returns its id.
    std::int64_t grant_lease(std::chrono::seconds ttl);
    // Renews the lease; false if etcd no longer has it (it expired or was revoked).
    bool keep_alive(std::int64_t lease);
    void revoke_lease(std::int64_t lease);  // its keys go with it; a missing lease is fine

    const EtcdOptions& options() const;
    // Which endpoint answered last (for logs and tests).
    std::string current_endpoint() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace deskbox::cluster
