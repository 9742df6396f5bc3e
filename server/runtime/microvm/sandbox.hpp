// One microVM sandbox: a QEMU process running the `microvm` machine (layout and lifecycle in
// runtime.hpp). Its methods live by idea: sandbox.cpp (launch, QEMU, pause, kill, release),
// agent_connection.cpp (reaching the agent over virtio-serial), snapshot.cpp (save and
// restore), template_snapshots.cpp (starting from a template snapshot).
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/runtime/microvm/accelerator.hpp"
#include "server/runtime/microvm/qemu_command.hpp"
#include "server/runtime/microvm/qemu_process.hpp"
#include "server/runtime/microvm/qmp_client.hpp"
#include "server/runtime/microvm/sandbox_files.hpp"
#include "server/runtime/process_sandbox.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

class MicrovmRuntime;

class MicrovmSandbox : public ProcessSandbox, public Snapshots, public CopySaving {
  public:
    ~MicrovmSandbox() override;

    const std::string& id() const override { return spec_.id; }
    std::filesystem::path agent_socket_path() const override { return paths_.agent_socket; }
    // Connects to the agent.sock (QEMU's side of the port) and returns once the agent has
    // spoken (its hello is waiting to be read), so a returned fd is a live agent. Fails with
    // the console's last lines if the VM stops or the timeout passes first. One host
    // connection at a time: a reconnect waits until the previous one is closed.
    UniqueFd connect_agent(std::chrono::milliseconds timeout) override;
    void pause() override;   // QMP stop: vCPUs halt, memory stays
    void resume() override;  // QMP cont
    // QEMU's CPU time and resident set (/proc), the guest's memory limit, the disk layer's
    // allocated bytes; no CPU or memory while saved to a snapshot (no process).
    ResourceUsage usage() override;

    // Saves the whole VM (RAM, devices; the disk layer is flushed) to <dir>/memory and ends
    // the QEMU process. Afterwards the sandbox is `paused` with no process: alive() is
    // false, exit_info() empty, and only restore_from_snapshot() or kill() are valid.
    // The host's agent connection ends with QEMU. Throws RuntimeError with QEMU's message
    // (the VM then keeps running, paused if it was). Returns the memory file's size.
    std::uint64_t snapshot() override;
    // Starts QEMU again from <dir>/memory and returns once the VM runs; connect_agent then
    // reconnects to the agent inside. A missing or corrupted memory file gives a
    // RuntimeError naming it (with QEMU's words) and leaves no QEMU: the sandbox stays
    // snapshotted.
    void restore_from_snapshot() override;
    bool snapshotted() override;
    // An adopted snapshot's network (the attachment does not survive a server restart).
    void set_network_attachment(NetworkAttachment attachment) override;
    // Lets go of a snapshotted sandbox without tearing it down (the server stops; the next
    // one adopts it). False, and nothing changes, if it is not snapshotted.
    bool release_snapshot() override;
    // Lets go of a running (or paused) sandbox without stopping it: QEMU runs on for the next
    // server's adopt_running. False, and nothing changes, if it is not running.
    bool release() override;
    // The network namespace of QEMU's tap device: the router an earlier server built, which
    // an adopted sandbox's network takes over. Empty without a network. Throws RuntimeError.
    UniqueFd adopted_network_namespace() override;
    // Bytes of the memory file while snapshotted, else 0.
    std::uint64_t snapshot_bytes() override;
    Snapshots* snapshots() override { return this; }
    // Memory, devices and disk into `dir` as a template snapshot's files (a start from it is a
    // restore), while the VM stands still; then it runs on. Its disk there is one layer on
    // the image's rootfs, so the copy depends on nothing of this sandbox.
    SavedCopy save_copy(const std::filesystem::path& dir) override;
    CopyKind copy_kind() const override { return CopyKind::memory; }
    CopySaving* copy_saving() override { return this; }
    bool shares_host_clock() const override { return false; }  // a guest kernel keeps its own

