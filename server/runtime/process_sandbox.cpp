#include "server/runtime/process_sandbox.hpp"

#include "server/runtime/runtime_util.hpp"

namespace deskbox::runtime {

bool ProcessSandbox::alive_locked() {
    if (exit_ || torn_down_ || saved_locked()) return false;
    if (process_running_locked()) return true;
    record_exit_locked();
    return false;
}

void ProcessSandbox::record_exit_locked() {
    if (!exit_) exit_ = describe_exit_locked();
}

void ProcessSandbox::require_running_locked(const std::string& action) {
    if (!alive_locked())
        throw RuntimeError("cannot " + action + " sandbox " + id() + ": it is not running (" +
                           (exit_ ? exit_->reason : "") + ")");
}

void ProcessSandbox::keep_console_tail_locked() {
    final_log_tail_ = read_tail(console_log_, 65536);
}

bool ProcessSandbox::alive() {
    std::lock_guard lock(mutex_);
    return alive_locked();
}

SandboxState ProcessSandbox::state() {
    std::lock_guard lock(mutex_);
    if (saved_locked() && !torn_down_) return SandboxState::paused;
    if (!alive_locked()) return SandboxState::exited;
    return paused_ ? SandboxState::paused : SandboxState::running;
}

std::optional<ExitInfo> ProcessSandbox::exit_info() {
    std::lock_guard lock(mutex_);
    alive_locked();
    return exit_;
}

std::string ProcessSandbox::log_tail(std::size_t max_bytes) {
    std::lock_guard lock(mutex_);
    return console_tail_locked(max_bytes);
}

std::string ProcessSandbox::console_tail_locked(std::size_t max_bytes) {
    if (torn_down_) {
        return final_log_tail_.size() <= max_bytes
                   ? final_log_tail_
                   : final_log_tail_.substr(final_log_tail_.size() - max_bytes);
    }
    return read_tail(console_log_, max_bytes);
}

std::string LiveSandboxes::key(const std::filesystem::path& state_root, const std::string& id) {
    return state_root.lexically_normal().string() + '\n' + id;
}

bool LiveSandboxes::contains(const std::filesystem::path& state_root, const std::string& id) const {
    std::lock_guard lock(mutex_);
    return keys_.count(key(state_root, id)) > 0;
}

bool LiveSandboxes::insert(const std::filesystem::path& state_root, const std::string& id) {
    std::lock_guard lock(mutex_);
    return keys_.insert(key(state_root, id)).second;
}

void LiveSandboxes::erase(const std::filesystem::path& state_root, const std::string& id) {
    std::lock_guard lock(mutex_);
    keys_.erase(key(state_root, id));
}

}  // namespace deskbox::runtime
