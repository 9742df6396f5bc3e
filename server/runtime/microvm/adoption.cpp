// What a MicrovmRuntime finds of earlier servers' sandboxes: leftovers to clean, snapshots
// and running VMs to adopt.
#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "server/runtime/microvm/runtime.hpp"
#include "server/runtime/microvm/runtime_state.hpp"
#include "server/runtime/runtime_util.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::vector<std::string> MicrovmRuntime::unowned(const fs::path& state_root, bool saved) {
    std::vector<std::string> found;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(state_root / "sandboxes", ec)) {
        if (!entry.is_directory(ec)) continue;
        // Only directories that say they are ours: one without sandbox.json is the container
        // runtime's to clean (it claims those).
        std::ifstream in(entry.path() / "sandbox.json");
        if (!in) continue;
        auto metadata = json::parse(in, nullptr, false);
        if (!metadata.is_object() || metadata.value("runtime", "") != kMicrovmRuntimeName) continue;
        // Saved sandboxes wait for a server to adopt them; the rest are leftovers.
        bool is_saved = metadata.contains("snapshot") && fs::exists(entry.path() / "memory", ec);
        if (is_saved != saved) continue;
        std::string id = entry.path().filename().string();
        try {
            validate_id(id);
        } catch (const SpecError&) {
            continue;
        }
        if (!shared_->live.contains(state_root, id)) found.push_back(id);
    }
    std::sort(found.begin(), found.end());
    return found;
}

std::vector<std::string> MicrovmRuntime::list_leftovers(const fs::path& state_root) {
    return unowned(state_root, /*saved=*/false);
}

void MicrovmRuntime::cleanup_leftover(const fs::path& state_root, const std::string& id) {
    validate_id(id);
    if (shared_->live.contains(state_root, id))
        throw RuntimeError("sandbox " + id + " is live in this server; kill it instead");
    teardown(state_root, id, /*keep_state=*/false, shared_->options.stop_timeout);
}

std::vector<std::string> MicrovmRuntime::residue(const fs::path& state_root,
                                                 const std::string& id) const {
    return residue_of(state_root, id, true);
}

std::vector<std::string> MicrovmRuntime::list_snapshotted(const fs::path& state_root) {
    return unowned(state_root, /*saved=*/true);
}

// What a server left of sandbox `id` for the next one: its spec, image and sandbox, built
// from sandbox.json and registered as live (a throw after that tears it down). `saved`: a
// snapshot, else a running VM. Throws RuntimeError starting with `what`.
std::unique_ptr<MicrovmSandbox> MicrovmRuntime::adoptable(const fs::path& state_root,
                                                          const std::string& id, bool saved,
                                                          const std::string& what) {
    validate_id(id);
    MicrovmPaths paths(state_root, id);
    json metadata;
    SandboxSpec spec;
    try {
        metadata = read_json_file(paths.metadata);
        if (metadata.value("runtime", "") != kMicrovmRuntimeName ||
            metadata.contains("snapshot") != saved)
            throw RuntimeError(paths.metadata.string() + " is not a " +
                               (saved ? "saved" : "running") + " microVM sandbox");
        spec = spec_from_json(metadata.at("spec"));
    } catch (const json::exception& e) {
        throw RuntimeError(what + paths.metadata.string() + ": " + e.what());
    } catch (const RuntimeError& e) {
        throw RuntimeError(what + e.what());
    }
    spec.id = id;
    spec.state_root = state_root;
    MicrovmImage image;
    image.dir = metadata.value("image_dir", "");
    image.kernel = image.dir / "vmlinuz";
    image.initramfs = image.dir / "initramfs.img";
    image.rootfs = image.dir / "rootfs.ext4";
    Accelerator accel = parse_accelerator(metadata.value("accelerator", "tcg"));
    if (!shared_->live.insert(state_root, id))
        throw RuntimeError(what + "it is live in this server");
    auto sandbox = std::make_unique<MicrovmSandbox>(MicrovmSandbox::Key(), shared_, spec,
                                                    std::move(image), accel);
    sandbox->agent_connected_before_ = true;
    sandbox->tsc_khz_ = metadata.value("tsc_khz", std::uint64_t{0});
    std::string agent_image = metadata.value("agent_image", "");
    if (!agent_image.empty()) sandbox->agent_image_ = agent_image;
    std::string template_dir = metadata.value("template_snapshot", "");
    if (!template_dir.empty()) sandbox->template_dir_ = template_dir;
    return sandbox;
}

std::unique_ptr<MicrovmSandbox> MicrovmRuntime::adopt_snapshot(const fs::path& state_root,
                                                               const std::string& id) {
    const std::string what = "cannot adopt the snapshot of sandbox " + id + ": ";
    MicrovmPaths paths(state_root, id);
    std::error_code ec;
    if (!fs::is_regular_file(paths.memory, ec))
        throw RuntimeError(what + "no memory file " + paths.memory.string());
    auto sandbox = adoptable(state_root, id, /*saved=*/true, what);
    sandbox->snapshotted_ = true;
    return sandbox;
}

std::vector<std::string> MicrovmRuntime::list_running(const fs::path& state_root) {
    std::vector<std::string> running;
    for (const auto& id : unowned(state_root, /*saved=*/false)) {
        MicrovmPaths paths(state_root, id);
        if (is_our_qemu(read_pid_file(paths.pid_file), paths.dir)) running.push_back(id);
    }
    return running;
}

std::unique_ptr<MicrovmSandbox> MicrovmRuntime::adopt_running(const fs::path& state_root,
                                                              const std::string& id) {
    const std::string what = "cannot adopt the running microVM " + id + ": ";
    MicrovmPaths paths(state_root, id);
    const pid_t pid = read_pid_file(paths.pid_file);
    if (!is_our_qemu(pid, paths.dir)) throw RuntimeError(what + "its QEMU is not running");
    auto sandbox = adoptable(state_root, id, /*saved=*/false, what);
    // From here a throw destroys `sandbox`, which kills that QEMU: a VM we cannot drive is
    // broken, and is removed like any leftover.
    try {
        sandbox->qemu_ = QemuProcess::adopt(pid);
        // The pid was checked before the pidfd pinned it: check that it is still the same one.
        if (!is_our_qemu(pid, paths.dir)) throw RuntimeError("its QEMU ended");
        std::ifstream cmdline("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
        for (std::string arg; std::getline(cmdline, arg, '\0');) sandbox->command_.push_back(arg);
        std::error_code ec;
        if (!fs::exists(fs::symlink_status(paths.qmp_socket, ec)))
            throw RuntimeError("its QMP socket " + paths.qmp_socket.string() + " is gone");
        std::lock_guard lock(sandbox->mutex_);
        // A live QEMU answers at once; one that does not is not waited for long.
        auto deadline =
            Clock::now() + std::min<std::chrono::milliseconds>(shared_->options.start_timeout, 5s);
        MicrovmSandbox* vm = sandbox.get();
        sandbox->qmp_ = QmpClient::connect(paths.qmp_socket, deadline, [vm]() -> std::string {
            return vm->qemu_.running() ? std::string() : std::string("QEMU ended");
        });
        const std::string status = sandbox->qmp_.execute("query-status").value("status", "");
        if (status == "paused")
            sandbox->paused_ = true;
        else if (status != "running")
            throw RuntimeError("the VM is " + status + " (" +
                               console_excerpt(read_tail(paths.console_log, 4096), 3) + ")");
    } catch (const std::exception& e) {
        throw RuntimeError(what + e.what());
    }
    return sandbox;
}

}  // namespace deskbox::runtime
