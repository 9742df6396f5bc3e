#include "server/runtime/microvm/qemu_command.hpp"

#include <algorithm>
#include <cmath>

namespace deskbox::runtime {

namespace {

std::string kernel_command_line(const QemuCommandOptions& options) {
    std::string args = "console=ttyS0 panic=-1 quiet 8250.nr_uarts=1";
    if (options.accelerator == Accelerator::tcg) {
        // TCG guests read the host's TSC, whose rate the kernel cannot calibrate against the
        // emulated PIT (it then hangs without a clock); the TSCs of vCPU threads agree.
        if (options.tsc_khz > 0) args += " tsc_early_khz=" + std::to_string(options.tsc_khz);
        args += " tsc=reliable";
    }
    if (!options.extra_kernel_args.empty()) args += " " + options.extra_kernel_args;
    return args;
}

void add(std::vector<std::string>& argv, std::initializer_list<std::string> args) {
    argv.insert(argv.end(), args);
}

// A virtio disk told apart in the guest by its serial number, not by its order.
void add_disk(std::vector<std::string>& argv, const std::string& id, const std::string& format,
              const std::filesystem::path& file, bool read_only) {
    std::string drive = "id=" + id + ",if=none,format=" + format;
    drive += read_only ? ",readonly=on" : ",discard=unmap";
    add(argv, {"-drive", drive + ",file=" + qemu_escape(file.string()), "-device",
               "virtio-blk-device,drive=" + id + ",serial=deskbox-" + id});
}

}  // namespace

std::string qemu_escape(const std::string& value) {
    std::string out;
    for (char c : value) {
        out += c;
        if (c == ',') out += ',';
    }
    return out;
}

int microvm_vcpus(double cpus) {
    return std::max(1, static_cast<int>(std::ceil(cpus - 1e-9)));
}

std::vector<std::string> qemu_command(const QemuCommandOptions& options) {
    std::vector<std::string> argv = {options.qemu};
    if (!options.name.empty()) add(argv, {"-name", qemu_escape(options.name)});
    add(argv, {"-M", "microvm,acpi=on,rtc=on,isa-serial=on", "-nodefaults", "-no-user-config",
               "-nographic", "-no-reboot", "-sandbox",
               "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny", "-m",
               std::to_string(options.memory_mb), "-smp", std::to_string(options.vcpus), "-kernel",
               qemu_escape(options.kernel.string()), "-initrd",
               qemu_escape(options.initramfs.string()), "-append", kernel_command_line(options)});
    if (options.console_log.empty())
        add(argv, {"-serial", "stdio"});
    else
        add(argv, {"-chardev", "file,id=console,path=" + qemu_escape(options.console_log.string()),
                   "-serial", "chardev:console"});
    if (!options.root_disk.empty()) add_disk(argv, "root", "qcow2", options.root_disk, false);
    if (!options.config_disk.empty()) add_disk(argv, "config", "raw", options.config_disk, true);
    if (options.agent_fd >= 0)
        add(argv, {"-device", "virtio-serial-device,max_ports=2", "-chardev",
                   "socket,id=agent,server=on,wait=off,fd=" + std::to_string(options.agent_fd),
                   "-device", "virtserialport,chardev=agent,name=deskbox.agent"});
    if (options.qmp_fd >= 0)
        add(argv,
            {"-chardev", "socket,id=qmp,server=on,wait=off,fd=" + std::to_string(options.qmp_fd),
             "-mon", "chardev=qmp,mode=control"});
    add(argv, {"-device", "virtio-rng-device"});
    if (options.accelerator == Accelerator::kvm)
        add(argv, {"-accel", "kvm", "-cpu", "host"});
    else
        add(argv, {"-accel", "tcg,thread=multi", "-cpu", "max"});
    if (!options.agent_disk.empty()) add_disk(argv, "agent", "raw", options.agent_disk, true);
    if (options.tap_fd >= 0) {
        // A tap in the sandbox's router namespace (server/network): the egress proxy decides
        // what the guest reaches. No user-mode networking: its gateway is the host itself.
        add(argv, {"-netdev", "tap,id=net0,fd=" + std::to_string(options.tap_fd), "-device",
                   "virtio-net-device,netdev=net0"});
    }
    for (std::size_t i = 0; i < options.volumes.size(); ++i)
        add_disk(argv, "vol" + std::to_string(i), "raw", options.volumes[i].image,
                 options.volumes[i].read_only);
    return argv;
}

}  // namespace deskbox::runtime
