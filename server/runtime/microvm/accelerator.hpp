// Which accelerator a microVM runs on: KVM where it is usable and fast, else TCG (QEMU's
// emulator). A /dev/kvm that exists can still be ~2000x slower than native under nested
// virtualisation, so `auto` times a tiny guest under both (hand-built firmware, no image).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace deskbox::runtime {

enum class Accelerator { auto_select, kvm, tcg };
const char* to_string(Accelerator accel);
// "auto", "kvm", "tcg"; throws SpecError("accelerator", ...) for anything else.
Accelerator parse_accelerator(const std::string& text);

// What the accelerator probe measured (zero durations: not run).
struct AcceleratorChoice {
    Accelerator accelerator = Accelerator::tcg;
    std::chrono::milliseconds tcg_probe{0}, kvm_probe{0};
    std::string reason;  // one line: why this one
};

// Runs the timed probe: a tiny guest (a loop with some VM exits) under TCG, then under KVM
// with a deadline of TCG's own time plus a margin. KVM wins only if it finishes first.
AcceleratorChoice probe_accelerator(const std::string& qemu);

// The host's TSC frequency in kHz, measured (TCG guests read the host's TSC, and the kernel
// cannot calibrate it against the emulated PIT reliably). 0 if it cannot be measured.
std::uint64_t host_tsc_khz();

}  // namespace deskbox::runtime
