#include "server/runtime/microvm/sandbox.hpp"

#include <fcntl.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/atomic_file.hpp"
#include "server/runtime/exit_classification.hpp"
#include "server/runtime/microvm/guest_config.hpp"
#include "server/runtime/microvm/qemu_command.hpp"
#include "server/runtime/microvm/runtime_state.hpp"
#include "server/runtime/runtime_util.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kConsoleLinesInErrors = 25;

}  // namespace

MicrovmSandbox::MicrovmSandbox(Key, std::shared_ptr<Shared> shared, const SandboxSpec& spec,
                               MicrovmImage image, Accelerator accelerator)
    : ProcessSandbox(MicrovmPaths(spec.state_root, spec.id).console_log),
      shared_(std::move(shared)),
      spec_(spec),
      paths_(spec.state_root, spec.id),
      image_(std::move(image)),
      accelerator_(accelerator) {}

MicrovmSandbox::~MicrovmSandbox() {
    try {
        do_kill({});
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deskbox: tearing down microVM sandbox %s: %s\n", spec_.id.c_str(),
                     e.what());
    }
}

void MicrovmSandbox::launch() {
    const auto& options = shared_->options;
    tsc_khz_ = accelerator_ == Accelerator::tcg ? shared_->tsc_khz_cached() : 0;
    write_metadata_locked(json::object());

    // The sandbox's disk: a qcow2 layer over the template image, which QEMU opens read-only.
    check_tool(run_tool({options.qemu_img, "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
                         image_.rootfs.string(), paths_.disk.string()},
                        options.stop_timeout, "qemu-utils"),
               "qemu-img create " + paths_.disk.string());

    if (!spec_.agent_dir.empty())
        agent_image_ = shared_->agent_image(spec_.state_root, spec_.agent_dir);
    write_file_atomic(paths_.config, guest_config(spec_), 0600);
    write_metadata_locked(json::object());  // now with the agent image
    spawn_qemu_locked(-1);
}

void MicrovmSandbox::write_metadata_locked(const json& extra) {
    json metadata = {{"runtime", kMicrovmRuntimeName},
                     {"id", spec_.id},
                     {"template_rootfs", spec_.template_rootfs.string()},
                     {"image_dir", image_.dir.string()},
                     {"accelerator", to_string(accelerator_)},
                     {"tsc_khz", tsc_khz_},
                     {"agent_image", agent_image_ ? agent_image_->string() : std::string()},
                     {"spec", spec_to_json(spec_)},
                     {"created_unix", static_cast<std::int64_t>(std::time(nullptr))}};
    if (template_dir_) metadata["template_snapshot"] = template_dir_->string();
    metadata.update(extra);
    // A snapshot's record must outlive a power loss like its memory file; the others are
    // rewritten at every start.
    write_file_atomic(paths_.metadata, metadata.dump(2) + "\n", 0600,
                      extra.contains("snapshot") ? atomic_file::Durability::power_loss
                                                 : atomic_file::Durability::process_crash);
}

UniqueFd MicrovmSandbox::open_tap_locked() {
    if (!spec_.network) return {};
    if (!spec_.attachment.open_tap)
        throw SpecError("network",
                        "a microVM with a network needs the server's sandbox "
                        "network (attachment.open_tap is not set)");
    try {
        return spec_.attachment.open_tap();
    } catch (const std::exception& e) {
        throw RuntimeError(std::string("cannot attach the microVM's network: ") + e.what());
    }
}

QemuCommandOptions MicrovmSandbox::qemu_command_options_locked(int agent_fd, int qmp_fd,
                                                               int tap_fd) const {
    const auto& options = shared_->options;
    QemuCommandOptions command;
    command.qemu = options.qemu;
    command.name = "deskbox-" + spec_.id;
    command.memory_mb = spec_.limits.memory_mb;
    command.vcpus = microvm_vcpus(spec_.limits.cpus);
    command.accelerator = accelerator_;
    command.tsc_khz = tsc_khz_;
    command.kernel = image_.kernel;
    command.initramfs = image_.initramfs;
    command.extra_kernel_args = options.extra_kernel_args;
    command.console_log = paths_.console_log;
    command.root_disk = paths_.disk;
    command.config_disk = paths_.config;
    if (agent_image_) command.agent_disk = *agent_image_;
    command.agent_fd = agent_fd;
    command.qmp_fd = qmp_fd;
    command.tap_fd = tap_fd;
    for (const auto& volume : spec_.volumes)
        command.volumes.push_back({volume.source, volume.read_only});
    return command;
}

