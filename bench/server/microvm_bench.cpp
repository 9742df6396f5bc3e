// Cold boot of a microVM sandbox (template `minimal` unless told) through the runtime, phase by
// phase, next to bare QEMU booting the same kernel + initramfs until its init prints a marker (the
// floor any microVM boot on this machine pays), measured in the same run:
//   QEMU up (QMP answers) -> init hands over to the agent -> agent's desktop ready ->
//   agent connected (its hello) -> first full frame on the host (screen.full answered);
// plus the accelerator auto-probe and the PSS of the idle QEMU process. Then the fast path:
// a template snapshot made once, copies restored from it to their first full frame, and a
// sandbox's own snapshot saved and restored (1 GiB guest).
//
//   microvm_bench [--runs N] [--accel auto|tcg|kvm] [--template minimal|desktop]
// Needs qemu-system-x86_64 and the image: sudo images/build.py minimal &&
// sudo images/build_microvm.py minimal.
#include <poll.h>
#include <signal.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.hpp"
#include "common/parse_integer.hpp"
#include "common/temp_dir.hpp"
#include "protocol/channel.hpp"
#include "protocol/rpc.hpp"
#include "server/runtime/microvm/qemu_command.hpp"
#include "server/runtime/microvm/runtime.hpp"
#include "tests/support/test_paths.hpp"

