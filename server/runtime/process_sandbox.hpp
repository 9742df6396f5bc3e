// What container and microVM sandboxes share: a host process stands for the sandbox (runc's
// monitor and the entry; QEMU), its end is recorded once and classified
// (exit_classification.hpp), and its console's last bytes outlive the teardown. The live set
// of a runtime object (which ids it owns) is here too.
#pragma once

#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

class ProcessSandbox : public SandboxInstance {
  public:
    bool alive() final;
    SandboxState state() final;
    std::optional<ExitInfo> exit_info() final;  // set once the process has ended
    // The console's last bytes; after the teardown, what it held then.
    std::string log_tail(std::size_t max_bytes = 4096) final;

  protected:
    explicit ProcessSandbox(std::filesystem::path console_log)
        : console_log_(std::move(console_log)) {}

    // ---- what a runtime tells; called with mutex_ held ----
    virtual bool process_running_locked() = 0;
    // How it ended (the pure classifiers on what the runtime gathers). Called once.
    virtual ExitInfo describe_exit_locked() = 0;
    // Saved to a snapshot: no process, yet not ended (state() is paused).
    virtual bool saved_locked() const { return false; }

    // ---- for the runtime; with mutex_ held ----
    // False once it ended (then its exit is recorded), was torn down or saved.
    bool alive_locked();
    void record_exit_locked();  // the first call records; later ones keep that
    // RuntimeError "cannot <action> sandbox <id>: it is not running (<reason>)" unless alive.
    void require_running_locked(const std::string& action);
    // What log_tail() answers.
    std::string console_tail_locked(std::size_t max_bytes);
    // The end of a kill: records the exit, keeps the console's tail, runs `teardown` (which
    // removes the files) and marks the sandbox torn down.
    template <typename Teardown>
    void finish_kill_locked(Teardown&& teardown) {
        record_exit_locked();
        keep_console_tail_locked();
        teardown();
        torn_down_ = true;
    }

    std::mutex mutex_;
    bool paused_ = false;
    bool kill_requested_ = false;
    bool torn_down_ = false;  // killed or let go of: its files and processes are not ours
    std::optional<ExitInfo> exit_;

  private:
    void keep_console_tail_locked();

    const std::filesystem::path console_log_;
    std::string final_log_tail_;
};

// The sandboxes a runtime object owns (not torn down), by state root and id: a second start
// of an id is refused, and the others in a state root are leftovers. Thread-safe.
class LiveSandboxes {
  public:
    bool contains(const std::filesystem::path& state_root, const std::string& id) const;
    // False, and nothing changes, if it is there already.
    bool insert(const std::filesystem::path& state_root, const std::string& id);
    void erase(const std::filesystem::path& state_root, const std::string& id);

  private:
    static std::string key(const std::filesystem::path& state_root, const std::string& id);
    mutable std::mutex mutex_;
    std::set<std::string> keys_;
};

}  // namespace deskbox::runtime