void MicrovmSandbox::spawn_qemu_locked(int incoming_fd) {
    const auto& options = shared_->options;
    UniqueFd agent_listener = listen_unix(paths_.agent_socket);
    UniqueFd qmp_listener = listen_unix(paths_.qmp_socket);
    UniqueFd tap = open_tap_locked();
    command_ = runtime::qemu_command(
        qemu_command_options_locked(agent_listener.get(), qmp_listener.get(), tap.get()));
    if (incoming_fd >= 0) command_.insert(command_.end(), {"-incoming", "defer"});

    SpawnOptions spawn;
    spawn.argv = command_;
    spawn.stdout_file = paths_.qemu_log.string();
    spawn.stderr_file = paths_.qemu_log.string();
    spawn.new_process_group = true;  // our own signals to the server never reach it
    spawn.keep_fds = {agent_listener.get(), qmp_listener.get()};
    if (incoming_fd >= 0) spawn.keep_fds.push_back(incoming_fd);
    if (tap) spawn.keep_fds.push_back(tap.get());
    try {
        qemu_ = QemuProcess::spawn(spawn);
    } catch (const std::system_error& e) {
        throw RuntimeError("cannot run " + options.qemu + ": " + e.what() +
                           " (apt-get install qemu-system-x86)");
    }
    // QEMU has its copies; ours would keep the sockets listening (and the tap up) after QEMU died.
    agent_listener.reset();
    qmp_listener.reset();
    tap.reset();
    write_file_atomic(paths_.pid_file, std::to_string(qemu_.pid()) + "\n", 0600);
    connect_qmp_locked();
}

void MicrovmSandbox::connect_qmp_locked() {
    auto deadline = Clock::now() + shared_->options.start_timeout;
    try {
        qmp_ = QmpClient::connect(paths_.qmp_socket, deadline, [this]() -> std::string {
            if (qemu_.running()) return {};
            auto status = qemu_.status();
            return "QEMU exited with code " + std::to_string(status ? status->exit_code : -1);
        });
    } catch (const RuntimeError& e) {
        // QEMU may be on its way out (an abort after the greeting): let it finish, so the
        // error carries its exit and its last words.
        qemu_.wait(std::chrono::milliseconds(2000));
        if (!qemu_.running()) {
            auto status = qemu_.status();
            std::string cause = trim(read_tail(paths_.qemu_log, 4096));
            throw RuntimeError(
                "QEMU failed to start (" +
                (status && status->signal
                     ? "killed by " + signal_name(status->signal)
                     : "exit code " + std::to_string(status ? status->exit_code : -1)) +
                "): " + (cause.empty() ? "no message" : cause));
        }
        throw RuntimeError(std::string("QEMU did not answer on its control socket: ") + e.what() +
                           "; " + trim(read_tail(paths_.qemu_log, 2048)));
    }
}

std::string MicrovmSandbox::console_lines(std::size_t lines) {
    return console_excerpt(console_tail_locked(16384), lines);
}

std::string MicrovmSandbox::failure_detail() {
    std::string detail = "\n--- last lines of the serial console (" + paths_.console_log.string() +
                         ") ---\n" + console_lines(kConsoleLinesInErrors);
    std::string qemu_said = trim(read_tail(paths_.qemu_log, 1024));
    if (!qemu_said.empty()) detail += "\n--- QEMU ---\n" + qemu_said;
    return detail;
}

// Where each vCPU is (its instruction pointer, and whether it halted), for a guest that never got
// as far as its agent: the rare TCG boot stall leaves a console that just stops, and the
// instruction pointers are what can tell a spin from a wait. Empty if QEMU cannot say.
std::string MicrovmSandbox::vcpu_whereabouts_locked() {
    if (!alive_locked()) return {};
    try {
        const std::string dump =
            qmp_.execute("human-monitor-command", {{"command-line", "info registers -a"}})
                .get<std::string>();
        std::string out;
        std::istringstream lines(dump);
        for (std::string line; std::getline(lines, line);) {
            // RIP in long mode; EIP before it (early boot, or a CPU not started yet).
            auto ip = line.find("RIP=");
            if (ip == std::string::npos) ip = line.find("EIP=");
            if (line.rfind("CPU#", 0) == 0)
                out += "\n  " + line.substr(0, 100);
            else if (ip != std::string::npos)
                out += "\n  " + line.substr(ip, 100);
            else if (auto hlt = line.find("HLT="); hlt != std::string::npos)
                out += " " + line.substr(hlt, 5);
        }
        return out.empty() ? out : "\n--- vCPUs (QEMU's info registers) ---" + out;
    } catch (const std::exception&) {
        return {};
    }
}

ExitInfo MicrovmSandbox::describe_exit_locked() {
    return classify_vm_exit({kill_requested_, qemu_.status(), qemu_.adopted(),
                             read_tail(paths_.console_log, 65536),
                             trim(read_tail(paths_.qemu_log, 512))});
}

