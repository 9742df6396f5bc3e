// Sandbox's pause and resume: freezing its processes, or saving a microVM to a snapshot
// (its agent connection, mirror and streams let go first and taken up again after).
#include "server/sandbox/sandbox.hpp"

#include <cstdio>

namespace deskbox::server {

void Sandbox::pause(bool snapshot) {
    std::lock_guard lifecycle(lifecycle_mutex_);
    {
        std::lock_guard lock(mutex_);
        if (status_ == SandboxStatus::paused && (!snapshot || snapshotted_)) return;
        if (status_ != SandboxStatus::running && status_ != SandboxStatus::paused)
            throw ApiError(409, "conflict", std::string("sandbox is ") + to_string(status_));
    }
    auto* snapshots = instance_ ? instance_->snapshots() : nullptr;
    if (snapshot && !snapshots)
        throw ApiError(409, "snapshot_unsupported",
                       "sandbox " + config_.id + " runs in a " + config_.runtime_name +
                           "; snapshots need the microvm runtime (pause without \"snapshot\" "
                           "keeps it in memory)",
                       "snapshot");
    if (!snapshot) {
        std::lock_guard lock(mutex_);
        try {
            instance_->pause();
        } catch (const std::exception& e) {
            throw ApiError(500, "runtime_error", std::string("pause failed: ") + e.what());
        }
        status_ = SandboxStatus::paused;
        return;
    }
    // Paused in memory first: run it again so the guest sees the host leave before the save
    // (else the restored agent would wait in its old session).
    try {
        if (status() == SandboxStatus::paused) instance_->resume();
    } catch (const std::exception& e) {
        throw ApiError(500, "runtime_error", std::string("snapshot failed: ") + e.what());
    }
    {
        std::lock_guard lock(mutex_);
        status_ = SandboxStatus::paused;  // calls now get 409 sandbox_paused
    }
    detach_agent();
    std::uint64_t bytes = 0;
    try {
        bytes = snapshots->snapshot();
    } catch (const std::exception& e) {
        // The VM still runs (the runtime continued it): take the session up again.
        std::string reason = std::string("snapshot failed: ") + e.what();
        try {
            attach_agent(agent_timeout_);
            std::lock_guard lock(mutex_);
            status_ = SandboxStatus::running;
        } catch (const std::exception& again) {
            fail(reason + "; then the agent did not come back: " + again.what());
        }
        throw ApiError(500, "snapshot_failed", reason);
    }
    {
        std::lock_guard lock(mutex_);
        snapshotted_ = true;
        snapshot_bytes_ = bytes;
        snapshot_at_ = SystemClock::now();
        // A saved sandbox holds no memory or CPU: it waits for a resume or kill as long as
        // any sandbox may live; a resume starts its own timeout again.
        expires_at_ = snapshot_at_ + max_saved_lifetime_;
    }
    audit("snapshot", {{"bytes", bytes}});
    try {
        save_record();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deskboxd: %s: snapshot record: %s\n", config_.id.c_str(), e.what());
    }
}

void Sandbox::resume() {
    std::lock_guard lifecycle(lifecycle_mutex_);
    bool from_snapshot;
    {
        std::lock_guard lock(mutex_);
        if (status_ == SandboxStatus::running) return;
        if (status_ != SandboxStatus::paused)
            throw ApiError(409, "conflict", std::string("sandbox is ") + to_string(status_));
        from_snapshot = snapshotted_;
        if (!from_snapshot) {
            try {
                instance_->resume();
            } catch (const std::exception& e) {
                throw ApiError(500, "runtime_error", std::string("resume failed: ") + e.what());
            }
            status_ = SandboxStatus::running;
        }
    }
    if (!from_snapshot) {
        if (!agent_connected()) {
            // Adopted while paused: its agent gets its session now.
            try {
                attach_agent(agent_timeout_);
                if (config_.vnc) start_vnc();
            } catch (const std::exception& e) {
                fail(std::string("its agent does not answer after the resume: ") + e.what());
                throw ApiError(502, "agent_unreachable", error_reason());
            }
        }
        // A guest kernel's clock stood still while paused; a container's is the host's.
        if (!instance_->shares_host_clock()) sync_guest(/*new_identity=*/false);
        return;
    }
    try {
        instance_->snapshots()->restore_from_snapshot();
    } catch (const std::exception& e) {
        // The snapshot stays as it was (still paused): the caller may retry or kill.
        throw ApiError(422, "snapshot_unusable", e.what());
    }
    {
        std::lock_guard lock(mutex_);
        snapshotted_ = false;
        snapshot_bytes_ = 0;
    }
    try {
        attach_agent(agent_timeout_);
        if (config_.vnc && !media_.has_vnc()) start_vnc();  // an adopted sandbox has none yet
        sync_guest(/*new_identity=*/false);
    } catch (const std::exception& e) {
        std::string reason = std::string("the agent did not come back after the restore: ") +
                             e.what() + "; console: " + instance_->log_tail(2000);
        fail(reason);
        throw ApiError(502, "agent_unavailable", reason);
    }
    audit("restore", nlohmann::json::object());
    std::lock_guard lock(mutex_);
    status_ = SandboxStatus::running;
    expires_at_ = SystemClock::now() + config_.timeout;
}

bool Sandbox::can_snapshot() const {
    return instance_ && instance_->snapshots() != nullptr;
}

bool Sandbox::snapshotted() const {
    std::lock_guard lock(mutex_);
    return snapshotted_;
}

}  // namespace deskbox::server
