// How a sandbox ended, classified from canned evidence: the wait statuses runc and QEMU leave
// and serial console logs as a real guest (kernel 6.1, images/microvm/init) writes them.
#include <signal.h>

#include <gtest/gtest.h>

#include "server/runtime/exit_classification.hpp"

namespace deskbox::runtime {
namespace {

ExitStatus exited(int code) {
    return {code, 0};
}
ExitStatus killed(int sig) {
    return {-1, sig};
}

// ---- containers: runc's monitor passes the entry's status through ----

TEST(SandboxExitClassification, ContainerEntryExitingWithACode) {
    auto info = classify_container_exit({false, exited(3), "", 2048});
    EXPECT_EQ(info.exit_code, 3);
    EXPECT_EQ(info.signal, 0);
    EXPECT_FALSE(info.requested);
    EXPECT_EQ(info.reason, "exited with code 3");
}

TEST(SandboxExitClassification, ContainerKilledByUs) {
    // We SIGKILL the entry; runc reports 128+9 and exits normally.
    auto info = classify_container_exit({true, exited(137), "", 2048});
    EXPECT_TRUE(info.requested);
    EXPECT_EQ(info.exit_code, 137);
    EXPECT_EQ(info.signal, SIGKILL);
    EXPECT_EQ(info.reason, "killed on request");
    // A monitor that died of the kill too, or none at all: still ours.
    EXPECT_EQ(classify_container_exit({true, killed(SIGKILL), "", 2048}).reason,
              "killed on request");
    EXPECT_EQ(classify_container_exit({true, std::nullopt, "", 2048}).exit_code, -1);
}

TEST(SandboxExitClassification, ContainerSigkillNotOursPointsAtTheMemoryLimit) {
    // The kernel's OOM killer at the cgroup's limit: SIGKILL, nobody asked.
    auto info = classify_container_exit({false, exited(137), "", 512});
    EXPECT_FALSE(info.requested);
    EXPECT_EQ(info.signal, SIGKILL);
    EXPECT_EQ(info.reason, "killed by SIGKILL (the memory limit of 512 MiB is the usual cause)");
    EXPECT_EQ(classify_container_exit({false, exited(128 + SIGSEGV), "", 512}).reason,
              "killed by SIGSEGV");
}

TEST(SandboxExitClassification, ContainerMonitorTroubleAndRuncErrors) {
    auto died = classify_container_exit({false, killed(SIGTERM), "", 2048});
    EXPECT_EQ(died.reason, "ended after its runc monitor died of SIGTERM");
    EXPECT_EQ(classify_container_exit({false, std::nullopt, "", 2048}).reason,
              "ended (no runc monitor to tell how)");
    auto failed = classify_container_exit(
        {false, exited(1), "exec: \"/opt/deskbox/bin/deskbox-agent\": permission denied", 2048});
    EXPECT_EQ(failed.reason,
              "exited with code 1; runc: exec: \"/opt/deskbox/bin/deskbox-agent\": permission "
              "denied");
}

// ---- microVMs: the guest kernel reports its PID 1's end on the console ----

const std::string kBoot =
    "[    0.000000] Linux version 6.1.0-18-cloud-amd64 (debian-kernel@lists.debian.org)\n"
    "[    0.412345] virtio_blk virtio1: [vda] 16777216 512-byte logical blocks\n"
    "deskbox-init: mounting the root disk\n"
    "deskbox-init: handing over to /opt/deskbox/bin/deskbox-agent as uid 1000\n";

TEST(SandboxExitClassification, VmEntryExitingWithCodeThree) {
    const std::string console =
        kBoot +
        "[   14.201337] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000300\n"
        "[   14.201900] CPU: 1 PID: 1 Comm: deskbox-agent Not tainted 6.1.0-18-cloud-amd64 #1\n"
        "[   14.202400] Call Trace:\n"
        "[   14.202500]  <TASK>\n"
        "[   14.202700]  dump_stack_lvl+0x44/0x5c\n"
        "[   14.203200]  panic+0x118/0x2ed\n";
    auto info = classify_vm_exit({false, exited(0), false, console, ""});
    EXPECT_EQ(info.exit_code, 3);
    EXPECT_EQ(info.signal, 0);
    EXPECT_EQ(info.reason, "the entry exited with code 3");
}

TEST(SandboxExitClassification, VmEntryKilledBySignal) {
    const std::string console =
        kBoot +
        "[   30.000001] Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b\n";
    auto info = classify_vm_exit({false, exited(0), false, console, ""});
    EXPECT_EQ(info.signal, SIGSEGV);
    EXPECT_EQ(info.exit_code, 128 + SIGSEGV);
    EXPECT_EQ(info.reason, "the entry was killed by SIGSEGV");
}

TEST(SandboxExitClassification, VmGuestOomKillerIsNamed) {
    // The agent (the entry's child) meets the guest's OOM killer; the init exits 137.
    const std::string console =
        kBoot +
        "[  101.551200] Xvfb invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|"
        "__GFP_COMP), order=0, oom_score_adj=0\n"
        "[  101.560001] Out of memory: Killed process 245 (deskbox-agent) total-vm:812344kB, "
        "anon-rss:601232kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:1412kB "
        "oom_score_adj:0\n"
        "[  101.601337] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00008900\n";
    auto info = classify_vm_exit({false, exited(0), false, console, ""});
    EXPECT_EQ(info.exit_code, 137);
    EXPECT_EQ(info.reason,
              "the entry exited with code 137 (the guest ran out of memory; its OOM killer "
              "killed deskbox-agent)");
    // Without the OOM killer's line, a 137 is only a 137.
    const std::string plain =
        kBoot +
        "[   50.1] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00008900\n";
    EXPECT_EQ(classify_vm_exit({false, exited(0), false, plain, ""}).reason,
              "the entry exited with code 137");
}

TEST(SandboxExitClassification, VmKernelPanicAndInitFailure) {
    const std::string panic =
        "[    0.000000] Linux version 6.1.0-18-cloud-amd64\n"
        "[    1.902113] Kernel panic - not syncing: VFS: Unable to mount root fs on "
        "unknown-block(0,0)\n"
        "[    1.902500] CPU: 0 PID: 1 Comm: swapper/0 Not tainted 6.1.0-18-cloud-amd64 #1\n";
    EXPECT_EQ(classify_vm_exit({false, exited(0), false, panic, ""}).reason,
              "guest kernel panic: VFS: Unable to mount root fs on unknown-block(0,0)");
    const std::string fatal =
        "deskbox-init: mounting the root disk\n"
        "deskbox-init: FATAL: no disk with serial deskbox-root\n"
        "deskbox-init: boot failed; powering off\n";
    auto info = classify_vm_exit({false, exited(0), false, fatal, ""});
    EXPECT_EQ(info.exit_code, 1);
    EXPECT_EQ(info.reason, "the guest's init failed: no disk with serial deskbox-root");
}

TEST(SandboxExitClassification, VmKilledByUsWhateverTheConsoleSays) {
    const std::string console = kBoot +
                                "[   20.0] Kernel panic - not syncing: Attempted to kill "
                                "init! exitcode=0x00000009\n";
    auto info = classify_vm_exit({true, killed(SIGKILL), false, console, ""});
    EXPECT_TRUE(info.requested);
    EXPECT_EQ(info.exit_code, -1);
    EXPECT_EQ(info.reason, "killed on request");
}

TEST(SandboxExitClassification, QemuEndingOnItsOwn) {
    auto failed = classify_vm_exit(
        {false, exited(1), false, kBoot,
         "qemu-system-x86_64: -drive id=root,if=none,format=qcow2: Could not open "
         "'/var/lib/deskbox/sandboxes/sb-1/disk.qcow2': No such file or directory"});
    EXPECT_EQ(failed.exit_code, 1);
    EXPECT_EQ(failed.reason.rfind("QEMU exited with code 1: qemu-system-x86_64: -drive", 0), 0u)
        << failed.reason;
    auto crashed = classify_vm_exit({false, killed(SIGSEGV), false, kBoot, ""});
    EXPECT_EQ(crashed.signal, SIGSEGV);
    EXPECT_EQ(crashed.exit_code, 128 + SIGSEGV);
    EXPECT_EQ(crashed.reason, "QEMU was killed by SIGSEGV");
    EXPECT_EQ(classify_vm_exit({false, exited(0), false, kBoot, ""}).reason, "the VM shut down");
    // An adopted QEMU is not our child: how it ended is never known, its log may say.
    EXPECT_EQ(classify_vm_exit({false, std::nullopt, true, kBoot,
                                "qemu-system-x86_64: terminating on signal 15 from pid 4242"})
                  .reason,
              "QEMU ended: qemu-system-x86_64: terminating on signal 15 from pid 4242");
    EXPECT_EQ(classify_vm_exit({false, std::nullopt, false, kBoot, ""}).reason, "state unknown");
}

}  // namespace
}  // namespace deskbox::runtime
