#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstring>
#include <ctime>
#include <fstream>
#include <thread>

#include "common/atomic_file.hpp"
#include "server/runtime/microvm/runtime_state.hpp"
#include "server/runtime/microvm/sandbox.hpp"
#include "server/runtime/runtime_util.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// What QEMU wrote to its log from `offset` on (this run's words, not an earlier run's).
std::string log_since(const fs::path& log, std::uintmax_t offset) {
    std::ifstream in(log, std::ios::binary);
    if (!in) return {};
    in.seekg(static_cast<std::streamoff>(offset));
    std::string text((std::istreambuf_iterator<char>(in)), {});
    if (text.size() > 2048) text = text.substr(text.size() - 2048);
    return trim(text);
}

// The name under which the snapshot's fd is handed to QEMU (getfd).
constexpr const char* kSnapshotFdName = "deskbox-snapshot";

}  // namespace

bool MicrovmSandbox::snapshotted() {
    std::lock_guard lock(mutex_);
    return snapshotted_ && !torn_down_;
}

std::uint64_t MicrovmSandbox::snapshot() {
    std::lock_guard lock(mutex_);
    const std::string what = "cannot snapshot sandbox " + spec_.id + ": ";
    if (snapshotted_) throw RuntimeError(what + "it is already saved to a snapshot");
    if (!alive_locked())
        throw RuntimeError(what + "it is not running (" + (exit_ ? exit_->reason : "") + ")");
    fs::path temp = paths_.memory;
    temp += ".tmp";
    UniqueFd file(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!file)
        throw RuntimeError(what + "cannot create " + temp.string() + ": " + std::strerror(errno));
    bool was_paused = paused_;
    try {
        save_locked(std::move(file), temp);
    } catch (const RuntimeError& e) {
        // A failed save leaves the VM as it was and no partial memory file.
        std::error_code ec;
        fs::remove(temp, ec);
        if (!was_paused && alive_locked()) {
            try {
                qmp_.execute("cont");
                paused_ = false;
            } catch (const std::exception&) {
                paused_ = true;
            }
        }
        throw RuntimeError(what + e.what());
    }
    quit_after_save_locked();
    return keep_memory_file_locked(temp, what);
}

void MicrovmSandbox::save_locked(UniqueFd file, const fs::path& temp) {
    const auto& options = shared_->options;
    if (!paused_) {
        qmp_.execute("stop");
        paused_ = true;
    }
    // A local file: the default cap (meant for links shared with running guests) only
    // slows the save down.
    qmp_.execute("migrate-set-parameters", {{"max-bandwidth", std::int64_t{1} << 36}});
    qmp_.execute_with_fd("getfd", {{"fdname", kSnapshotFdName}}, file.get());
    qmp_.execute("migrate", {{"uri", std::string("fd:") + kSnapshotFdName}});
    file.reset();  // QEMU writes through its own copy
    auto deadline = Clock::now() + options.snapshot_timeout;
    while (true) {
        json info = qmp_.execute("query-migrate");
        std::string status = info.value("status", "");
        if (status == "completed") return;
        if (status == "failed" || status == "cancelled")
            throw RuntimeError("QEMU's migration " + status + ": " +
                               info.value("error-desc", "no reason given"));
        if (Clock::now() >= deadline) {
            try {
                qmp_.execute("migrate_cancel");
            } catch (const std::exception&) {
            }
            throw RuntimeError("the save did not complete within " +
                               std::to_string(options.snapshot_timeout.count()) + " ms (status " +
                               status + ", " + std::to_string(file_size_or_zero(temp)) +
                               " bytes written)");
        }
        std::this_thread::sleep_for(20ms);
    }
}

void MicrovmSandbox::quit_after_save_locked() {
    // quit closes disk.qcow2 cleanly: the snapshot is memory + this disk layer.
    try {
        qmp_.execute("quit", json::object(), 2s);
    } catch (const std::exception&) {
        // QEMU may close the socket before answering; the wait below tells.
    }
    if (!qemu_.wait(shared_->options.stop_timeout)) {
        qemu_.signal(SIGKILL);
        qemu_.wait();
    }
    qmp_.close();
    snapshotted_ = true;
    paused_ = false;
    std::error_code ec;
    for (const auto& path : {paths_.agent_socket, paths_.qmp_socket, paths_.pid_file})
        fs::remove(path, ec);
}

