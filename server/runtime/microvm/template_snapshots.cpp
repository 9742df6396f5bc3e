#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>

#include "common/atomic_file.hpp"
#include "common/random.hpp"
#include "server/runtime/content_hash.hpp"
#include "server/runtime/guest_env.hpp"
#include "server/runtime/microvm/derived_image.hpp"
#include "server/runtime/microvm/guest_config.hpp"
#include "server/runtime/microvm/qemu_command.hpp"
#include "server/runtime/microvm/runtime.hpp"
#include "server/runtime/microvm/runtime_state.hpp"
#include "server/runtime/runtime_util.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

void MicrovmSandbox::launch_from_template(const fs::path& template_dir) {
    const auto& options = shared_->options;
    json record = read_json_file(template_dir / "snapshot.json");
    tsc_khz_ = record.value("tsc_khz", std::uint64_t{0});
    template_dir_ = template_dir;
    // Hard links make the sandbox stand on its own: a template snapshot removed later (stale,
    // unusable) must not take the base of a running or saved copy's disk with it. The guest
    // has the template's agent disk mounted, so it gets that very image back.
    fs::path base = paths_.dir / "base.qcow2";
    link_or_copy(template_dir / "disk.qcow2", base);
    std::error_code ec;
    if (fs::exists(template_dir / "agent.img", ec)) {
        link_or_copy(template_dir / "agent.img", paths_.dir / "agent.img");
        agent_image_ = paths_.dir / "agent.img";
    } else {
        agent_image_.reset();
    }
    write_metadata_locked(json::object());
    check_tool(run_tool({options.qemu_img, "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b",
                         base.string(), paths_.disk.string()},
                        options.stop_timeout, "qemu-utils"),
               "qemu-img create " + paths_.disk.string());
    // Read at boot only, which the template did; the device must still be there.
    write_file_atomic(paths_.config, guest_config(spec_), 0600);
    std::lock_guard lock(mutex_);
    restore_locked(template_dir / "memory", /*consume=*/false);
    // The template's agent was connected before its save; it waits for a new host.
    agent_connected_before_ = true;
}

std::string MicrovmRuntime::template_generation(const SandboxSpec& spec,
                                                const MicrovmImage& image) {
    Fnv64 hash;
    for (const auto& file : {image.kernel, image.initramfs, image.rootfs})
        hash.add(file_version(file));
    // A snapshot loads only into the QEMU that saved it (same version, same devices).
    std::string qemu = shared_->options.qemu;
    if (qemu.find('/') == std::string::npos) {
        std::lock_guard lock(shared_->mutex);
        if (shared_->qemu_path.empty())
            shared_->qemu_path =
                trim(run_tool({"sh", "-c", "command -v " + shell_quote(qemu)}, 5s, "sh").out);
        qemu = shared_->qemu_path;
    }
    hash.add(file_version(qemu));
    if (!spec.agent_dir.empty())
        hash.add(shared_->agent_image(spec.state_root, spec.agent_dir).filename().string());
    return hash.hex();
}

std::string MicrovmRuntime::template_key(const SandboxSpec& spec, const MicrovmImage& image,
                                         Accelerator accel) {
    const auto& options = shared_->options;
    Fnv64 hash;
    hash.add("deskbox template snapshot v1");
    hash.add(template_generation(spec, image));
    hash.add(to_string(accel));
    hash.add(std::to_string(accel == Accelerator::tcg ? shared_->tsc_khz_cached() : 0));
    hash.add(options.extra_kernel_args);
    hash.add(std::to_string(spec.limits.memory_mb));
    hash.add(std::to_string(microvm_vcpus(spec.limits.cpus)));
    hash.add(spec.network ? "network" : "no network");
    hash.add(std::to_string(spec.uid) + ':' + std::to_string(spec.gid));
    for (const auto& arg : spec.entry) hash.add(arg);
    // The guest's environment, except what names the sandbox (the host gives it afterwards).
    auto env = default_guest_env(spec);
    for (const auto& [key, value] : spec.env) env[key] = value;
    env.erase("DESKBOX_SANDBOX_ID");
    for (const auto& [key, value] : env) hash.add(key + '=' + value);
    return hash.hex();
}

fs::path MicrovmRuntime::template_snapshots_root(const fs::path& state_root,
                                                 const fs::path& template_rootfs,
                                                 const MicrovmImage& image) const {
    if (shared_->options.image_dir.empty() && is_derived_template(template_rootfs))
        return image.dir / "snapshots";
    return state_root / "microvm" / "templates";
}

fs::path MicrovmRuntime::template_snapshot_dir(const SandboxSpec& spec) {
    validate_spec(spec);
    MicrovmImage image = made_image_for(spec.template_rootfs);
    Accelerator accel = accelerator().accelerator;
    return template_snapshots_root(spec.state_root, spec.template_rootfs, image) /
           template_key(spec, image, accel);
}

bool MicrovmRuntime::template_snapshot_complete(const fs::path& dir) {
    std::error_code ec;
    for (const char* name : {"snapshot.json", "memory", "disk.qcow2"})
        if (!fs::is_regular_file(dir / name, ec)) return false;
    return true;
}

bool MicrovmRuntime::has_template_snapshot(const fs::path& state_root,
                                           const fs::path& template_rootfs) {
    fs::path root = state_root / "microvm" / "templates";
    try {
        root = template_snapshots_root(state_root, template_rootfs, image_for(template_rootfs));
    } catch (const RuntimeError&) {
        return false;  // no image, so no snapshot either
    }
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(root, ec)) {
        if (!template_snapshot_complete(entry.path())) continue;
        try {
            std::ifstream in(entry.path() / "snapshot.json");
            if (json::parse(in).value("template_rootfs", "") == template_rootfs.string())
                return true;
        } catch (const json::exception&) {
            // A damaged record: that snapshot is not usable for this template.
        }
    }
    return false;
}

