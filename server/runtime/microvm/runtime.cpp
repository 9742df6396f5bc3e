#include "server/runtime/microvm/runtime.hpp"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "server/runtime/microvm/derived_image.hpp"
#include "server/runtime/microvm/runtime_state.hpp"
#include "server/runtime/runtime_util.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kMinMemoryMb = 256;

std::string template_name(const fs::path& template_rootfs) {
    std::ifstream in(template_rootfs / "etc/deskbox/template.json");
    if (in) {
        auto record = json::parse(in, nullptr, false);
        if (record.is_object() && record.contains("name") && record["name"].is_string())
            return record["name"].get<std::string>();
    }
    // <name>-<hash16>/rootfs
    std::string dir = template_rootfs.lexically_normal().parent_path().filename().string();
    auto dash = dir.rfind('-');
    return dash == std::string::npos ? dir : dir.substr(0, dash);
}

}  // namespace

MicrovmRuntime::MicrovmRuntime(MicrovmRuntimeOptions options)
    : shared_(std::make_shared<MicrovmSandbox::Shared>()) {
    if (options.qemu.empty()) throw SpecError("qemu", "must name the QEMU program");
    if (options.qemu_img.empty()) throw SpecError("qemu_img", "must name the qemu-img program");
    if (options.mkfs_ext4.empty()) throw SpecError("mkfs_ext4", "must name mkfs.ext4");
    if (!options.image_dir.empty() && !options.image_dir.is_absolute())
        throw SpecError("image_dir", "must be an absolute path");
    shared_->options = std::move(options);
}

MicrovmRuntime::~MicrovmRuntime() = default;

std::chrono::milliseconds MicrovmRuntime::boot_timeout(std::chrono::milliseconds configured) const {
    return std::max(configured, std::chrono::milliseconds(180000));
}

const MicrovmRuntimeOptions& MicrovmRuntime::options() const {
    return shared_->options;
}

AcceleratorChoice MicrovmRuntime::accelerator() {
    const auto& options = shared_->options;
    if (options.accelerator != Accelerator::auto_select) {
        AcceleratorChoice fixed;
        fixed.accelerator = options.accelerator;
        fixed.reason = "configured";
        return fixed;
    }
    // The probe runs at most once per runtime, outside the mutex (it takes up to ~10 s in
    // the worst case); two racing first starts may both probe, which is harmless.
    {
        std::lock_guard lock(shared_->mutex);
        if (shared_->accelerator) return *shared_->accelerator;
    }
    auto choice = probe_accelerator(options.qemu);
    std::lock_guard lock(shared_->mutex);
    if (!shared_->accelerator) shared_->accelerator = choice;
    return *shared_->accelerator;
}

MicrovmImage MicrovmRuntime::image_for(const fs::path& template_rootfs) const {
    MicrovmImage image;
    image.dir = shared_->options.image_dir.empty()
                    ? template_rootfs.lexically_normal().parent_path() / "microvm"
                    : shared_->options.image_dir;
    image.kernel = image.dir / "vmlinuz";
    image.initramfs = image.dir / "initramfs.img";
    image.rootfs = image.dir / "rootfs.ext4";
    std::string missing;
    std::error_code ec;
    for (const auto& file : {image.kernel, image.initramfs, image.rootfs})
        if (!fs::is_regular_file(file, ec))
            missing += (missing.empty() ? "" : ", ") + file.filename().string();
    if (missing.empty()) return image;
    const bool derived = shared_->options.image_dir.empty() && is_derived_template(template_rootfs);
    // A derived image is made from the rootfs at its first start (made_image_for), with its
    // base's kernel.
    if (derived && derived_boot_dir(template_rootfs)) return image;
    std::string name = template_name(template_rootfs);
    std::string command = kMicrovmBuildCommand;
    command.replace(command.find("TEMPLATE"), 8, derived ? "minimal" : name);
    if (derived)
        throw RuntimeError("template '" + name +
                           "' stands on no deskbox template whose microVM image is built (that "
                           "kernel boots it); build its base's image, e.g.: " +
                           command);
    throw RuntimeError("the microVM image of template '" + name + "' is not built (" + missing +
                       " missing in " + image.dir.string() + "); build it with: " + command);
}

MicrovmImage MicrovmRuntime::made_image_for(const fs::path& template_rootfs) {
    MicrovmImage image = image_for(template_rootfs);
    std::error_code ec;
    if (fs::is_regular_file(image.rootfs, ec)) return image;
    std::lock_guard making(shared_->image_making);
    if (fs::is_regular_file(image.rootfs, ec)) return image;
    auto boot = derived_boot_dir(template_rootfs);
    if (!boot) return image_for(template_rootfs);  // its base went meanwhile: throws
    auto made = make_derived_image(template_rootfs, *boot, shared_->options.mkfs_ext4);
    std::fprintf(stderr, "deskboxd: made the microVM image %s in %.1f s\n", made.dir.c_str(),
                 made.seconds);
    return image_for(template_rootfs);
}

std::unique_ptr<SandboxInstance> MicrovmRuntime::start(const SandboxSpec& spec) {
    return start_microvm(spec);
}

std::unique_ptr<MicrovmSandbox> MicrovmRuntime::start_microvm(const SandboxSpec& spec) {
    auto sandbox = prepare(spec);
    sandbox->launch();
    return sandbox;
}

std::unique_ptr<MicrovmSandbox> MicrovmRuntime::prepare(const SandboxSpec& spec) {
    validate_spec(spec);
    if (!spec.template_rootfs.is_absolute())
        throw SpecError("template_rootfs", "must be an absolute path");
    if (!spec.agent_dir.empty() && !spec.agent_dir.is_absolute())
        throw SpecError("agent_dir", "must be an absolute path");
    std::error_code ec;
    if (!spec.agent_dir.empty() && !fs::is_directory(spec.agent_dir, ec))
        throw SpecError("agent_dir", "'" + spec.agent_dir.string() + "' is not a directory");
    if (spec.limits.memory_mb < kMinMemoryMb)
        throw SpecError("limits.memory_mb", std::to_string(spec.limits.memory_mb) +
                                                " MiB is too little for a microVM (at least " +
                                                std::to_string(kMinMemoryMb) + ")");
    // The init hands "$@" (K=V... then the entry) to env(1), which takes the first word
    // without '=' as the program.
    if (spec.entry[0].find('=') != std::string::npos)
        throw SpecError("entry[0]", "must not contain '=' in a microVM");
    MicrovmImage image = made_image_for(spec.template_rootfs);
    Accelerator accel = accelerator().accelerator;

    if (shared_->live.contains(spec.state_root, spec.id))
        throw SpecError("id", "sandbox '" + spec.id + "' already runs in this state root");
    make_new_sandbox_dir(spec.state_root, spec.id);
    // From here on the sandbox owns the directory: its destructor removes it and whatever
    // launch() managed to create when launch() throws.
    auto sandbox = std::make_unique<MicrovmSandbox>(MicrovmSandbox::Key(), shared_, spec,
                                                    std::move(image), accel);
    shared_->live.insert(spec.state_root, spec.id);
    return sandbox;
}

}  // namespace deskbox::runtime
