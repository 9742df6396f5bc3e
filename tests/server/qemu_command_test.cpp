// The microVM's QEMU command line, built from its options: what a sandbox's QEMU gets (and
// what adoption and leftover cleanup later read back from /proc/<pid>/cmdline), and the bare
// boot microvm_bench measures with the same builder.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "server/runtime/microvm/qemu_command.hpp"

namespace deskbox::runtime {
namespace {

using Argv = std::vector<std::string>;

// The value after the first `option` (empty if there is none).
std::string value_of(const Argv& argv, const std::string& option) {
    auto it = std::find(argv.begin(), argv.end(), option);
    return it == argv.end() || it + 1 == argv.end() ? std::string() : *(it + 1);
}

// Every value given to `option`, in order.
Argv values_of(const Argv& argv, const std::string& option) {
    Argv out;
    for (std::size_t i = 0; i + 1 < argv.size(); ++i)
        if (argv[i] == option) out.push_back(argv[i + 1]);
    return out;
}

QemuCommandOptions sandbox_options() {
    QemuCommandOptions o;
    o.qemu = "/usr/bin/qemu-system-x86_64";
    o.name = "deskbox-a,b";
    o.memory_mb = 1536;
    o.vcpus = 2;
    o.accelerator = Accelerator::tcg;
    o.tsc_khz = 2400000;
    o.kernel = "/img/vmlinuz";
    o.initramfs = "/img/initramfs.img";
    o.extra_kernel_args = "deskbox.debug=1";
    o.console_log = "/s/x/console.log";
    o.root_disk = "/s/x,y/disk.qcow2";
    o.config_disk = "/s/x/config.img";
    o.agent_disk = "/s/microvm/agent-1.img";
    o.agent_fd = 5;
    o.qmp_fd = 6;
    o.tap_fd = 7;
    return o;
}

TEST(QemuCommand, SandboxGetsItsDisksSocketsNetworkAndConfinement) {
    Argv argv = qemu_command(sandbox_options());
    EXPECT_EQ(argv.front(), "/usr/bin/qemu-system-x86_64");
    EXPECT_EQ(value_of(argv, "-name"), "deskbox-a,,b");  // QEMU's ",," is a literal comma
    EXPECT_EQ(value_of(argv, "-m"), "1536");
    EXPECT_EQ(value_of(argv, "-smp"), "2");
    EXPECT_EQ(value_of(argv, "-sandbox"),
              "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
    EXPECT_EQ(value_of(argv, "-append"),
              "console=ttyS0 panic=-1 quiet 8250.nr_uarts=1 tsc_early_khz=2400000 tsc=reliable "
              "deskbox.debug=1");
    EXPECT_EQ(values_of(argv, "-drive"),
              (Argv{"id=root,if=none,format=qcow2,discard=unmap,file=/s/x,,y/disk.qcow2",
                    "id=config,if=none,format=raw,readonly=on,file=/s/x/config.img",
                    "id=agent,if=none,format=raw,readonly=on,file=/s/microvm/agent-1.img"}));
    Argv devices = values_of(argv, "-device");
    for (const char* serial :
         {"serial=deskbox-root", "serial=deskbox-config", "serial=deskbox-agent"})
        EXPECT_EQ(std::count_if(
                      devices.begin(), devices.end(),
                      [&](const std::string& d) { return d.find(serial) != std::string::npos; }),
                  1)
            << serial;
    EXPECT_EQ(values_of(argv, "-chardev"), (Argv{"file,id=console,path=/s/x/console.log",
                                                 "socket,id=agent,server=on,wait=off,fd=5",
                                                 "socket,id=qmp,server=on,wait=off,fd=6"}));
    EXPECT_EQ(value_of(argv, "-serial"), "chardev:console");
    EXPECT_EQ(value_of(argv, "-mon"), "chardev=qmp,mode=control");
    EXPECT_EQ(value_of(argv, "-netdev"), "tap,id=net0,fd=7");
    EXPECT_EQ(value_of(argv, "-accel"), "tcg,thread=multi");
    EXPECT_EQ(value_of(argv, "-cpu"), "max");
}

// Volumes come last, raw, in order (the guest config's DESKBOX_VOLUMES names their paths in
// the same order), a read-only one on a read-only drive.
TEST(QemuCommand, VolumesAreRawDisksInOrderAfterEverythingElse) {
    QemuCommandOptions o = sandbox_options();
    o.volumes = {{"/v/work/data.ext4", false}, {"/v/ref,erence/data.ext4", true}};
    Argv drives = values_of(qemu_command(o), "-drive");
    ASSERT_EQ(drives.size(), 5u);
    EXPECT_EQ(drives[3], "id=vol0,if=none,format=raw,discard=unmap,file=/v/work/data.ext4");
    EXPECT_EQ(drives[4], "id=vol1,if=none,format=raw,readonly=on,file=/v/ref,,erence/data.ext4");
    Argv devices = values_of(qemu_command(o), "-device");
    EXPECT_EQ(devices.back(), "virtio-blk-device,drive=vol1,serial=deskbox-vol1");
}

TEST(QemuCommand, KvmTakesTheHostCpuAndNoTscHints) {
    QemuCommandOptions o = sandbox_options();
    o.accelerator = Accelerator::kvm;
    o.extra_kernel_args.clear();
    Argv argv = qemu_command(o);
    EXPECT_EQ(value_of(argv, "-accel"), "kvm");
    EXPECT_EQ(value_of(argv, "-cpu"), "host");
    EXPECT_EQ(value_of(argv, "-append"), "console=ttyS0 panic=-1 quiet 8250.nr_uarts=1");
}

TEST(QemuCommand, BareBootHasNoDisksNoSocketsAndTheConsoleOnStdout) {
    QemuCommandOptions o;
    o.kernel = "/img/vmlinuz";
    o.initramfs = "/img/initramfs.img";
    o.extra_kernel_args = "deskbox.fail=modules";
    Argv argv = qemu_command(o);
    EXPECT_EQ(argv.front(), "qemu-system-x86_64");
    EXPECT_EQ(value_of(argv, "-serial"), "stdio");
    EXPECT_TRUE(values_of(argv, "-drive").empty());
    EXPECT_TRUE(values_of(argv, "-chardev").empty());
    EXPECT_TRUE(value_of(argv, "-netdev").empty());
    EXPECT_TRUE(value_of(argv, "-name").empty());
    EXPECT_EQ(value_of(argv, "-append"),
              "console=ttyS0 panic=-1 quiet 8250.nr_uarts=1 tsc=reliable deskbox.fail=modules");
}

TEST(QemuCommand, VcpusAreWholeCpusAndAtLeastOne) {
    EXPECT_EQ(microvm_vcpus(0.25), 1);
    EXPECT_EQ(microvm_vcpus(1.0), 1);
    EXPECT_EQ(microvm_vcpus(1.5), 2);
    EXPECT_EQ(microvm_vcpus(4.0), 4);
}

}  // namespace
}  // namespace deskbox::runtime
