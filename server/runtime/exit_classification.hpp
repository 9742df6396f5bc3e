// How a sandbox ended, in one line for humans (ExitInfo), from what the host can know of it.
// Pure: the runtimes gather the evidence (wait statuses, the console's and the tools' last
// words); these functions only read it, so every case is tested on canned logs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/child_process.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

// A container: runc's `run` monitor passes its entry's exit through (a signal as 128+N).
struct ContainerEnd {
    bool requested = false;             // kill() ended it
    std::optional<ExitStatus> monitor;  // `runc run`'s wait status; nullopt: no monitor of ours
    std::string runc_errors;            // error messages of runc's own log
    std::uint64_t memory_mb = 0;        // the sandbox's memory limit
};
ExitInfo classify_container_exit(const ContainerEnd& end);

// A microVM: its entry is the guest's PID 1, whose end the guest kernel reports on the serial
// console; QEMU's wait status and log say what happened to the VM itself.
struct VmEnd {
    bool requested = false;          // kill() ended it
    std::optional<ExitStatus> qemu;  // QEMU's wait status; nullopt: not known
    bool adopted = false;            // QEMU was not our child: its wait status is never known
    std::string console;             // the serial console's last bytes
    std::string qemu_log;            // QEMU's own last words (trimmed)
};
ExitInfo classify_vm_exit(const VmEnd& end);

}  // namespace deskbox::runtime