fs::path MicrovmRuntime::ensure_template_snapshot(
    const SandboxSpec& spec, const std::function<void(MicrovmSandbox&)>& ready) {
    fs::path dir = template_snapshot_dir(spec);
    if (template_snapshot_complete(dir)) return dir;
    std::shared_ptr<std::mutex> maker;
    {
        std::lock_guard lock(shared_->mutex);
        auto& slot = shared_->template_makers[dir.string()];
        if (!slot) slot = std::make_shared<std::mutex>();
        maker = slot;
    }
    std::lock_guard making(*maker);
    if (template_snapshot_complete(dir)) return dir;

    SandboxSpec throwaway = spec;
    throwaway.id = "template-" + dir.filename().string().substr(0, 12) + "-" + random::hex(3);
    throwaway.hostname = "deskbox";
    fs::path temp = dir.parent_path() / ("." + dir.filename().string() + "." + random::hex(3));
    std::error_code ec;
    try {
        auto sandbox = start_microvm(throwaway);
        ready(*sandbox);
        sandbox->snapshot();
        fs::create_directories(temp);
        const auto& paths = sandbox->paths();
        fs::rename(paths.memory, temp / "memory");
        fs::rename(paths.disk, temp / "disk.qcow2");
        if (sandbox->agent_image_) link_or_copy(*sandbox->agent_image_, temp / "agent.img");
        // Restores only ever read these.
        for (const char* name : {"memory", "disk.qcow2", "agent.img"})
            ::chmod((temp / name).c_str(), 0444);
        json record = {{"key", dir.filename().string()},
                       {"template_rootfs", spec.template_rootfs.string()},
                       {"generation", template_generation(spec, image_for(spec.template_rootfs))},
                       {"memory_mb", spec.limits.memory_mb},
                       {"accelerator", to_string(sandbox->accelerator())},
                       {"tsc_khz", sandbox->tsc_khz_},
                       {"memory_bytes", file_size_or_zero(temp / "memory")},
                       {"saved_unix", static_cast<std::int64_t>(std::time(nullptr))}};
        write_file_atomic(temp / "snapshot.json", record.dump(2) + "\n", 0644,
                          atomic_file::Durability::power_loss);
        atomic_file::sync_with_directory(temp / "disk.qcow2");
        sandbox->kill();
        fs::remove_all(dir, ec);
        fs::rename(temp, dir);
        prune_template_snapshots(dir, record);
    } catch (const std::exception& e) {
        fs::remove_all(temp, ec);
        throw RuntimeError("cannot make the template snapshot " + dir.string() + ": " + e.what());
    }
    return dir;
}

void MicrovmRuntime::prune_template_snapshots(const fs::path& made, const json& record) {
    // Snapshots of the same template from an older image, QEMU or agent are never loaded
    // again. Copies restored from them hard-linked what they need, so removing is safe.
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(made.parent_path(), ec)) {
        if (entry.path() == made || entry.path().filename().string().rfind('.', 0) == 0) continue;
        std::ifstream in(entry.path() / "snapshot.json");
        auto other = json::parse(in, nullptr, false);
        if (!other.is_object() || other.value("template_rootfs", "") != record["template_rootfs"])
            continue;
        if (other.value("generation", "") != record["generation"]) fs::remove_all(entry.path(), ec);
    }
}

std::unique_ptr<MicrovmSandbox> MicrovmRuntime::start_from_template(const SandboxSpec& spec,
                                                                    const fs::path& dir) {
    if (!template_snapshot_complete(dir))
        throw RuntimeError("no template snapshot in " + dir.string());
    auto sandbox = prepare(spec);
    sandbox->launch_from_template(dir);
    return sandbox;
}

std::string MicrovmRuntime::copy_spec_problem(const SandboxSpec& spec, const fs::path& dir) {
    if (!spec.volumes.empty())
        return "a microVM started from a saved one has the disks it was saved with, so no "
               "volumes: create it without them";
    if (!template_snapshot_complete(dir))
        return "'" + dir.string() + "' holds no saved microVM (memory, disk, snapshot.json)";
    json record;
    try {
        record = read_json_file(dir / "snapshot.json");
    } catch (const RuntimeError& e) {
        return e.what();
    }
    auto differs = [&](const char* key, const json& want) -> std::string {
        if (record.value(key, json()) == want) return {};
        return std::string("the saved machine has ") + key + " " +
               record.value(key, json()).dump() + ", this sandbox " + want.dump();
    };
    for (const auto& problem :
         {differs("template_rootfs", spec.template_rootfs.string()),
          differs("memory_mb", spec.limits.memory_mb),
          differs("vcpus", microvm_vcpus(spec.limits.cpus)), differs("network", spec.network),
          differs("accelerator", to_string(accelerator().accelerator))})
        if (!problem.empty()) return problem;
    return {};
}

std::unique_ptr<SandboxInstance> MicrovmRuntime::start_from_copy(const SandboxSpec& spec,
                                                                 const fs::path& dir) {
    validate_spec(spec);
    if (auto problem = copy_spec_problem(spec, dir); !problem.empty())
        throw SpecError("copy", problem);
    return start_from_template(spec, dir);
}

std::size_t MicrovmRuntime::remove_template_snapshots(const fs::path& state_root) {
    std::size_t removed = 0;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(state_root / "microvm" / "templates", ec)) {
        fs::remove_all(entry.path(), ec);
        ++removed;
    }
    return removed;
}

}  // namespace deskbox::runtime