    const MicrovmPaths& paths() const { return paths_; }
    const MicrovmImage& image() const { return image_; }
    pid_t qemu_pid() const { return qemu_.pid(); }
    Accelerator accelerator() const { return accelerator_; }
    const std::vector<std::string>& qemu_command() const { return command_; }
    // Runs a QMP command (for tools and tests: query-status, ...). Throws like QmpClient.
    nlohmann::json qmp(const std::string& command,
                       const nlohmann::json& arguments = nlohmann::json::object());

    class Key {
        friend class MicrovmRuntime;
        Key() = default;
    };
    struct Shared;
    MicrovmSandbox(Key, std::shared_ptr<Shared> shared, const SandboxSpec& spec, MicrovmImage image,
                   Accelerator accelerator);

  protected:
    void do_kill(const KillOptions& options) override;
    bool process_running_locked() override { return qemu_.running(); }
    ExitInfo describe_exit_locked() override;  // from the console, QEMU's status and log
    bool saved_locked() const override { return snapshotted_; }

  private:
    friend class MicrovmRuntime;
    // ---- sandbox.cpp
    void launch();  // files, sockets, QEMU, QMP; throws
    void write_metadata_locked(const nlohmann::json& extra);
    // Sockets, command line, QEMU, QMP (launch and restore); `incoming_fd` >= 0: restore.
    void spawn_qemu_locked(int incoming_fd);
    UniqueFd open_tap_locked();  // the network's tap device; none without a network
    QemuCommandOptions qemu_command_options_locked(int agent_fd, int qmp_fd, int tap_fd) const;
    void connect_qmp_locked();  // to the QEMU just started; throws with its last words
    std::string vcpu_whereabouts_locked();
    std::string console_lines(std::size_t lines);
    std::string failure_detail();  // console tail (+ QEMU's stderr if it said anything)

    // ---- agent_connection.cpp: the steps of connect_agent
    struct AgentWait {
        std::chrono::steady_clock::time_point started, deadline;
    };
    bool agent_port_connected_locked();        // QEMU has a host connection on agent.sock
    std::optional<std::string> dead_reason();  // why the VM cannot answer; nullopt: it can
    RuntimeError agent_failure(const std::string& what);  // with the console's last lines
    // Throws agent_failure if the VM ended or the wait's deadline passed.
    void check_agent_wait(const AgentWait& wait, const std::string& what);
    // A reconnect: until QEMU dropped the previous host connection and the guest noticed.
    void wait_for_old_session_end(const AgentWait& wait);
    // True once the agent spoke on `fd`; false when a reconnect should bounce the connection.
    bool await_hello(int fd, bool reconnect, const AgentWait& wait);

    // ---- snapshot.cpp
    // Starts QEMU on `memory` and runs the VM; `consume`: the file is this sandbox's own and
    // goes once loaded (a template's is shared and stays). Throws RuntimeError, no QEMU left.
    void restore_locked(const std::filesystem::path& memory, bool consume);
    // The steps of snapshot(). Stops the VM and has QEMU write it into `file` (`temp`);
    // returns once saved. Throws RuntimeError.
    void save_locked(UniqueFd file, const std::filesystem::path& temp);
    void quit_after_save_locked();  // QEMU ends (flushing disk.qcow2); snapshotted from here
    // The VM stopped with its disk flushed: its disk as one qcow2 layer on the image's rootfs.
    void copy_disk_locked(const std::filesystem::path& to);
    // Moves `temp` to the memory file, keeps the agent image beside it, writes the record.
    std::uint64_t keep_memory_file_locked(const std::filesystem::path& temp,
                                          const std::string& what);

    // ---- template_snapshots.cpp
    void launch_from_template(const std::filesystem::path& template_dir);

    std::shared_ptr<Shared> shared_;
    SandboxSpec spec_;
    MicrovmPaths paths_;
    MicrovmImage image_;
    Accelerator accelerator_;
    std::vector<std::string> command_;
    QemuProcess qemu_;
    QmpClient qmp_;
    bool snapshotted_ = false;  // saved to paths_.memory, no QEMU process
    std::optional<std::filesystem::path> agent_image_;
    std::optional<std::filesystem::path> template_dir_;  // restored from this template snapshot
    std::uint64_t tsc_khz_ = 0;
    bool agent_connected_before_ = false;  // a later connect_agent is a reconnect
};

}  // namespace deskbox::runtime
