// The usage sampler: one thread that reads every sandbox's counters every interval (the
// runtime's CPU time, resident memory, its limit, disk; the network's bytes), integrates them
// into the sandbox's running totals and appends a sample to the ledger (usage_ledger.hpp).
// A sandbox the server adopted after a restart continues from its last line; one the ledger
// has open but no server runs any more is ended at its last line.
#pragma once

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "server/usage/usage_ledger.hpp"

namespace deskbox::server {
class Sandbox;
class SandboxManager;
}  // namespace deskbox::server

namespace deskbox::server::usage {

struct UsageOptions {
    // How often every sandbox is sampled (--usage-sample-s); 0: never (the ledger is still
    // read and answered from).
    std::chrono::seconds sample_interval{5};
    // How long a sandbox's samples stay after it ended (--metrics-keep-h).
    std::chrono::hours keep{24};
    // The cost column of usage (--price-vcpu-second, --price-gib-second): reserved vCPUs and
    // reserved memory while running, as clouds bill them. Both 0: no cost column.
    double price_vcpu_second = 0, price_gib_second = 0;
    bool priced() const { return price_vcpu_second > 0 || price_gib_second > 0; }
};

Millis now_millis();

class UsageService {
  public:
    // Opens <state_dir>/usage/ledger.jsonl and starts sampling `manager`'s sandboxes (unless
    // the interval is 0). Throws std::system_error.
    UsageService(SandboxManager& manager, const std::filesystem::path& state_dir,
                 UsageOptions options);
    ~UsageService();  // stops the thread; running sandboxes stay open in the ledger
    UsageService(const UsageService&) = delete;
    UsageService& operator=(const UsageService&) = delete;

    const UsageOptions& options() const { return options_; }
    const UsageLedger& ledger() const { return ledger_; }
    // Sandbox `id`'s last sample (its running totals then), if it was sampled.
    std::optional<UsageSample> latest(const std::string& id) const;
    // One round over every sandbox now (the thread does this every interval).
    void sample_all();
    // A sandbox being killed, while its counters can still be read: its last sample up to now,
    // and its end. A sandbox killed before any round saw it is still counted from its creation.
    void sandbox_ending(const Sandbox& sandbox);

  private:
    void loop();
    // Advances `last` (its previous sample) to now with `sandbox`'s counters.
    UsageSample next_sample(const Sandbox& sandbox, const UsageSample& last, Millis now) const;
    // The sample a newly seen sandbox continues from: its last in the ledger (adopted), or
    // zero at its creation (a start line is written).
    UsageSample first_sample(const Sandbox& sandbox);
    // Samples `sandbox` at `now` (a round's or its end's); under round_mutex_.
    void sample_one(const Sandbox& sandbox, Millis now);

    SandboxManager& manager_;
    UsageOptions options_;
    UsageLedger ledger_;
    mutable std::mutex mutex_;                 // last_
    std::map<std::string, UsageSample> last_;  // sandboxes sampled in this server's life
    std::mutex round_mutex_;                   // one round at a time
    Millis last_prune_ = 0;
    std::mutex stop_mutex_;
    std::condition_variable stop_wake_;
    bool stopping_ = false;
    std::thread thread_;
};

}  // namespace deskbox::server::usage