std::uint64_t MicrovmSandbox::keep_memory_file_locked(const fs::path& temp,
                                                      const std::string& what) {
    // From here QEMU is gone: a failure leaves the sandbox snapshotted without a usable
    // memory file, which restore then reports.
    std::error_code ec;
    atomic_file::sync_with_directory(temp);
    fs::rename(temp, paths_.memory, ec);
    if (ec) throw RuntimeError(what + "rename " + temp.string() + ": " + ec.message());
    atomic_file::sync_with_directory(paths_.memory);
    // The guest has the agent disk mounted: keep that exact image with the snapshot (a newer
    // agent replaces the shared one).
    if (agent_image_ && agent_image_->parent_path() != paths_.dir) {
        link_or_copy(*agent_image_, paths_.dir / "agent.img");
        agent_image_ = paths_.dir / "agent.img";
    }
    std::uint64_t bytes = file_size_or_zero(paths_.memory);
    write_metadata_locked({{"snapshot",
                            {{"memory", paths_.memory.string()},
                             {"bytes", bytes},
                             {"saved_unix", static_cast<std::int64_t>(std::time(nullptr))}}}});
    return bytes;
}

SavedCopy MicrovmSandbox::save_copy(const fs::path& dir) {
    std::lock_guard lock(mutex_);
    const std::string what = "cannot save a copy of sandbox " + spec_.id + ": ";
    if (snapshotted_) throw RuntimeError(what + "it is saved to a snapshot; resume it first");
    if (!alive_locked())
        throw RuntimeError(what + "it is not running (" + (exit_ ? exit_->reason : "") + ")");
    make_dir(dir, 0700);
    const fs::path temp = dir / "memory.tmp";
    UniqueFd file(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!file)
        throw RuntimeError(what + "cannot create " + temp.string() + ": " + std::strerror(errno));
    const bool was_paused = paused_;
    auto run_on = [&]() -> std::string {
        if (was_paused || !alive_locked()) return {};
        try {
            qmp_.execute("cont");
            paused_ = false;
            return {};
        } catch (const std::exception& e) {
            paused_ = true;
            return std::string("; then it did not run on: ") + e.what();
        }
    };
    try {
        save_locked(std::move(file), temp);
        copy_disk_locked(dir / "disk.qcow2");
        if (agent_image_) link_or_copy(*agent_image_, dir / "agent.img");
    } catch (const std::exception& e) {
        // QEMU's migration and cp say a full disk only in words: read them here, once.
        const std::string message = what + e.what() + run_on();
        if (dynamic_cast<const NoSpaceError*>(&e) ||
            message.find("No space left on device") != std::string::npos)
            throw NoSpaceError(message);
        throw RuntimeError(message);
    }
    if (auto failed = run_on(); !failed.empty()) throw RuntimeError(what + "saved" + failed);
    // Starts from it only ever read these.
    for (const char* name : {"memory.tmp", "disk.qcow2", "agent.img"})
        ::chmod((dir / name).c_str(), 0444);
    fs::rename(temp, dir / "memory");
    const std::uint64_t memory_bytes = file_size_or_zero(dir / "memory");
    json record = {{"kind", "memory"},
                   {"template_rootfs", spec_.template_rootfs.string()},
                   {"memory_mb", spec_.limits.memory_mb},
                   {"vcpus", microvm_vcpus(spec_.limits.cpus)},
                   {"network", spec_.network},
                   {"accelerator", to_string(accelerator_)},
                   {"tsc_khz", tsc_khz_},
                   {"memory_bytes", memory_bytes},
                   {"saved_unix", static_cast<std::int64_t>(std::time(nullptr))}};
    sync_filesystem(dir);
    write_file_atomic(dir / "snapshot.json", record.dump(2) + "\n", 0644,
                      atomic_file::Durability::power_loss);
    return {CopyKind::memory, memory_bytes + file_size_or_zero(dir / "disk.qcow2")};
}

