#include "server/runtime/microvm/accelerator.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "common/unique_fd.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// A 64 KiB firmware image for the microvm machine: from the reset vector it jumps to a
// real-mode loop that makes `exits` port writes (each a VM exit) and `iterations` register
// decrements, writes 'K' to the serial port, then exits QEMU through isa-debug-exit.
std::string probe_firmware(std::uint16_t exits, std::uint32_t iterations) {
    std::string image(0x10000, '\xf4');  // hlt everywhere else
    std::string code;
    auto bytes = [&](std::initializer_list<int> list) {
        for (int b : list) code += static_cast<char>(b);
    };
    bytes({0xba, 0xf8, 0x03});                // mov dx, 0x3f8 (COM1)
    bytes({0xb9, exits & 0xff, exits >> 8});  // mov cx, exits
    bytes({0xe6, 0x80, 0x49, 0x75, 0xfb});    // 1: out 0x80, al; dec cx; jnz 1b
    bytes({0x66, 0xb9});                      // mov ecx, iterations
    for (int i = 0; i < 4; ++i) code += static_cast<char>((iterations >> (8 * i)) & 0xff);
    bytes({0x66, 0x49, 0x75, 0xfc});        // 2: dec ecx; jnz 2b
    bytes({0xb0, 'K', 0xee});               // mov al, 'K'; out dx, al
    bytes({0xe6, 0xf4, 0xf4, 0xeb, 0xfd});  // out 0xf4, al (debug exit); hlt; jmp
    image.replace(0, code.size(), code);
    image.replace(0xfff0, 3, std::string("\xe9\x0d\x00", 3));  // reset vector: jmp 0x0000
    return image;
}

// Milliseconds from starting QEMU to the probe's 'K', or nullopt if it did not come by
// `timeout` (QEMU is killed either way).
std::optional<std::chrono::milliseconds> run_probe(const std::string& qemu,
                                                   const fs::path& firmware,
                                                   const std::string& accel, const std::string& cpu,
                                                   std::chrono::milliseconds timeout,
                                                   bool* qemu_quit = nullptr) {
    SpawnOptions spawn;
    spawn.argv = {qemu,
                  "-M",
                  "microvm",
                  "-accel",
                  accel,
                  "-cpu",
                  cpu,
                  "-nodefaults",
                  "-no-user-config",
                  "-display",
                  "none",
                  "-m",
                  "16",
                  "-bios",
                  firmware.string(),
                  "-serial",
                  "stdio",
                  "-device",
                  "isa-debug-exit,iobase=0xf4,iosize=1"};
    spawn.pipe_stdout = true;
    spawn.stderr_to_null = true;
    auto started = Clock::now();
    ChildProcess child;
    try {
        child = ChildProcess::spawn(spawn);
    } catch (const std::system_error&) {
        return std::nullopt;
    }
    auto deadline = started + timeout;
    std::optional<std::chrono::milliseconds> result;
    int fd = child.stdout_fd().get();
    while (!result) {
        int left = static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
        if (left <= 0) break;
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, left) <= 0) continue;
        char buffer[256];
        ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n <= 0) {  // QEMU ended without the marker (refused the accelerator or CPU)
            if (qemu_quit) *qemu_quit = true;
            break;
        }
        if (std::memchr(buffer, 'K', static_cast<std::size_t>(n)))
            result = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    }
    child.signal(SIGKILL);
    child.wait();
    return result;
}

bool kvm_usable() {
    UniqueFd fd(::open("/dev/kvm", O_RDWR | O_CLOEXEC));
    return static_cast<bool>(fd);
}

}  // namespace

const char* to_string(Accelerator accel) {
    switch (accel) {
        case Accelerator::auto_select:
            return "auto";
        case Accelerator::kvm:
            return "kvm";
        case Accelerator::tcg:
            return "tcg";
    }
    return "unknown";
}

Accelerator parse_accelerator(const std::string& text) {
    if (text == "auto") return Accelerator::auto_select;
    if (text == "kvm") return Accelerator::kvm;
    if (text == "tcg") return Accelerator::tcg;
    throw SpecError("accelerator", "'" + text + "' is not one of auto, kvm, tcg");
}

std::uint64_t host_tsc_khz() {
#if defined(__x86_64__) || defined(__i386__)
    auto t0 = Clock::now();
    std::uint64_t c0 = __rdtsc();
    std::this_thread::sleep_for(50ms);
    auto t1 = Clock::now();
    std::uint64_t c1 = __rdtsc();
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
    if (ns <= 0 || c1 <= c0) return 0;
    return static_cast<std::uint64_t>(
        std::llround(static_cast<double>(c1 - c0) * 1e6 / static_cast<double>(ns)));
#else
    return 0;
#endif
}

AcceleratorChoice probe_accelerator(const std::string& qemu) {
    AcceleratorChoice choice;
    if (!kvm_usable()) {
        choice.reason = "/dev/kvm is not usable here";
        return choice;
    }
    TempDir dir("deskbox-accel-probe");
    fs::path firmware = dir.path() / "probe.bin";
    {
        std::ofstream out(firmware, std::ios::binary);
        // 2000 exits and 50M iterations: a few hundred ms under TCG, tens of ms on a real
        // KVM host; nested KVM that emulates guest code takes minutes and loses at once.
        out << probe_firmware(2000, 50'000'000);
    }
    // The same CPU models the sandboxes get: a nested KVM may refuse `-cpu host` (MSRs it
    // cannot set), and then KVM must lose here rather than fail every start.
    auto tcg = run_probe(qemu, firmware, "tcg", "max", 10s);
    if (!tcg) {
        choice.reason = "the TCG probe did not finish; using TCG without comparison";
        return choice;
    }
    choice.tcg_probe = *tcg;
    // KVM only has to beat TCG: waiting longer than TCG took (plus QEMU's start-up jitter)
    // cannot change the answer.
    bool kvm_quit = false;
    auto kvm = run_probe(qemu, firmware, "kvm", "host", *tcg + 500ms, &kvm_quit);
    if (kvm) choice.kvm_probe = *kvm;
    if (kvm && *kvm <= *tcg) {
        choice.accelerator = Accelerator::kvm;
        choice.reason = "KVM probe " + std::to_string(kvm->count()) + " ms <= TCG probe " +
                        std::to_string(tcg->count()) + " ms";
    } else {
        choice.reason = kvm ? "KVM probe " + std::to_string(kvm->count()) + " ms > TCG probe " +
                                  std::to_string(tcg->count()) + " ms"
                        : kvm_quit
                            ? "QEMU refused to run the KVM probe (-accel kvm -cpu host; TCG: " +
                                  std::to_string(tcg->count()) + " ms)"
                            : "KVM probe did not finish within " +
                                  std::to_string((*tcg + 500ms).count()) +
                                  " ms (TCG: " + std::to_string(tcg->count()) + " ms)";
    }
    return choice;
}
}  // namespace deskbox::runtime