namespace {

using namespace deskbox;
using namespace deskbox::runtime;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace fs = std::filesystem;

double seconds(Clock::duration d) {
    return std::chrono::duration<double>(d).count();
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Notes when each marker first appears in a growing file (the serial console).
class ConsoleWatcher {
  public:
    ConsoleWatcher(fs::path file, std::vector<std::string> markers, Clock::time_point t0)
        : file_(std::move(file)), markers_(std::move(markers)), t0_(t0) {
        thread_ = std::thread([this] { run(); });
    }
    ~ConsoleWatcher() {
        stop_ = true;
        thread_.join();
    }
    // Seconds from t0 to the marker, or -1 if it never came.
    double at(const std::string& marker) {
        std::lock_guard lock(mutex_);
        auto it = seen_.find(marker);
        return it == seen_.end() ? -1 : it->second;
    }

  private:
    void run() {
        while (!stop_) {
            std::ifstream in(file_, std::ios::binary);
            std::string text((std::istreambuf_iterator<char>(in)), {});
            {
                std::lock_guard lock(mutex_);
                for (const auto& marker : markers_)
                    if (!seen_.count(marker) && text.find(marker) != std::string::npos)
                        seen_[marker] = seconds(Clock::now() - t0_);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    fs::path file_;
    std::vector<std::string> markers_;
    Clock::time_point t0_;
    std::mutex mutex_;
    std::map<std::string, double> seen_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

std::uint64_t pss_kib(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
    std::string key;
    std::uint64_t value = 0;
    while (in >> key) {
        if (key == "Pss:") {
            in >> value;
            return value;
        }
        std::string rest;
        std::getline(in, rest);
    }
    return 0;
}

struct Boot {
    double qemu_up = 0, init = 0, desktop = 0, agent = 0, frame = 0;
    std::uint64_t pss_idle_kib = 0;
};

SandboxSpec bench_spec(const fs::path& rootfs, const fs::path& agent_dir, const fs::path& state,
                       const std::string& id) {
    SandboxSpec spec;
    spec.id = id;
    spec.template_rootfs = rootfs;
    spec.agent_dir = agent_dir;
    // The session as the template defines it (what deskboxd would start).
    std::ifstream record_file(rootfs / "etc/deskbox/template.json");
    json session = json::parse(record_file).value("session", json::object());
    spec.entry = {"/opt/deskbox/bin/deskbox-agent",
                  "--init",
                  "--channel",
                  kAgentChannelArg,
                  "--size",
                  "1280x800"};
    std::string wm;
    for (const auto& word : session.value("window_manager", json::array()))
        wm += (wm.empty() ? "" : " ") + word.get<std::string>();
    if (!wm.empty()) spec.entry.insert(spec.entry.end(), {"--wm", wm});
    for (const auto& app : session.value("autostart", json::array())) {
        std::string line;
        for (const auto& word : app) line += (line.empty() ? "" : " ") + word.get<std::string>();
        spec.entry.insert(spec.entry.end(), {"--autostart", line});
    }
    spec.limits.memory_mb = 1024;
    spec.limits.cpus = 2;
    spec.state_root = state;
    return spec;
}

// Host session with the agent until its first full frame has arrived.
std::unique_ptr<protocol::RpcClient> first_frame(MicrovmSandbox& sandbox) {
    UniqueFd fd = sandbox.connect_agent(std::chrono::minutes(5));
    int raw = fd.release();
    auto channel = std::make_unique<protocol::Channel>(raw, raw);
    protocol::handshake(*channel, "host");
    auto client = std::make_unique<protocol::RpcClient>(std::move(channel));
    client->start();
    client->call("screen.full", json::object(), {}, std::chrono::minutes(1));
    return client;
}

struct Restore {
    double make = 0, restore = 0, frame = 0, save = 0, resave_restore = 0;
    std::uint64_t pss_idle_kib = 0, memory_bytes = 0;
};

// Template snapshot: made once (boot + save); then copies restored from it, each to its
// first full frame; and a sandbox's own snapshot saved and restored.
std::vector<Restore> restore_runs(MicrovmRuntime& runtime, const SandboxSpec& base, int runs) {
    std::vector<Restore> out;
    auto t_make = Clock::now();
    fs::path dir = runtime.ensure_template_snapshot(
        base, [](MicrovmSandbox& vm) { first_frame(vm)->close(); });
    double make = seconds(Clock::now() - t_make);
    for (int run = 0; run < runs; ++run) {
        Restore r;
        r.make = make;
        SandboxSpec spec = base;
        spec.id = "bench-copy-" + std::to_string(run);
        auto t0 = Clock::now();
        auto sandbox = runtime.start_from_template(spec, dir);
        r.restore = seconds(Clock::now() - t0);
        auto client = first_frame(*sandbox);
        r.frame = seconds(Clock::now() - t0);
        std::this_thread::sleep_for(std::chrono::seconds(3));
        r.pss_idle_kib = pss_kib(sandbox->qemu_pid());
        client->close();
        auto t_save = Clock::now();
        r.memory_bytes = sandbox->snapshot();
        r.save = seconds(Clock::now() - t_save);
        auto t_restore = Clock::now();
        sandbox->restore_from_snapshot();
        r.resave_restore = seconds(Clock::now() - t_restore);
        sandbox->kill();
        out.push_back(r);
    }
    runtime.remove_template_snapshots(base.state_root);
    return out;
}

Boot boot_once(MicrovmRuntime& runtime, const fs::path& rootfs, const fs::path& agent_dir,
               const fs::path& state, int run) {
    SandboxSpec spec = bench_spec(rootfs, agent_dir, state, "bench-" + std::to_string(run));
    Boot boot;
    auto t0 = Clock::now();
    auto sandbox = runtime.start_microvm(spec);
    boot.qemu_up = seconds(Clock::now() - t0);
    ConsoleWatcher watcher(sandbox->paths().console_log,
                           {"deskbox-init: handing over", "desktop ready"}, t0);
    UniqueFd fd = sandbox->connect_agent(std::chrono::minutes(5));
    boot.agent = seconds(Clock::now() - t0);
    int raw = fd.release();
    auto channel = std::make_unique<protocol::Channel>(raw, raw);
    protocol::handshake(*channel, "host");
    protocol::RpcClient client(std::move(channel));
    std::atomic<std::uint64_t> damaged_pixels{0};
    client.on_event([&](protocol::Message&& m) {
        if (m.header.value("event", "") == "damage")
            damaged_pixels += m.header.value("width", 0ull) * m.header.value("height", 0ull);
    });
    client.start();
    // The agent sends its full-screen damage event before it answers.
    client.call("screen.full", json::object(), {}, std::chrono::minutes(1));
    boot.frame = seconds(Clock::now() - t0);
    if (damaged_pixels < 1280ull * 800)
        std::fprintf(stderr, "warning: only %llu pixels arrived before screen.full answered\n",
                     static_cast<unsigned long long>(damaged_pixels.load()));
    boot.init = watcher.at("deskbox-init: handing over");
    boot.desktop = watcher.at("desktop ready");
    // Idle: let the desktop settle, then measure what the host pays for this VM.
    std::this_thread::sleep_for(std::chrono::seconds(5));
    boot.pss_idle_kib = pss_kib(sandbox->qemu_pid());
    client.close();
    sandbox->kill();
    return boot;
}

// The same kernel and initramfs in QEMU with no disks (the sandboxes' command line without
// their devices): the init fails on purpose right after mounting /proc, prints its marker and
// resets. Seconds to the marker.
double bare_boot(const MicrovmImage& image, Accelerator accel) {
    QemuCommandOptions command;
    command.memory_mb = 1024;
    command.vcpus = 2;
    command.accelerator = accel;
    if (accel == Accelerator::tcg) command.tsc_khz = host_tsc_khz();
    command.kernel = image.kernel;
    command.initramfs = image.initramfs;
    command.extra_kernel_args = "deskbox.fail=modules";  // console on stdout: no console_log
    SpawnOptions o;
    o.argv = qemu_command(command);
    o.pipe_stdout = true;
    o.stderr_to_null = true;
    auto t0 = Clock::now();
    auto qemu = ChildProcess::spawn(o);
    std::string out;
    char buffer[4096];
    double at = -1;
    while (at < 0) {
        pollfd p{qemu.stdout_fd().get(), POLLIN, 0};
        if (::poll(&p, 1, 300000) <= 0) break;
        ssize_t n = ::read(qemu.stdout_fd().get(), buffer, sizeof buffer);
        if (n <= 0) break;
        out.append(buffer, static_cast<std::size_t>(n));
        if (out.find("deskbox-init: FATAL") != std::string::npos) at = seconds(Clock::now() - t0);
    }
    qemu.signal(SIGKILL);
    qemu.wait();
    return at;
}

constexpr const char* kUsage =
    "usage: microvm_bench [--runs N] [--accel auto|tcg|kvm] [--template NAME]\n"
    "  cold boots through the microVM runtime (phase by phase) next to bare QEMU booting the\n"
    "  same kernel + initramfs, then template-snapshot restores and a sandbox's own snapshot.\n"
    "  --runs N      boots and restores of each kind (1..100, default 2)\n"
    "  --accel A     auto (probe), tcg or kvm (default auto)\n"
    "  --template T  minimal or desktop (default minimal); needs images/build_microvm.py T\n";

struct BenchArgs {
    int runs = 2;
    Accelerator accel = Accelerator::auto_select;
    std::string template_name = "minimal";
};

// nullopt: go on; else the exit code (after --help or a mistake).
std::optional<int> parse_args(int argc, char** argv, BenchArgs& args) {
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--runs" && i + 1 < argc) {
            auto n = parse_integer(argv[++i]);
            if (!n || *n < 1 || *n > 100) {
                std::fprintf(stderr, "--runs: expected 1..100\n");
                return 2;
            }
            args.runs = static_cast<int>(*n);
        } else if (arg == "--template" && i + 1 < argc) {
            args.template_name = argv[++i];
        } else if (arg == "--accel" && i + 1 < argc) {
            try {
                args.accel = parse_accelerator(argv[++i]);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "%s\n", e.what());
                return 2;
            }
        } else if (arg == "--help" || arg == "-h") {
            std::printf("%s", kUsage);
            return 0;
        } else {
            std::fprintf(stderr, "%s", kUsage);
            return 2;
        }
    }
    return std::nullopt;
}

// Each restore run, then their medians beside the cold boot's (`cold_boot_s`).
void print_restores(const std::vector<Restore>& restores, double cold_boot_s, double ram_mib) {
    std::vector<double> restore, frame, save, reload;
    std::uint64_t restored_pss = 0, memory_bytes = 0;
    for (std::size_t i = 0; i < restores.size(); ++i) {
        const auto& r = restores[i];
        std::printf(
            "restore %zu: template copy restored %.2f s, first full frame %.2f s; idle PSS %.0f "
            "MiB; its own snapshot: save %.2f s (%.0f MiB file), restore %.2f s\n",
            i + 1, r.restore, r.frame, r.pss_idle_kib / 1024.0, r.save, r.memory_bytes / 1048576.0,
            r.resave_restore);
        restore.push_back(r.restore);
        frame.push_back(r.frame);
        save.push_back(r.save);
        reload.push_back(r.resave_restore);
        restored_pss = std::max(restored_pss, r.pss_idle_kib);
        memory_bytes = std::max(memory_bytes, r.memory_bytes);
    }
    if (!restores.empty()) {
        double frame_med = median(frame);
        std::printf("\ntemplate snapshot (made once in %.2f s: boot + save), median of %d:\n",
                    restores[0].make, static_cast<int>(restores.size()));
        std::printf(
            "  ours  create from snapshot -> first full frame %6.2f s (QEMU restore %.2f)\n",
            frame_med, median(restore));
        std::printf("  vs cold boot -> first full frame               %6.2f s  (%.1fx faster)\n",
                    cold_boot_s, frame_med > 0 ? cold_boot_s / frame_med : 0);
        std::printf("  snapshot of a 1024 MiB guest: save %.2f s, restore %.2f s, file %.0f MiB\n",
                    median(save), median(reload), memory_bytes / 1048576.0);
        std::printf("  idle restored QEMU PSS %.0f MiB -> about %.0f in %.0f GiB\n",
                    restored_pss / 1024.0, restored_pss ? ram_mib / (restored_pss / 1024.0) : 0,
                    ram_mib / 1024);
    }
}

}  // namespace

int main(int argc, char** argv) {
    BenchArgs args;
    if (auto exit_code = parse_args(argc, argv, args)) return *exit_code;
    const int runs = args.runs;
    const Accelerator accel = args.accel;
    const std::string template_name = args.template_name;
    auto printed = run_process(
        {"python3", deskbox::test_paths::source("images/build.py"), template_name, "--print-path"});
    fs::path rootfs = printed.out.substr(0, printed.out.find('\n'));

    TempDir agent("deskbox-bench-agent");
    fs::create_directories(agent.path() / "bin");
    fs::copy_file(deskbox::test_paths::kAgent, agent.path() / "bin/deskbox-agent");
    TempDir state("deskbox-bench-state");

    MicrovmRuntimeOptions options;
    options.accelerator = accel;
    MicrovmRuntime runtime(options);
    MicrovmImage image;
    try {
        image = runtime.image_for(rootfs);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
    auto t_probe = Clock::now();
    auto choice = runtime.accelerator();
    std::printf("accelerator: %s — %s (choosing took %.2f s)\n", to_string(choice.accelerator),
                choice.reason.c_str(), seconds(Clock::now() - t_probe));
    struct sysinfo si {};
    ::sysinfo(&si);
    std::printf("host: %ld cores, load %.2f; guest: template %s, 2 vCPUs, 1024 MiB, 1280x800\n",
                sysconf(_SC_NPROCESSORS_ONLN), si.loads[0] / 65536.0, template_name.c_str());

    std::vector<double> ours, bare, init, desktop, agent_at, qemu_up;
    std::uint64_t pss = 0;
    for (int run = 0; run < runs; ++run) {
        double bare_s = bare_boot(image, choice.accelerator);
        Boot boot = boot_once(runtime, rootfs, agent.path(), state.path(), run);
        std::printf(
            "run %d: bare kernel+initramfs -> init marker %.2f s | ours: QEMU up %.2f s, init "
            "hands over %.2f s, desktop ready %.2f s, agent connected %.2f s, first full frame "
            "%.2f s; idle QEMU PSS %.0f MiB\n",
            run + 1, bare_s, boot.qemu_up, boot.init, boot.desktop, boot.agent, boot.frame,
            boot.pss_idle_kib / 1024.0);
        bare.push_back(bare_s);
        ours.push_back(boot.frame);
        init.push_back(boot.init);
        desktop.push_back(boot.desktop);
        agent_at.push_back(boot.agent);
        qemu_up.push_back(boot.qemu_up);
        pss = std::max(pss, boot.pss_idle_kib);
    }
    double ours_med = median(ours), bare_med = median(bare);
    std::printf("\nmedian of %d (%s):\n", runs, to_string(choice.accelerator));
    std::printf(
        "  ours  cold boot -> first full frame  %6.2f s  (QEMU up %.2f, init %.2f, "
        "desktop ready %.2f, agent connected %.2f)\n",
        ours_med, median(qemu_up), median(init), median(desktop), median(agent_at));
    std::printf("  bare  qemu kernel+initramfs -> init  %6.2f s\n", bare_med);
    std::printf("  ratio ours / bare                    %6.2fx\n",
                bare_med > 0 ? ours_med / bare_med : 0);
    double ram_mib = static_cast<double>(si.totalram) * si.mem_unit / (1 << 20);
    std::printf("  idle QEMU PSS %.0f MiB -> about %.0f such sandboxes in %.0f GiB of RAM\n",
                pss / 1024.0, pss ? ram_mib / (pss / 1024.0) : 0, ram_mib / 1024);

    std::vector<Restore> restores;
    try {
        restores = restore_runs(
            runtime, bench_spec(rootfs, agent.path(), state.path(), "bench-template"), runs);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "template snapshot runs: %s\n", e.what());
        return 1;
    }
    print_restores(restores, ours_med, ram_mib);
    return 0;
}
