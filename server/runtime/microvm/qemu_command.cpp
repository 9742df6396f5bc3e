#include "server/runtime/microvm/qemu_command.hpp"

#include <algorithm>
#include <cmath>

namespace deskbox::runtime {

namespace fs = std::filesystem;

std::string qemu_escape(const std::string& value) {
    std::string out;
    for (char c : value) {
        out += c;
        if (c == ',') out += ',';
    }
    return out;
}

std::vector<std::string> build_qemu_command(const MicrovmRuntimeOptions& options,
                                            const SandboxSpec& spec, const MicrovmPaths& paths,
                                            const MicrovmImage& image,
                                            const std::optional<fs::path>& agent_image,
                                            Accelerator accel, std::uint64_t tsc_khz, int agent_fd,
                                            int qmp_fd, int tap_fd) {
    int vcpus = std::max(1, static_cast<int>(std::ceil(spec.limits.cpus - 1e-9)));
    std::string kernel_args = "console=ttyS0 panic=-1 quiet 8250.nr_uarts=1";
    if (accel == Accelerator::tcg) {
        // TCG guests read the host's TSC, whose rate the kernel cannot calibrate against the
        // emulated PIT (it then hangs without a clock); the TSCs of vCPU threads agree.
        if (tsc_khz > 0) kernel_args += " tsc_early_khz=" + std::to_string(tsc_khz);
        kernel_args += " tsc=reliable";
    }
    if (!options.extra_kernel_args.empty()) kernel_args += " " + options.extra_kernel_args;

    std::vector<std::string> argv = {
        options.qemu,
        "-name",
        qemu_escape("deskbox-" + spec.id),
        "-M",
        "microvm,acpi=on,rtc=on,isa-serial=on",
        "-nodefaults",
        "-no-user-config",
        "-nographic",
        "-no-reboot",
        "-sandbox",
        "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
        "-m",
        std::to_string(spec.limits.memory_mb),
        "-smp",
        std::to_string(vcpus),
        "-kernel",
        qemu_escape(image.kernel.string()),
        "-initrd",
        qemu_escape(image.initramfs.string()),
        "-append",
        kernel_args,
        "-chardev",
        "file,id=console,path=" + qemu_escape(paths.console_log.string()),
        "-serial",
        "chardev:console",
        "-drive",
        "id=root,if=none,format=qcow2,discard=unmap,file=" + qemu_escape(paths.disk.string()),
        "-device",
        "virtio-blk-device,drive=root,serial=deskbox-root",
        "-drive",
        "id=config,if=none,format=raw,readonly=on,file=" + qemu_escape(paths.config.string()),
        "-device",
        "virtio-blk-device,drive=config,serial=deskbox-config",
        "-device",
        "virtio-serial-device,max_ports=2",
        "-chardev",
        "socket,id=agent,server=on,wait=off,fd=" + std::to_string(agent_fd),
        "-device",
        "virtserialport,chardev=agent,name=deskbox.agent",
        "-chardev",
        "socket,id=qmp,server=on,wait=off,fd=" + std::to_string(qmp_fd),
        "-mon",
        "chardev=qmp,mode=control",
        "-device",
        "virtio-rng-device",
    };
    if (accel == Accelerator::kvm) {
        argv.insert(argv.end(), {"-accel", "kvm", "-cpu", "host"});
    } else {
        argv.insert(argv.end(), {"-accel", "tcg,thread=multi", "-cpu", "max"});
    }
    if (agent_image) {
        argv.insert(argv.end(), {"-drive",
                                 "id=agent,if=none,format=raw,readonly=on,file=" +
                                     qemu_escape(agent_image->string()),
                                 "-device", "virtio-blk-device,drive=agent,serial=deskbox-agent"});
    }
    if (tap_fd >= 0) {
        // A tap in the sandbox's router namespace (server/network): the egress proxy decides
        // what the guest reaches. No user-mode networking: its gateway is the host itself.
        argv.insert(argv.end(), {"-netdev", "tap,id=net0,fd=" + std::to_string(tap_fd), "-device",
                                 "virtio-net-device,netdev=net0"});
    }
    return argv;
}

}  // namespace deskbox::runtime
