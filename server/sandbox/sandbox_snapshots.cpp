// Sandbox's pause and resume: freezing its processes, or saving a microVM to a snapshot
// (its agent connection, mirror and streams let go first and taken up again after).
#include "server/sandbox/sandbox.hpp"

#include <cstdio>

namespace deskbox::server {

const char* to_string(PauseReason reason) {
    switch (reason) {
        case PauseReason::request:
            return "request";
        case PauseReason::timeout:
            return "timeout";
        case PauseReason::none:
            break;
    }
    return "none";
}

void Sandbox::pause(bool snapshot, PauseReason reason) {
    std::lock_guard lifecycle(lifecycle_mutex_);
    {
        std::lock_guard lock(mutex_);
        if (status_ == SandboxStatus::paused && (!snapshot || snapshotted_)) return;
        if (status_ != SandboxStatus::running && status_ != SandboxStatus::paused)
            throw SandboxError(SandboxFault::conflict, "conflict",
                               std::string("sandbox is ") + to_string(status_));
    }
    auto* snapshots = instance_ ? instance_->snapshots() : nullptr;
    if (snapshot && !snapshots)
        throw SandboxError(SandboxFault::conflict, "snapshot_unsupported",
                           "sandbox " + config_.id + " runs in a " + config_.runtime_name +
                               "; snapshots need the microvm runtime (pause without \"snapshot\" "
                               "keeps it in memory)",
                           "snapshot");
    if (!snapshot) {
        std::lock_guard lock(mutex_);
        try {
            instance_->pause();
        } catch (const std::exception& e) {
            throw SandboxError(SandboxFault::failed, "runtime_error",
                               std::string("pause failed: ") + e.what());
        }
        status_ = SandboxStatus::paused;
        paused_reason_ = reason;
        // Set with the state, not after: a request waking it in between would otherwise get
        // this long wait as its running timeout, and it would never pause again.
        if (reason == PauseReason::timeout) expires_at_ = SystemClock::now() + max_saved_lifetime_;
    }
    // The next server tells a pause asked for from a freeze a save left (adopt_running).
    if (!snapshot) return save_record_or_audit();
    // Paused in memory first: run it again so the guest sees the host leave before the save
    // (else the restored agent would wait in its old session).
    try {
        if (status() == SandboxStatus::paused) instance_->resume();
    } catch (const std::exception& e) {
        throw SandboxError(SandboxFault::failed, "runtime_error",
                           std::string("snapshot failed: ") + e.what());
    }
    {
        std::lock_guard lock(mutex_);
        status_ = SandboxStatus::paused;  // calls now get a conflict, sandbox_paused
        paused_reason_ = reason;
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
            paused_reason_ = PauseReason::none;
        } catch (const std::exception& again) {
            fail(reason + "; then the agent did not come back: " + again.what());
        }
        throw SandboxError(SandboxFault::failed, "snapshot_failed", reason);
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
            throw SandboxError(SandboxFault::conflict, "conflict",
                               std::string("sandbox is ") + to_string(status_));
        from_snapshot = snapshotted_;
        if (!from_snapshot) {
            try {
                instance_->resume();
            } catch (const std::exception& e) {
                throw SandboxError(SandboxFault::failed, "runtime_error",
                                   std::string("resume failed: ") + e.what());
            }
            status_ = SandboxStatus::running;
            paused_reason_ = PauseReason::none;
            // As a restore does: a timeout's pause left it the longest deadline.
            expires_at_ = SystemClock::now() + config_.timeout;
        }
    }
    if (!from_snapshot) {
        save_record_or_audit();
        if (!agent_connected()) {
            // Adopted while paused: its agent gets its session now.
            try {
                attach_agent(agent_timeout_);
                if (config_.vnc) start_vnc();
            } catch (const std::exception& e) {
                fail(std::string("its agent does not answer after the resume: ") + e.what());
                throw SandboxError(SandboxFault::agent_failed, "agent_unreachable", error_reason());
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
        throw SandboxError(SandboxFault::unprocessable, "snapshot_unusable", e.what());
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
        throw SandboxError(SandboxFault::agent_failed, "agent_unavailable", reason);
    }
    audit("restore", nlohmann::json::object());
    std::lock_guard lock(mutex_);
    status_ = SandboxStatus::running;
    paused_reason_ = PauseReason::none;
    expires_at_ = SystemClock::now() + config_.timeout;
}

bool Sandbox::wake() {
    {
        std::lock_guard lock(mutex_);
        if (status_ != SandboxStatus::paused || paused_reason_ != PauseReason::timeout ||
            !config_.auto_resume)
            return false;
    }
    resume();                      // a second request waking it meanwhile finds it running: no-op
    set_timeout(config_.timeout);  // and the record says it runs
    audit("auto_resume", nlohmann::json::object());
    return true;
}

runtime::SavedCopy Sandbox::save_copy(const std::filesystem::path& dir) {
    std::lock_guard lifecycle(lifecycle_mutex_);
    bool was_paused = false;
    {
        std::lock_guard lock(mutex_);
        if (snapshotted_)
            throw SandboxError(SandboxFault::conflict, "sandbox_paused",
                               "sandbox " + config_.id + " is saved to disk; resume it first");
        if (status_ != SandboxStatus::running && status_ != SandboxStatus::paused)
            throw SandboxError(SandboxFault::conflict, "conflict",
                               std::string("sandbox is ") + to_string(status_));
        was_paused = status_ == SandboxStatus::paused;
    }
    auto* saving = instance_ ? instance_->copy_saving() : nullptr;
    if (!saving)
        throw SandboxError(
            SandboxFault::invalid, "unsupported",
            "the " + config_.runtime_name + " runtime cannot save a copy of a sandbox");
    // A memory copy's agent waits for a host of its own: the session closes for the save (the
    // guest must run to see it go) and opens again after it.
    const bool memory = saving->copy_kind() == runtime::CopyKind::memory;
    if (memory && !config_.volumes.empty())
        throw SandboxError(SandboxFault::conflict, "volumes_attached",
                           "sandbox " + config_.id +
                               " has volumes: a copy of its memory would have them mounted, "
                               "but a volume is one microVM's disk at a time");
    auto end_saving = [&] {
        {
            std::lock_guard lock(mutex_);
            saving_ = false;
        }
        saved_.notify_all();
    };
    if (memory) {
        {
            std::lock_guard lock(mutex_);
            saving_ = true;
        }
        try {
            if (was_paused) instance_->resume();
        } catch (const std::exception& e) {
            end_saving();
            throw SandboxError(SandboxFault::failed, "runtime_error",
                               std::string("resume for the save: ") + e.what());
        }
        detach_agent();
    }
    runtime::SavedCopy saved;
    std::string failure;
    bool no_space = false;
    try {
        saved = saving->save_copy(dir);
    } catch (const runtime::NoSpaceError& e) {
        failure = e.what();
        no_space = true;
    } catch (const std::exception& e) {
        failure = e.what();
    }
    if (memory) {
        try {
            attach_agent(agent_timeout_);
            if (was_paused) instance_->pause();
        } catch (const std::exception& e) {
            end_saving();
            fail("its agent did not come back after a save: " + std::string(e.what()));
            throw SandboxError(SandboxFault::agent_failed, "agent_unavailable", error_reason());
        }
        end_saving();
    }
    if (!failure.empty()) {
        if (no_space)
            throw SandboxError(SandboxFault::no_space, "insufficient_storage",
                               "the copy does not fit: " + failure);
        throw SandboxError(SandboxFault::failed, "snapshot_failed", failure);
    }
    audit("save_copy", {{"kind", runtime::to_string(saved.kind)}, {"bytes", saved.bytes}});
    return saved;
}

nlohmann::json Sandbox::create_settings() const {
    nlohmann::json limits = {{"memory_mb", config_.limits.memory_mb},
                             {"cpus", config_.limits.cpus},
                             {"pids", config_.limits.pids}};
    if (config_.limits.disk_mb) limits["disk_mb"] = config_.limits.disk_mb;
    if (const auto kbps = egress_kbps()) limits["egress_kbps"] = kbps;
    nlohmann::json settings = {{"template", config_.template_name},
                               {"runtime", config_.runtime_name},
                               {"resolution", {config_.width, config_.height}},
                               {"dpi", config_.dpi},
                               {"limits", limits},
                               {"env", config_.env},
                               {"network", network_policy().to_json()},
                               {"vnc", config_.vnc}};
    if (config_.api_resolution)
        settings["api_resolution"] = {config_.api_resolution->width,
                                      config_.api_resolution->height};
    return settings;
}

bool Sandbox::can_snapshot() const {
    return instance_ && instance_->snapshots() != nullptr;
}

bool Sandbox::snapshotted() const {
    std::lock_guard lock(mutex_);
    return snapshotted_;
}

}  // namespace deskbox::server
