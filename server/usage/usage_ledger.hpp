// The usage ledger: what every sandbox used, per sample, on disk in <state>/usage/ledger.jsonl.
// Append-only JSON lines, one per event:
//   {"kind":"start","id","at","template","runtime","metadata","vcpus","memory_mb","disk_mb"}
//   {"kind":"sample","id","at","state",<instant figures>,"totals":{...},"raw":{...}}
//   {"kind":"end","id","at","totals":{...}}
// (`at`: Unix milliseconds). Each sample carries the sandbox's cumulative totals at that moment,
// so replaying is idempotent: a line seen twice changes nothing, the latest line of a sandbox
// is where it stands, and a SIGKILL loses at most the line being written (a torn last line is
// skipped). `raw` holds the counters the totals were last advanced from (the cgroup's or
// QEMU's CPU time, the network's bytes), so a restarted server adopting the sandbox continues
// from them: never counting what it already counted, and not losing what was used meanwhile.
// Samples are kept `keep` after the sandbox ended; then only its start, its end and its last
// sample of each UTC day stay (usage by day stays exact for sandboxes long gone).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/unique_fd.hpp"

namespace deskbox::server::usage {

using Millis = std::int64_t;  // Unix time in milliseconds
inline constexpr Millis kDayMs = 24LL * 3600 * 1000;

// Cumulative since the sandbox started.
struct UsageTotals {
    double cpu_seconds = 0;                  // CPU time its processes (or QEMU) used
    double vcpu_seconds = 0;                 // reserved vCPUs × seconds running
    double memory_gib_seconds = 0;           // resident memory × seconds
    double memory_reserved_gib_seconds = 0;  // its memory limit × seconds running
    double disk_gib_seconds = 0;             // its writable layer's bytes × seconds
    std::uint64_t disk_peak_bytes = 0;
    std::uint64_t egress_bytes = 0, ingress_bytes = 0;
    double lifetime_seconds = 0, paused_seconds = 0;

    // `this` minus `earlier`, for the sums of a period (the peak stays this one's).
    UsageTotals since(const UsageTotals& earlier) const;
    void add(const UsageTotals& other);  // sums (the peak is the larger)
};
nlohmann::json to_json(const UsageTotals& totals);
UsageTotals totals_from_json(const nlohmann::json& j);  // missing members are 0

// The counters the totals were last advanced from.
struct RawCounters {
    std::optional<std::uint64_t> cpu_ns;  // nullopt: none readable (a saved microVM)
    std::uint64_t net_out = 0, net_in = 0;
};

// One sample: the instant figures and the totals then.
struct UsageSample {
    Millis at = 0;
    bool paused = false;
    double cpu_percent = 0;  // of one CPU, since the previous sample
    std::uint64_t memory_resident_bytes = 0, memory_reserved_bytes = 0, disk_bytes = 0;
    std::uint64_t net_out_bytes = 0, net_in_bytes = 0;  // since the previous sample
    UsageTotals totals;
    RawCounters raw;
};
nlohmann::json to_json(const UsageSample& sample);  // the API's form (no raw counters)

// What a sandbox was started as: what usage is grouped by long after it is gone.
struct SandboxStart {
    std::string id, template_name, runtime;
    nlohmann::json metadata = nlohmann::json::object();
    double vcpus = 0;
    std::uint64_t memory_mb = 0, disk_mb = 0;
    Millis at = 0;
};

// A sandbox's history as the ledger holds it.
struct SandboxHistory {
    SandboxStart start;
    std::vector<UsageSample> samples;  // by time
    std::optional<Millis> ended_at;
    std::optional<UsageTotals> end_totals;

    // Its totals at `t`: its latest sample at or before it (zero before the first).
    UsageTotals totals_at(Millis t) const;
    Millis last_at() const;  // of its last line
};

class UsageLedger {
  public:
    // Reads <dir>/ledger.jsonl (made if missing) and opens it for appending. Throws
    // std::system_error.
    UsageLedger(std::filesystem::path dir, std::chrono::hours keep);
    UsageLedger(const UsageLedger&) = delete;
    UsageLedger& operator=(const UsageLedger&) = delete;

    // Each appends one line (one write) and updates the history. Throws std::system_error.
    void record_start(const SandboxStart& start);
    void record_sample(const std::string& id, const UsageSample& sample);
    void record_end(const std::string& id, Millis at);

    // A copy of sandbox `id`'s history, if the ledger has it.
    std::optional<SandboxHistory> history(const std::string& id) const;
    // Every history with a line in [from, to] or spanning it.
    std::vector<SandboxHistory> overlapping(Millis from, Millis to) const;
    // Ids with a start and no end (running when the last server stopped, or still running).
    std::vector<std::string> open_ids() const;
    // The lifetimes in seconds of every sandbox the ledger saw end (the /metrics histogram).
    std::vector<double> ended_lifetimes() const;
    // Compacts the histories of sandboxes that ended more than `keep` before `now` and
    // rewrites the file (atomically). Returns how many samples went.
    std::size_t prune(Millis now);
    std::filesystem::path file() const { return file_; }

  private:
    void apply(const nlohmann::json& line);  // one replayed or appended line
    void append(const nlohmann::json& line);

    std::filesystem::path dir_, file_;
    std::chrono::hours keep_;
    mutable std::mutex mutex_;
    UniqueFd fd_;
    std::map<std::string, SandboxHistory> histories_;
};

}  // namespace deskbox::server::usage
