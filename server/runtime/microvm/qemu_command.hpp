// The QEMU command line of a microVM: a pure function of what the VM is made of. Sandboxes
// use all of it; microvm_bench boots the bare kernel + initramfs with the same options.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "server/runtime/microvm/accelerator.hpp"

namespace deskbox::runtime {

// QEMU's option syntax splits on ',' and takes ",," as a literal comma.
std::string qemu_escape(const std::string& value);

// vCPUs for a CPU limit: whole CPUs, at least one.
int microvm_vcpus(double cpus);

// What one QEMU process runs. An empty path or a negative fd leaves that part out.
struct QemuCommandOptions {
    std::string qemu = "qemu-system-x86_64";
    std::string name;  // -name (escaped here)
    std::uint64_t memory_mb = 1024;
    int vcpus = 1;
    Accelerator accelerator = Accelerator::tcg;  // kvm or tcg (auto is resolved before)
    // TCG: the host's TSC rate for the guest kernel (host_tsc_khz()); 0: not measured.
    std::uint64_t tsc_khz = 0;
    std::filesystem::path kernel, initramfs;
    std::string extra_kernel_args;  // appended to the kernel command line
    // The serial console goes to this file; empty: to QEMU's stdout.
    std::filesystem::path console_log;
    std::filesystem::path root_disk;    // qcow2, serial deskbox-root
    std::filesystem::path config_disk;  // raw, read-only, serial deskbox-config
    std::filesystem::path agent_disk;   // raw, read-only, serial deskbox-agent
    int agent_fd = -1;                  // listening socket of virtio-serial port deskbox.agent
    int qmp_fd = -1;                    // listening socket of the QMP monitor
    int tap_fd = -1;                    // the network's tap device
    // Volumes' ext4 images, raw, serials deskbox-vol0, deskbox-vol1, ... in this order (the
    // guest config says where each is mounted).
    struct Volume {
        std::filesystem::path image;
        bool read_only = false;
    };
    std::vector<Volume> volumes;
};

std::vector<std::string> qemu_command(const QemuCommandOptions& options);

}  // namespace deskbox::runtime