void MicrovmSandbox::copy_disk_locked(const fs::path& to) {
    const auto& options = shared_->options;
    check_tool(run_tool({"cp", "--sparse=always", paths_.disk.string(), to.string()},
                        options.snapshot_timeout, "coreutils"),
               "cp " + paths_.disk.string());
    // A start from a template snapshot stands on that snapshot's disk (base.qcow2): fold its
    // changes in, so the copy is one layer on the rootfs like every template snapshot.
    if (template_dir_)
        check_tool(run_tool({options.qemu_img, "rebase", "-q", "-f", "qcow2", "-b",
                             image_.rootfs.string(), "-F", "raw", to.string()},
                            options.snapshot_timeout, "qemu-utils"),
                   "qemu-img rebase " + to.string());
}

bool MicrovmSandbox::release_snapshot() {
    std::lock_guard lock(mutex_);
    if (!snapshotted_ || torn_down_) return false;
    torn_down_ = true;  // the destructor leaves the files alone
    shared_->live.erase(spec_.state_root, spec_.id);
    return true;
}

std::uint64_t MicrovmSandbox::snapshot_bytes() {
    std::lock_guard lock(mutex_);
    return snapshotted_ ? file_size_or_zero(paths_.memory) : 0;
}

void MicrovmSandbox::restore_from_snapshot() {
    std::lock_guard lock(mutex_);
    const std::string what =
        "cannot restore sandbox " + spec_.id + " from " + paths_.memory.string() + ": ";
    if (torn_down_) throw RuntimeError(what + "the sandbox was killed");
    if (!snapshotted_) throw RuntimeError(what + "it is not saved to a snapshot");
    restore_locked(paths_.memory, /*consume=*/true);
    snapshotted_ = false;
    write_metadata_locked(json::object());  // no longer snapshotted
}

void MicrovmSandbox::restore_locked(const fs::path& memory_file, bool consume) {
    const std::string what =
        "cannot restore sandbox " + spec_.id + " from " + memory_file.string() + ": ";
    UniqueFd memory(::open(memory_file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!memory) throw RuntimeError(what + "cannot open it: " + std::strerror(errno));
    const auto& options = shared_->options;
    auto log_offset = file_size_or_zero(paths_.qemu_log);
    auto qemu_said = [&]() -> std::string {
        std::string said = log_since(paths_.qemu_log, log_offset);
        return said.empty() ? std::string() : " (QEMU: " + said + ")";
    };
    auto stop_qemu = [&] {
        if (qemu_.running()) {
            qemu_.signal(SIGKILL);
            qemu_.wait();
        }
        qmp_.close();
        std::error_code ec;
        for (const auto& path : {paths_.agent_socket, paths_.qmp_socket, paths_.pid_file})
            fs::remove(path, ec);
    };
    try {
        spawn_qemu_locked(memory.get());
        qmp_.execute("migrate-incoming", {{"uri", "fd:" + std::to_string(memory.get())}});
        memory.reset();
        auto deadline = Clock::now() + options.snapshot_timeout;
        // QEMU 7.2 exits when a load fails (newer ones report `failed` first).
        while (true) {
            std::string status = qmp_.execute("query-migrate").value("status", "");
            if (status == "completed") break;
            if (status == "failed") throw RuntimeError("QEMU could not load it");
            if (Clock::now() >= deadline)
                throw RuntimeError("the load did not complete within " +
                                   std::to_string(options.snapshot_timeout.count()) + " ms");
            std::this_thread::sleep_for(20ms);
        }
        // Saved stopped, so it arrives paused.
        if (qmp_.execute("query-status").value("status", "") != "running") qmp_.execute("cont");
        std::string status = qmp_.execute("query-status").value("status", "");
        if (status != "running") throw RuntimeError("the VM is " + status + " after cont");
    } catch (const RuntimeError& e) {
        // Let a QEMU that is exiting finish writing why.
        if (qemu_.pid() > 0) qemu_.wait(1000ms);
        bool exited = qemu_.pid() > 0 && !qemu_.running();
        std::string said = qemu_said();
        stop_qemu();
        throw RuntimeError(what + (exited ? "QEMU refused it and exited; " : "") + e.what() + said);
    }
    paused_ = false;
    if (consume) {
        // The disk moves on from here; the old memory no longer matches it.
        std::error_code ec;
        fs::remove(memory_file, ec);
    }
}

}  // namespace deskbox::runtime