json MicrovmSandbox::qmp(const std::string& command, const json& arguments) {
    std::lock_guard lock(mutex_);
    if (!alive_locked()) throw RuntimeError("sandbox " + spec_.id + " is not running");
    return qmp_.execute(command, arguments);
}

void MicrovmSandbox::set_network_attachment(NetworkAttachment attachment) {
    std::lock_guard lock(mutex_);
    spec_.attachment = std::move(attachment);
}

void MicrovmSandbox::pause() {
    std::lock_guard lock(mutex_);
    require_running_locked("pause");
    if (paused_) return;
    qmp_.execute("stop");
    paused_ = true;
}

void MicrovmSandbox::resume() {
    std::lock_guard lock(mutex_);
    require_running_locked("resume");
    if (!paused_) return;
    qmp_.execute("cont");
    paused_ = false;
}

ResourceUsage MicrovmSandbox::usage() {
    ResourceUsage u;
    u.memory_max_bytes = spec_.limits.memory_mb << 20;
    struct stat st {};
    if (::stat(paths_.disk.c_str(), &st) == 0) {
        u.disk_bytes = static_cast<std::uint64_t>(st.st_blocks) * 512;
        if (spec_.limits.disk_mb > 0) u.disk_max_bytes = spec_.limits.disk_mb << 20;
    }
    std::lock_guard lock(mutex_);
    if (snapshotted_ || torn_down_ || !qemu_.running()) return u;
    if (auto process = read_process_cpu_memory(qemu_.pid())) {
        u.cpu_ns = process->cpu_ns;
        u.memory_resident_bytes = process->resident_bytes;
        u.memory_bytes = process->resident_bytes;
    }
    return u;
}

bool MicrovmSandbox::release() {
    std::lock_guard lock(mutex_);
    if (torn_down_ || snapshotted_ || !alive_locked()) return false;
    qmp_.close();  // its QMP socket listens again, for the next server
    qemu_.release();
    torn_down_ = true;  // the destructor leaves QEMU and the files alone
    shared_->live.erase(spec_.state_root, spec_.id);
    return true;
}

UniqueFd MicrovmSandbox::adopted_network_namespace() {
    std::lock_guard lock(mutex_);
    const std::string what = "cannot find the network of sandbox " + spec_.id + ": ";
    if (!spec_.network) return {};
    if (!alive_locked()) throw RuntimeError(what + "it is not running");
    // Its command line names the tap's fd number in QEMU: -netdev tap,id=net0,fd=N.
    int tap_number = -1;
    for (std::size_t i = 0; i + 1 < command_.size(); ++i)
        if (command_[i] == "-netdev" && command_[i + 1].rfind("tap,", 0) == 0)
            if (auto at = command_[i + 1].find(",fd="); at != std::string::npos)
                tap_number = std::atoi(command_[i + 1].c_str() + at + 4);
    if (tap_number < 0) throw RuntimeError(what + "QEMU's command line has no tap device");
    UniqueFd pidfd = qemu_.open_pidfd();
    if (!pidfd) throw RuntimeError(what + "pidfd_open: " + std::strerror(errno));
    UniqueFd tap(static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.get(), tap_number, 0)));
    if (!tap) throw RuntimeError(what + "pidfd_getfd of QEMU's tap: " + std::strerror(errno));
    UniqueFd netns(::ioctl(tap.get(), TUNGETDEVNETNS));
    if (!netns) throw RuntimeError(what + "TUNGETDEVNETNS: " + std::strerror(errno));
    return netns;
}

void MicrovmSandbox::do_kill(const KillOptions& options) {
    std::lock_guard lock(mutex_);
    if (torn_down_) return;
    const auto& runtime_options = shared_->options;
    if (snapshotted_ && !exit_) kill_requested_ = true;
    if (qemu_.running()) {
        if (!exit_) kill_requested_ = true;
        // quit lets QEMU close its files cleanly (a kept disk.qcow2 stays consistent);
        // SIGKILL is the fallback for a QEMU that no longer answers.
        bool asked = false;
        if (qmp_.connected()) {
            try {
                qmp_.execute("quit", json::object(), 2s);
                asked = true;
            } catch (const std::exception&) {
                // QEMU may close the socket before answering; the wait below tells.
                asked = true;
            }
        }
        if (!asked || !qemu_.wait(runtime_options.stop_timeout)) {
            qemu_.signal(SIGKILL);
            qemu_.wait();
        }
    }
    qmp_.close();
    finish_kill_locked([&] {
        teardown(spec_.state_root, spec_.id, options.keep_state, runtime_options.stop_timeout);
    });
    shared_->live.erase(spec_.state_root, spec_.id);
}

}  // namespace deskbox::runtime
