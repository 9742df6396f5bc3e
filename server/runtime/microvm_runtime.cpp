#include "server/runtime/microvm_runtime.hpp"

#include <fcntl.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/atomic_file.hpp"
#include "common/random.hpp"
#include "common/temp_dir.hpp"
#include "server/runtime/exit_classification.hpp"
#include "server/runtime/oci_bundle.hpp"
#include "server/runtime/runtime_util.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr const char* kRuntimeName = "microvm";
constexpr std::uint64_t kMinMemoryMb = 256;
constexpr std::size_t kConsoleLinesInErrors = 25;

// QEMU's option syntax splits on ',' and takes ",," as a literal comma.
std::string qemu_escape(const std::string& value) {
    std::string out;
    for (char c : value) {
        out += c;
        if (c == ',') out += ',';
    }
    return out;
}

// Single-quoted for a POSIX shell: the config disk is sourced by the initramfs's busybox sh.
std::string shell_quote(const std::string& value) {
    std::string out = "'";
    for (char c : value) {
        if (c == '\'')
            out += "'\\''";
        else
            out += c;
    }
    return out + "'";
}

// FNV-1a, 64 bit: stable across runs and builds (content addresses), unlike std::hash.
struct Fnv64 {
    std::uint64_t value = 14695981039346656037ull;
    void add(const void* data, std::size_t size) {
        const auto* bytes = static_cast<const unsigned char*>(data);
        for (std::size_t i = 0; i < size; ++i) value = (value ^ bytes[i]) * 1099511628211ull;
    }
    void add(const std::string& s) {
        add(s.data(), s.size());
        add("\0", 1);
    }
    std::string hex() const {
        char out[17];
        std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(value));
        return out;
    }
};

// A Unix listening socket at `path` (reached through its directory's fd when the path is
// longer than sun_path). QEMU gets the fd, so the socket exists before QEMU runs and no
// path length limit applies to QEMU's side.
UniqueFd listen_unix(const fs::path& path) {
    UniqueFd dir_fd;
    std::string address = path.string();
    sockaddr_un addr{};
    if (address.size() >= sizeof addr.sun_path) {
        auto parent = path.parent_path();
        int fd = ::open(parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) throw RuntimeError("open " + parent.string() + ": " + std::strerror(errno));
        dir_fd.reset(fd);
        address = "/proc/self/fd/" + std::to_string(fd) + "/" + path.filename().string();
        if (address.size() >= sizeof addr.sun_path)
            throw RuntimeError("socket name too long: " + path.string());
    }
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, address.c_str(), address.size() + 1);
    UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!sock) throw RuntimeError(std::string("socket: ") + std::strerror(errno));
    if (::bind(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
        throw RuntimeError("bind " + path.string() + ": " + std::strerror(errno));
    ::chmod(path.c_str(), 0600);
    if (::listen(sock.get(), 1) != 0)
        throw RuntimeError("listen " + path.string() + ": " + std::strerror(errno));
    return sock;
}

// run_process, with a missing program reported as a RuntimeError naming its package.
RunResult run_tool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                   const std::string& package) {
    try {
        return run_process(argv, timeout);
    } catch (const std::system_error& e) {
        throw RuntimeError("cannot run " + argv[0] + ": " + e.what() + " (apt-get install " +
                           package + ")");
    }
}

// ------------------------------------------------------------------ QEMU processes on disk

pid_t read_pid_file(const fs::path& file) {
    std::ifstream in(file);
    long pid = 0;
    if (!(in >> pid) || pid <= 1 || pid > (1L << 22)) return -1;
    return static_cast<pid_t>(pid);
}

// True if `pid` is a live (not zombie) QEMU of sandbox dir `dir`: a pid file can outlive its
// process, and the pid can be reused by something else.
bool is_our_qemu(pid_t pid, const fs::path& dir) {
    if (pid <= 1) return false;
    std::ifstream stat_file("/proc/" + std::to_string(pid) + "/stat");
    std::string stat_line;
    if (!std::getline(stat_file, stat_line)) return false;
    auto close_paren = stat_line.rfind(')');
    if (close_paren == std::string::npos || close_paren + 2 >= stat_line.size()) return false;
    char state = stat_line[close_paren + 2];
    if (state == 'Z' || state == 'X') return false;
    std::ifstream cmdline_file("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(cmdline_file)), {});
    // Its -drive names this sandbox's disk (QEMU gets the sockets as fds, not paths).
    return cmdline.find(qemu_escape((dir / "disk.qcow2").string())) != std::string::npos;
}

// SIGKILLs the QEMU recorded in the pid file of `dir` if it still runs, and waits for it to
// die (it is not our child after a server crash, so a pidfd tells when it is gone).
void kill_recorded_qemu(const fs::path& dir, std::chrono::milliseconds timeout) {
    pid_t pid = read_pid_file(dir / "qemu.pid");
    if (!is_our_qemu(pid, dir)) return;
    UniqueFd pidfd(pidfd_open(pid));
    if (pidfd) {
        pidfd_signal(pidfd.get(), SIGKILL);
        pidfd_wait_exit(pidfd.get(), timeout);
        return;
    }
    if (errno == ESRCH) return;
    ::kill(pid, SIGKILL);
    for (auto deadline = Clock::now() + timeout; Clock::now() < deadline;) {
        if (!is_our_qemu(pid, dir)) return;
        std::this_thread::sleep_for(20ms);
    }
}

std::vector<std::string> residue_of(const fs::path& state_root, const std::string& id,
                                    bool dir_counts) {
    MicrovmPaths paths(state_root, id);
    std::vector<std::string> left;
    pid_t pid = read_pid_file(paths.pid_file);
    if (is_our_qemu(pid, paths.dir)) left.push_back("QEMU process " + std::to_string(pid));
    std::error_code ec;
    for (const auto& socket : {paths.agent_socket, paths.qmp_socket})
        if (fs::exists(fs::symlink_status(socket, ec))) left.push_back("socket " + socket.string());
    if (dir_counts && fs::exists(paths.dir, ec)) left.push_back("directory " + paths.dir.string());
    return left;
}

// Removes everything sandbox `id` may hold: its QEMU (if a crashed server left it running),
// its sockets and (unless kept) its directory. Used by kill and leftover cleanup alike.
void teardown(const fs::path& state_root, const std::string& id, bool keep_state,
              std::chrono::milliseconds stop_timeout) {
    MicrovmPaths paths(state_root, id);
    std::string problems;
    auto attempt = [&](auto&& step) {
        try {
            step();
        } catch (const std::exception& e) {
            problems += std::string(problems.empty() ? "" : "; ") + e.what();
        }
    };
    attempt([&] { kill_recorded_qemu(paths.dir, stop_timeout); });
    attempt([&] {
        for (const auto& socket : {paths.agent_socket, paths.qmp_socket}) {
            std::error_code ec;
            fs::remove(socket, ec);
            if (ec) throw RuntimeError("remove " + socket.string() + ": " + ec.message());
        }
    });
    if (!keep_state) {
        attempt([&] {
            std::error_code ec;
            fs::remove_all(paths.dir, ec);
            if (ec) throw RuntimeError("remove " + paths.dir.string() + ": " + ec.message());
        });
    }
    auto left = residue_of(state_root, id, !keep_state);
    if (!left.empty()) {
        std::string list;
        for (const auto& item : left) list += (list.empty() ? "" : ", ") + item;
        throw RuntimeError("sandbox " + id + " not fully removed: " + list +
                           (problems.empty() ? "" : " (" + problems + ")"));
    }
}

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

// ------------------------------------------------------------------ guest config

// Shell assignments the initramfs's init sources from the config disk (images/microvm/init):
// identity, then "$@" = environment (K=V...) followed by the entry's argv.
std::string guest_config(const SandboxSpec& spec) {
    auto env = default_guest_env(spec);
    for (const auto& [key, value] : spec.env) env[key] = value;
    std::ostringstream out;
    out << "# deskbox microVM sandbox config, sourced by the initramfs init\n"
        << "DESKBOX_CONFIG_VERSION=1\n"
        << "DESKBOX_HOSTNAME=" << shell_quote(spec.hostname.empty() ? "deskbox" : spec.hostname)
        << "\n"
        << "DESKBOX_MACHINE_ID=" << random::hex(16) << "\n"
        << "DESKBOX_UID=" << spec.uid << "\n"
        << "DESKBOX_GID=" << spec.gid << "\n"
        << "DESKBOX_NETWORK=" << (spec.network ? 1 : 0) << "\n"
        << "DESKBOX_ENTRY=" << shell_quote(spec.entry[0]) << "\n"
        << "set --";
    for (const auto& [key, value] : env) out << " \\\n  " << shell_quote(key + "=" + value);
    for (const auto& arg : spec.entry) out << " \\\n  " << shell_quote(arg);
    out << "\nDESKBOX_CONFIG_END=1\n";
    std::string text = out.str();
    // A disk is whole sectors; newlines are harmless to the shell.
    text.append((4096 - text.size() % 4096) % 4096, '\n');
    return text;
}

// The spec as sandbox.json keeps it: an adopted snapshot rebuilds its command line from it.
json spec_to_json(const SandboxSpec& spec) {
    return {{"id", spec.id},
            {"template_rootfs", spec.template_rootfs.string()},
            {"agent_dir", spec.agent_dir.string()},
            {"entry", spec.entry},
            {"env", spec.env},
            {"width", spec.width},
            {"height", spec.height},
            {"dpi", spec.dpi},
            {"limits", limits_to_json(spec.limits)},
            {"network", spec.network},
            {"hostname", spec.hostname},
            {"uid", spec.uid},
            {"gid", spec.gid}};
}

SandboxSpec spec_from_json(const json& j) {
    SandboxSpec spec;
    spec.id = j.at("id").get<std::string>();
    spec.template_rootfs = j.at("template_rootfs").get<std::string>();
    spec.agent_dir = j.at("agent_dir").get<std::string>();
    spec.entry = j.at("entry").get<std::vector<std::string>>();
    spec.env = j.at("env").get<std::map<std::string, std::string>>();
    spec.width = j.at("width");
    spec.height = j.at("height");
    spec.dpi = j.at("dpi");
    spec.limits = limits_from_json(j.at("limits"));
    spec.network = j.at("network");
    spec.hostname = j.at("hostname").get<std::string>();
    spec.uid = j.at("uid");
    spec.gid = j.at("gid");
    return spec;
}

json read_json_file(const fs::path& file) {
    std::ifstream in(file);
    if (!in) throw RuntimeError("cannot read " + file.string() + ": " + std::strerror(errno));
    auto parsed = json::parse(in, nullptr, false);
    if (!parsed.is_object()) throw RuntimeError(file.string() + " is not a JSON object");
    return parsed;
}

// A hard link (same file system: free), else a copy.
void link_or_copy(const fs::path& from, const fs::path& to) {
    std::error_code ec;
    fs::remove(to, ec);
    fs::create_hard_link(from, to, ec);
    if (!ec) return;
    fs::copy_file(from, to, ec);
    if (ec)
        throw RuntimeError("cannot copy " + from.string() + " to " + to.string() + ": " +
                           ec.message());
}

// Identifies a file's version cheaply (a rebuilt image or an upgraded QEMU changes it).
std::string file_version(const fs::path& file) {
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) return file.string() + " missing";
    return file.string() + ' ' + std::to_string(st.st_size) + ' ' +
           std::to_string(st.st_mtim.tv_sec) + '.' + std::to_string(st.st_mtim.tv_nsec);
}

// ------------------------------------------------------------------ accelerator probe

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

// ------------------------------------------------------------------ paths

MicrovmPaths::MicrovmPaths(const fs::path& state_root, const std::string& id)
    : dir(sandbox_dir(state_root, id)),
      metadata(dir / "sandbox.json"),
      disk(dir / "disk.qcow2"),
      config(dir / "config.img"),
      agent_socket(dir / "agent.sock"),
      qmp_socket(dir / "qmp.sock"),
      console_log(dir / "console.log"),
      qemu_log(dir / "qemu.log"),
      pid_file(dir / "qemu.pid"),
      memory(dir / "memory") {}

// ------------------------------------------------------------------ shared runtime state

struct MicrovmSandbox::Shared {
    MicrovmRuntimeOptions options;
    std::mutex mutex;
    LiveSandboxes live;
    std::optional<AcceleratorChoice> accelerator;
    std::optional<std::uint64_t> tsc_khz;
    // agent dir fingerprint (names, sizes, mtimes) -> its image, so the content is hashed
    // once per change rather than per sandbox.
    std::map<std::string, fs::path> agent_images;
    // template snapshot key -> the lock its maker holds, so a key is made once.
    std::map<std::string, std::shared_ptr<std::mutex>> template_makers;
    std::string qemu_path;  // options.qemu resolved on PATH, once

    std::uint64_t tsc_khz_cached() {
        std::lock_guard lock(mutex);
        if (!tsc_khz) tsc_khz = host_tsc_khz();
        return *tsc_khz;
    }

    // The read-only ext4 image of `agent_dir` for /opt/deskbox, made once per content.
    fs::path agent_image(const fs::path& state_root, const fs::path& agent_dir) {
        std::vector<fs::path> files;
        std::error_code ec;
        std::uint64_t total = 0;
        std::string fingerprint = state_root.string() + '\n' + agent_dir.string() + '\n';
        for (auto it = fs::recursive_directory_iterator(agent_dir, ec);
             !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
            files.push_back(it->path());
            struct stat st {};
            if (::lstat(it->path().c_str(), &st) != 0) continue;
            total += static_cast<std::uint64_t>(st.st_size);
            fingerprint += it->path().string() + ' ' + std::to_string(st.st_mode) + ' ' +
                           std::to_string(st.st_size) + ' ' + std::to_string(st.st_mtim.tv_sec) +
                           '.' + std::to_string(st.st_mtim.tv_nsec) + '\n';
        }
        if (ec)
            throw RuntimeError("cannot read agent dir " + agent_dir.string() + ": " + ec.message());
        std::lock_guard lock(mutex);
        if (auto it = agent_images.find(fingerprint);
            it != agent_images.end() && fs::exists(it->second, ec))
            return it->second;

        std::sort(files.begin(), files.end());
        Fnv64 hash;
        for (const auto& file : files) {
            hash.add(file.lexically_relative(agent_dir).string());
            struct stat st {};
            if (::lstat(file.c_str(), &st) != 0) continue;
            hash.add(std::to_string(st.st_mode));
            if (S_ISLNK(st.st_mode)) {
                hash.add(fs::read_symlink(file, ec).string());
            } else if (S_ISREG(st.st_mode)) {
                std::ifstream in(file, std::ios::binary);
                char buffer[1 << 16];
                while (in.read(buffer, sizeof buffer) || in.gcount() > 0)
                    hash.add(buffer, static_cast<std::size_t>(in.gcount()));
            }
        }
        fs::path images = state_root / "microvm";
        fs::create_directories(images, ec);
        if (ec) throw RuntimeError("cannot create " + images.string() + ": " + ec.message());
        fs::path image = images / ("agent-" + hash.hex() + ".img");
        if (!fs::exists(image, ec)) {
            fs::path temp = images / (".agent-" + hash.hex() + ".tmp");
            fs::remove(temp, ec);
            // ext4 needs room for its metadata on top of the files.
            std::uint64_t mib = (total + total / 4) / (1 << 20) + 8;
            auto result = run_tool(
                {options.mkfs_ext4, "-q", "-F", "-L", "deskbox-agent", "-b", "4096", "-m", "0",
                 "-N", "256", "-O", "^has_journal", "-E", "lazy_itable_init=0,root_owner=0:0", "-d",
                 agent_dir.string(), temp.string(), std::to_string(mib) + "M"},
                60s, "e2fsprogs");
            if (result.timed_out || result.status.exit_code != 0 || result.status.signal != 0) {
                fs::remove(temp, ec);
                throw RuntimeError("cannot make the agent image from " + agent_dir.string() + " (" +
                                   options.mkfs_ext4 + "): " + trim(result.err + result.out));
            }
            ::chmod(temp.c_str(), 0444);
            fs::rename(temp, image, ec);
            if (ec) throw RuntimeError("cannot rename " + temp.string() + ": " + ec.message());
            // Older agents' images: running VMs keep their open files, new ones use this.
            for (const auto& entry : fs::directory_iterator(images, ec)) {
                auto name = entry.path().filename().string();
                if (name.rfind("agent-", 0) == 0 && entry.path() != image)
                    fs::remove(entry.path(), ec);
            }
        }
        agent_images[fingerprint] = image;
        return image;
    }
};

namespace {

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

}  // namespace

// ------------------------------------------------------------------ MicrovmSandbox

MicrovmSandbox::MicrovmSandbox(Key, std::shared_ptr<Shared> shared, const SandboxSpec& spec,
                               MicrovmImage image, Accelerator accelerator)
    : ProcessSandbox(MicrovmPaths(spec.state_root, spec.id).console_log),
      shared_(std::move(shared)),
      spec_(spec),
      paths_(spec.state_root, spec.id),
      image_(std::move(image)),
      accelerator_(accelerator) {}

MicrovmSandbox::~MicrovmSandbox() {
    try {
        do_kill({});
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deskbox: tearing down microVM sandbox %s: %s\n", spec_.id.c_str(),
                     e.what());
    }
}

void MicrovmSandbox::launch() {
    const auto& options = shared_->options;
    tsc_khz_ = accelerator_ == Accelerator::tcg ? shared_->tsc_khz_cached() : 0;
    write_metadata_locked(json::object());

    // The sandbox's disk: a qcow2 layer over the template image, which QEMU opens read-only.
    auto created = run_tool({options.qemu_img, "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
                             image_.rootfs.string(), paths_.disk.string()},
                            options.stop_timeout, "qemu-utils");
    if (created.timed_out || created.status.exit_code != 0 || created.status.signal != 0)
        throw RuntimeError("qemu-img create " + paths_.disk.string() +
                           " failed: " + trim(created.err + created.out));

    if (!spec_.agent_dir.empty())
        agent_image_ = shared_->agent_image(spec_.state_root, spec_.agent_dir);
    write_file_atomic(paths_.config, guest_config(spec_), 0600);
    write_metadata_locked(json::object());  // now with the agent image
    spawn_qemu_locked(-1);
}

void MicrovmSandbox::write_metadata_locked(const json& extra) {
    json metadata = {{"runtime", kRuntimeName},
                     {"id", spec_.id},
                     {"template_rootfs", spec_.template_rootfs.string()},
                     {"image_dir", image_.dir.string()},
                     {"accelerator", to_string(accelerator_)},
                     {"tsc_khz", tsc_khz_},
                     {"agent_image", agent_image_ ? agent_image_->string() : std::string()},
                     {"spec", spec_to_json(spec_)},
                     {"created_unix", static_cast<std::int64_t>(std::time(nullptr))}};
    if (template_dir_) metadata["template_snapshot"] = template_dir_->string();
    metadata.update(extra);
    // A snapshot's record must outlive a power loss like its memory file; the others are
    // rewritten at every start.
    write_file_atomic(paths_.metadata, metadata.dump(2) + "\n", 0600,
                      extra.contains("snapshot") ? atomic_file::Durability::power_loss
                                                 : atomic_file::Durability::process_crash);
}

void MicrovmSandbox::launch_from_template(const fs::path& template_dir) {
    const auto& options = shared_->options;
    json record = read_json_file(template_dir / "snapshot.json");
    tsc_khz_ = record.value("tsc_khz", std::uint64_t{0});
    template_dir_ = template_dir;
    // Hard links make the sandbox stand on its own: a template snapshot removed later (stale,
    // unusable) must not take the base of a running or saved copy's disk with it. The guest
    // has the template's agent disk mounted, so it gets that very image back.
    fs::path base = paths_.dir / "base.qcow2";
    link_or_copy(template_dir / "disk.qcow2", base);
    std::error_code ec;
    if (fs::exists(template_dir / "agent.img", ec)) {
        link_or_copy(template_dir / "agent.img", paths_.dir / "agent.img");
        agent_image_ = paths_.dir / "agent.img";
    } else {
        agent_image_.reset();
    }
    write_metadata_locked(json::object());
    auto created = run_tool({options.qemu_img, "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b",
                             base.string(), paths_.disk.string()},
                            options.stop_timeout, "qemu-utils");
    if (created.timed_out || created.status.exit_code != 0 || created.status.signal != 0)
        throw RuntimeError("qemu-img create " + paths_.disk.string() +
                           " failed: " + trim(created.err + created.out));
    // Read at boot only, which the template did; the device must still be there.
    write_file_atomic(paths_.config, guest_config(spec_), 0600);
    std::lock_guard lock(mutex_);
    restore_locked(template_dir / "memory", /*consume=*/false);
    // The template's agent was connected before its save; it waits for a new host.
    agent_connected_before_ = true;
}

void MicrovmSandbox::spawn_qemu_locked(int incoming_fd) {
    const auto& options = shared_->options;
    UniqueFd agent_listener = listen_unix(paths_.agent_socket);
    UniqueFd qmp_listener = listen_unix(paths_.qmp_socket);
    UniqueFd tap;
    if (spec_.network) {
        if (!spec_.attachment.open_tap)
            throw SpecError("network",
                            "a microVM with a network needs the server's sandbox "
                            "network (attachment.open_tap is not set)");
        try {
            tap = spec_.attachment.open_tap();
        } catch (const std::exception& e) {
            throw RuntimeError(std::string("cannot attach the microVM's network: ") + e.what());
        }
    }
    command_ = build_qemu_command(options, spec_, paths_, image_, agent_image_, accelerator_,
                                  tsc_khz_, agent_listener.get(), qmp_listener.get(), tap.get());
    if (incoming_fd >= 0) command_.insert(command_.end(), {"-incoming", "defer"});

    SpawnOptions spawn;
    spawn.argv = command_;
    spawn.stdout_file = paths_.qemu_log.string();
    spawn.stderr_file = paths_.qemu_log.string();
    spawn.new_process_group = true;  // our own signals to the server never reach it
    spawn.keep_fds = {agent_listener.get(), qmp_listener.get()};
    if (incoming_fd >= 0) spawn.keep_fds.push_back(incoming_fd);
    if (tap) spawn.keep_fds.push_back(tap.get());
    try {
        qemu_ = QemuProcess::spawn(spawn);
    } catch (const std::system_error& e) {
        throw RuntimeError("cannot run " + options.qemu + ": " + e.what() +
                           " (apt-get install qemu-system-x86)");
    }
    // QEMU has its copies; ours would keep the sockets listening (and the tap up) after QEMU died.
    agent_listener.reset();
    qmp_listener.reset();
    tap.reset();
    write_file_atomic(paths_.pid_file, std::to_string(qemu_.pid()) + "\n", 0600);

    auto deadline = Clock::now() + options.start_timeout;
    try {
        qmp_ = QmpClient::connect(paths_.qmp_socket, deadline, [this]() -> std::string {
            if (qemu_.running()) return {};
            auto status = qemu_.status();
            return "QEMU exited with code " + std::to_string(status ? status->exit_code : -1);
        });
    } catch (const RuntimeError& e) {
        // QEMU may be on its way out (an abort after the greeting): let it finish, so the
        // error carries its exit and its last words.
        qemu_.wait(std::chrono::milliseconds(2000));
        if (!qemu_.running()) {
            auto status = qemu_.status();
            std::string cause = trim(read_tail(paths_.qemu_log, 4096));
            throw RuntimeError(
                "QEMU failed to start (" +
                (status && status->signal
                     ? "killed by " + signal_name(status->signal)
                     : "exit code " + std::to_string(status ? status->exit_code : -1)) +
                "): " + (cause.empty() ? "no message" : cause));
        }
        throw RuntimeError(std::string("QEMU did not answer on its control socket: ") + e.what() +
                           "; " + trim(read_tail(paths_.qemu_log, 2048)));
    }
}

std::string MicrovmSandbox::console_lines(std::size_t lines) {
    return console_excerpt(console_tail_locked(16384), lines);
}

std::string MicrovmSandbox::failure_detail() {
    std::string detail = "\n--- last lines of the serial console (" + paths_.console_log.string() +
                         ") ---\n" + console_lines(kConsoleLinesInErrors);
    std::string qemu_said = trim(read_tail(paths_.qemu_log, 1024));
    if (!qemu_said.empty()) detail += "\n--- QEMU ---\n" + qemu_said;
    return detail;
}

// Where each vCPU is (its instruction pointer, and whether it halted), for a guest that never got
// as far as its agent: the rare TCG boot stall leaves a console that just stops, and the
// instruction pointers are what can tell a spin from a wait. Empty if QEMU cannot say.
std::string MicrovmSandbox::vcpu_whereabouts_locked() {
    if (!alive_locked()) return {};
    try {
        const std::string dump =
            qmp_.execute("human-monitor-command", {{"command-line", "info registers -a"}})
                .get<std::string>();
        std::string out;
        std::istringstream lines(dump);
        for (std::string line; std::getline(lines, line);) {
            // RIP in long mode; EIP before it (early boot, or a CPU not started yet).
            auto ip = line.find("RIP=");
            if (ip == std::string::npos) ip = line.find("EIP=");
            if (line.rfind("CPU#", 0) == 0)
                out += "\n  " + line.substr(0, 100);
            else if (ip != std::string::npos)
                out += "\n  " + line.substr(ip, 100);
            else if (auto hlt = line.find("HLT="); hlt != std::string::npos)
                out += " " + line.substr(hlt, 5);
        }
        return out.empty() ? out : "\n--- vCPUs (QEMU's info registers) ---" + out;
    } catch (const std::exception&) {
        return {};
    }
}

ExitInfo MicrovmSandbox::describe_exit_locked() {
    return classify_vm_exit({kill_requested_, qemu_.status(), qemu_.adopted(),
                             read_tail(paths_.console_log, 65536),
                             trim(read_tail(paths_.qemu_log, 512))});
}

// virtio-serial has no connection boundaries: the guest only learns that the host side
// closed from a control message, and if a new host connection follows before the agent saw
// the old one end, the agent carries on with its old session and never says hello to the
// new one. So a reconnect waits until QEMU has dropped the previous connection and gives the
// guest a moment to notice; and if the agent stays silent anyway, it bounces the connection.
bool MicrovmSandbox::agent_port_connected_locked() {
    for (const auto& chardev : qmp_.execute("query-chardev"))
        if (chardev.value("label", "") == "agent")
            return chardev.value("filename", "").rfind("disconnected:", 0) != 0;
    return false;
}

UniqueFd MicrovmSandbox::connect_agent(std::chrono::milliseconds timeout) {
    auto started = Clock::now();
    auto deadline = started + timeout;
    auto dead_reason = [this]() -> std::optional<std::string> {
        std::lock_guard lock(mutex_);
        if (alive_locked()) return std::nullopt;
        if (snapshotted_) return std::string("it is saved to a snapshot (restore it first)");
        return exit_ ? exit_->reason : std::string("not running");
    };
    auto fail = [&](const std::string& what) -> RuntimeError {
        std::lock_guard lock(mutex_);
        return RuntimeError("sandbox " + spec_.id + ": " + what + failure_detail());
    };
    auto check_time = [&](const std::string& what) {
        if (auto reason = dead_reason())
            throw fail("the VM ended before its agent connected: " + *reason);
        if (Clock::now() >= deadline) {
            auto waited =
                std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
            std::string cpus;
            {
                std::lock_guard lock(mutex_);
                cpus = vcpu_whereabouts_locked();
            }
            throw fail(what + " within " + std::to_string(waited.count()) + " ms (accelerator " +
                       to_string(accelerator_) + ")" + cpus);
        }
    };
    bool reconnect;
    {
        std::lock_guard lock(mutex_);
        reconnect = agent_connected_before_;
    }
    while (true) {
        if (reconnect) {
            bool saw_connected = false;
            while (true) {
                {
                    std::lock_guard lock(mutex_);
                    if (alive_locked() && !agent_port_connected_locked()) break;
                }
                saw_connected = true;
                check_time("the previous connection to the agent was not closed");
                std::this_thread::sleep_for(50ms);
            }
            auto settle_until = Clock::now() + (saw_connected ? 1000ms : 200ms);
            while (Clock::now() < settle_until) {
                check_time("the agent did not connect again");
                std::this_thread::sleep_for(50ms);
            }
        }
        UniqueFd fd;
        try {
            fd = connect_unix_retry(paths_.agent_socket, deadline,
                                    [&]() { return dead_reason().value_or(std::string()); });
        } catch (const RuntimeError& e) {
            throw fail(e.what());
        }
        // QEMU accepts at once; the guest's agent speaks first (its hello) once it has opened
        // the port, so readable data means a live agent on the other end.
        auto bounce_at = Clock::now() + 10s;
        while (true) {
            pollfd p{fd.get(), POLLIN, 0};
            int ready = ::poll(&p, 1, 100);
            if (ready < 0 && errno != EINTR)
                throw fail(std::string("poll on the agent socket: ") + std::strerror(errno));
            if (ready > 0) {
                char byte;
                ssize_t n = ::recv(fd.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
                if (n > 0) {
                    std::lock_guard lock(mutex_);
                    agent_connected_before_ = true;
                    return fd;
                }
                if (n == 0 || (p.revents & (POLLHUP | POLLERR))) {
                    // QEMU closes its sockets while exiting: let it finish, so the reason is
                    // its exit (the guest's console says why), not "closed".
                    {
                        std::lock_guard lock(mutex_);
                        if (qemu_.pid() > 0 && !exit_) qemu_.wait(shared_->options.stop_timeout);
                    }
                    auto reason = dead_reason();
                    throw fail("the VM ended before its agent connected: " +
                               reason.value_or("QEMU closed the agent socket"));
                }
            }
            check_time("the agent did not connect");
            if (reconnect && Clock::now() >= bounce_at) break;  // still in its old session
        }
    }
}

json MicrovmSandbox::qmp(const std::string& command, const json& arguments) {
    std::lock_guard lock(mutex_);
    if (!alive_locked()) throw RuntimeError("sandbox " + spec_.id + " is not running");
    return qmp_.execute(command, arguments);
}

void MicrovmSandbox::set_network_attachment(NetworkAttachment attachment) {
    std::lock_guard lock(mutex_);
    spec_.attachment = std::move(attachment);
}

void MicrovmSandbox::pause() {
    std::lock_guard lock(mutex_);
    require_running_locked("pause");
    if (paused_) return;
    qmp_.execute("stop");
    paused_ = true;
}

void MicrovmSandbox::resume() {
    std::lock_guard lock(mutex_);
    require_running_locked("resume");
    if (!paused_) return;
    qmp_.execute("cont");
    paused_ = false;
}

namespace {

// What QEMU wrote to its log from `offset` on (this run's words, not an earlier run's).
std::string log_since(const fs::path& log, std::uintmax_t offset) {
    std::ifstream in(log, std::ios::binary);
    if (!in) return {};
    in.seekg(static_cast<std::streamoff>(offset));
    std::string text((std::istreambuf_iterator<char>(in)), {});
    if (text.size() > 2048) text = text.substr(text.size() - 2048);
    return trim(text);
}

std::uintmax_t file_size_or_zero(const fs::path& file) {
    std::error_code ec;
    auto size = fs::file_size(file, ec);
    return ec ? 0 : size;
}

// The name under which the snapshot's fd is handed to QEMU (getfd).
constexpr const char* kSnapshotFdName = "deskbox-snapshot";

}  // namespace

bool MicrovmSandbox::snapshotted() {
    std::lock_guard lock(mutex_);
    return snapshotted_ && !torn_down_;
}

std::uint64_t MicrovmSandbox::snapshot() {
    std::lock_guard lock(mutex_);
    const std::string what = "cannot snapshot sandbox " + spec_.id + ": ";
    if (snapshotted_) throw RuntimeError(what + "it is already saved to a snapshot");
    if (!alive_locked())
        throw RuntimeError(what + "it is not running (" + (exit_ ? exit_->reason : "") + ")");
    const auto& options = shared_->options;
    fs::path temp = paths_.memory;
    temp += ".tmp";
    UniqueFd file(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!file)
        throw RuntimeError(what + "cannot create " + temp.string() + ": " + std::strerror(errno));
    bool was_paused = paused_;
    // A failed save leaves the VM as it was and no partial memory file.
    auto fail = [&](const std::string& reason) -> RuntimeError {
        std::error_code ec;
        fs::remove(temp, ec);
        if (!was_paused && alive_locked()) {
            try {
                qmp_.execute("cont");
                paused_ = false;
            } catch (const std::exception&) {
                paused_ = true;
            }
        }
        return RuntimeError(what + reason);
    };
    try {
        if (!paused_) {
            qmp_.execute("stop");
            paused_ = true;
        }
        // A local file: the default cap (meant for links shared with running guests) only
        // slows the save down.
        qmp_.execute("migrate-set-parameters", {{"max-bandwidth", std::int64_t{1} << 36}});
        qmp_.execute_with_fd("getfd", {{"fdname", kSnapshotFdName}}, file.get());
        qmp_.execute("migrate", {{"uri", std::string("fd:") + kSnapshotFdName}});
    } catch (const RuntimeError& e) {
        throw fail(e.what());
    }
    file.reset();  // QEMU writes through its own copy
    auto deadline = Clock::now() + options.snapshot_timeout;
    while (true) {
        json info;
        try {
            info = qmp_.execute("query-migrate");
        } catch (const RuntimeError& e) {
            throw fail(e.what());
        }
        std::string status = info.value("status", "");
        if (status == "completed") break;
        if (status == "failed" || status == "cancelled")
            throw fail("QEMU's migration " + status + ": " +
                       info.value("error-desc", "no reason given"));
        if (Clock::now() >= deadline) {
            try {
                qmp_.execute("migrate_cancel");
            } catch (const std::exception&) {
            }
            throw fail("the save did not complete within " +
                       std::to_string(options.snapshot_timeout.count()) + " ms (status " + status +
                       ", " + std::to_string(file_size_or_zero(temp)) + " bytes written)");
        }
        std::this_thread::sleep_for(20ms);
    }
    // quit closes disk.qcow2 cleanly: the snapshot is memory + this disk layer.
    try {
        qmp_.execute("quit", json::object(), 2s);
    } catch (const std::exception&) {
        // QEMU may close the socket before answering; the wait below tells.
    }
    if (!qemu_.wait(options.stop_timeout)) {
        qemu_.signal(SIGKILL);
        qemu_.wait();
    }
    qmp_.close();
    snapshotted_ = true;
    paused_ = false;
    std::error_code ec;
    for (const auto& path : {paths_.agent_socket, paths_.qmp_socket, paths_.pid_file})
        fs::remove(path, ec);
    // From here QEMU is gone: a failure leaves the sandbox snapshotted without a usable
    // memory file, which restore then reports.
    atomic_file::sync_with_directory(temp);
    fs::rename(temp, paths_.memory, ec);
    if (ec) throw RuntimeError(what + "rename " + temp.string() + ": " + ec.message());
    atomic_file::sync_with_directory(paths_.memory);
    // The guest has the agent disk mounted: keep that exact image with the snapshot (a newer
    // agent replaces the shared one).
    if (agent_image_ && agent_image_->parent_path() != paths_.dir) {
        link_or_copy(*agent_image_, paths_.dir / "agent.img");
        agent_image_ = paths_.dir / "agent.img";
    }
    std::uint64_t bytes = file_size_or_zero(paths_.memory);
    write_metadata_locked({{"snapshot",
                            {{"memory", paths_.memory.string()},
                             {"bytes", bytes},
                             {"saved_unix", static_cast<std::int64_t>(std::time(nullptr))}}}});
    return bytes;
}

bool MicrovmSandbox::release_snapshot() {
    std::lock_guard lock(mutex_);
    if (!snapshotted_ || torn_down_) return false;
    torn_down_ = true;  // the destructor leaves the files alone
    shared_->live.erase(spec_.state_root, spec_.id);
    return true;
}

bool MicrovmSandbox::release() {
    std::lock_guard lock(mutex_);
    if (torn_down_ || snapshotted_ || !alive_locked()) return false;
    qmp_.close();  // its QMP socket listens again, for the next server
    qemu_.release();
    torn_down_ = true;  // the destructor leaves QEMU and the files alone
    shared_->live.erase(spec_.state_root, spec_.id);
    return true;
}

UniqueFd MicrovmSandbox::adopted_network_namespace() {
    std::lock_guard lock(mutex_);
    const std::string what = "cannot find the network of sandbox " + spec_.id + ": ";
    if (!spec_.network) return {};
    if (!alive_locked()) throw RuntimeError(what + "it is not running");
    // Its command line names the tap's fd number in QEMU: -netdev tap,id=net0,fd=N.
    int tap_number = -1;
    for (std::size_t i = 0; i + 1 < command_.size(); ++i)
        if (command_[i] == "-netdev" && command_[i + 1].rfind("tap,", 0) == 0)
            if (auto at = command_[i + 1].find(",fd="); at != std::string::npos)
                tap_number = std::atoi(command_[i + 1].c_str() + at + 4);
    if (tap_number < 0) throw RuntimeError(what + "QEMU's command line has no tap device");
    UniqueFd pidfd = qemu_.open_pidfd();
    if (!pidfd) throw RuntimeError(what + "pidfd_open: " + std::strerror(errno));
    UniqueFd tap(static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.get(), tap_number, 0)));
    if (!tap) throw RuntimeError(what + "pidfd_getfd of QEMU's tap: " + std::strerror(errno));
    UniqueFd netns(::ioctl(tap.get(), TUNGETDEVNETNS));
    if (!netns) throw RuntimeError(what + "TUNGETDEVNETNS: " + std::strerror(errno));
    return netns;
}

std::uint64_t MicrovmSandbox::snapshot_bytes() {
    std::lock_guard lock(mutex_);
    return snapshotted_ ? file_size_or_zero(paths_.memory) : 0;
}

void MicrovmSandbox::restore_from_snapshot() {
    std::lock_guard lock(mutex_);
    const std::string what =
        "cannot restore sandbox " + spec_.id + " from " + paths_.memory.string() + ": ";
    if (torn_down_) throw RuntimeError(what + "the sandbox was killed");
    if (!snapshotted_) throw RuntimeError(what + "it is not saved to a snapshot");
    restore_locked(paths_.memory, /*consume=*/true);
    snapshotted_ = false;
    write_metadata_locked(json::object());  // no longer snapshotted
}

void MicrovmSandbox::restore_locked(const fs::path& memory_file, bool consume) {
    const std::string what =
        "cannot restore sandbox " + spec_.id + " from " + memory_file.string() + ": ";
    UniqueFd memory(::open(memory_file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!memory) throw RuntimeError(what + "cannot open it: " + std::strerror(errno));
    const auto& options = shared_->options;
    auto log_offset = file_size_or_zero(paths_.qemu_log);
    auto qemu_said = [&]() -> std::string {
        std::string said = log_since(paths_.qemu_log, log_offset);
        return said.empty() ? std::string() : " (QEMU: " + said + ")";
    };
    auto stop_qemu = [&] {
        if (qemu_.running()) {
            qemu_.signal(SIGKILL);
            qemu_.wait();
        }
        qmp_.close();
        std::error_code ec;
        for (const auto& path : {paths_.agent_socket, paths_.qmp_socket, paths_.pid_file})
            fs::remove(path, ec);
    };
    try {
        spawn_qemu_locked(memory.get());
        qmp_.execute("migrate-incoming", {{"uri", "fd:" + std::to_string(memory.get())}});
        memory.reset();
        auto deadline = Clock::now() + options.snapshot_timeout;
        // QEMU 7.2 exits when a load fails (newer ones report `failed` first).
        while (true) {
            std::string status = qmp_.execute("query-migrate").value("status", "");
            if (status == "completed") break;
            if (status == "failed") throw RuntimeError("QEMU could not load it");
            if (Clock::now() >= deadline)
                throw RuntimeError("the load did not complete within " +
                                   std::to_string(options.snapshot_timeout.count()) + " ms");
            std::this_thread::sleep_for(20ms);
        }
        // Saved stopped, so it arrives paused.
        if (qmp_.execute("query-status").value("status", "") != "running") qmp_.execute("cont");
        std::string status = qmp_.execute("query-status").value("status", "");
        if (status != "running") throw RuntimeError("the VM is " + status + " after cont");
    } catch (const RuntimeError& e) {
        // Let a QEMU that is exiting finish writing why.
        if (qemu_.pid() > 0) qemu_.wait(1000ms);
        bool exited = qemu_.pid() > 0 && !qemu_.running();
        std::string said = qemu_said();
        stop_qemu();
        throw RuntimeError(what + (exited ? "QEMU refused it and exited; " : "") + e.what() + said);
    }
    paused_ = false;
    if (consume) {
        // The disk moves on from here; the old memory no longer matches it.
        std::error_code ec;
        fs::remove(memory_file, ec);
    }
}

void MicrovmSandbox::do_kill(const KillOptions& options) {
    std::lock_guard lock(mutex_);
    if (torn_down_) return;
    const auto& runtime_options = shared_->options;
    if (snapshotted_ && !exit_) kill_requested_ = true;
    if (qemu_.running()) {
        if (!exit_) kill_requested_ = true;
        // quit lets QEMU close its files cleanly (a kept disk.qcow2 stays consistent);
        // SIGKILL is the fallback for a QEMU that no longer answers.
        bool asked = false;
        if (qmp_.connected()) {
            try {
                qmp_.execute("quit", json::object(), 2s);
                asked = true;
            } catch (const std::exception&) {
                // QEMU may close the socket before answering; the wait below tells.
                asked = true;
            }
        }
        if (!asked || !qemu_.wait(runtime_options.stop_timeout)) {
            qemu_.signal(SIGKILL);
            qemu_.wait();
        }
    }
    qmp_.close();
    finish_kill_locked([&] {
        teardown(spec_.state_root, spec_.id, options.keep_state, runtime_options.stop_timeout);
    });
    shared_->live.erase(spec_.state_root, spec_.id);
}

// ------------------------------------------------------------------ MicrovmRuntime

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
    if (!missing.empty()) {
        std::string name = template_name(template_rootfs);
        std::string command = kMicrovmBuildCommand;
        command.replace(command.find("TEMPLATE"), 8, name);
        throw RuntimeError("the microVM image of template '" + name + "' is not built (" + missing +
                           " missing in " + image.dir.string() + "); build it with: " + command);
    }
    return image;
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
    MicrovmImage image = image_for(spec.template_rootfs);
    Accelerator accel = accelerator().accelerator;

    if (shared_->live.contains(spec.state_root, spec.id))
        throw SpecError("id", "sandbox '" + spec.id + "' already runs in this state root");
    fs::create_directories(spec.state_root / "sandboxes", ec);
    if (ec)
        throw RuntimeError("cannot create " + (spec.state_root / "sandboxes").string() + ": " +
                           ec.message());
    MicrovmPaths paths(spec.state_root, spec.id);
    if (::mkdir(paths.dir.c_str(), 0700) != 0) {
        if (errno == EEXIST)
            throw RuntimeError("sandbox directory " + paths.dir.string() +
                               " already exists (a leftover? see list_leftovers)");
        throw RuntimeError("mkdir " + paths.dir.string() + ": " + std::strerror(errno));
    }
    // From here on the sandbox owns the directory: its destructor removes it and whatever
    // launch() managed to create when launch() throws.
    auto sandbox = std::make_unique<MicrovmSandbox>(MicrovmSandbox::Key(), shared_, spec,
                                                    std::move(image), accel);
    shared_->live.insert(spec.state_root, spec.id);
    return sandbox;
}

std::vector<std::string> MicrovmRuntime::unowned(const fs::path& state_root, bool saved) {
    std::vector<std::string> found;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(state_root / "sandboxes", ec)) {
        if (!entry.is_directory(ec)) continue;
        // Only directories that say they are ours: one without sandbox.json is the container
        // runtime's to clean (it claims those).
        std::ifstream in(entry.path() / "sandbox.json");
        if (!in) continue;
        auto metadata = json::parse(in, nullptr, false);
        if (!metadata.is_object() || metadata.value("runtime", "") != kRuntimeName) continue;
        // Saved sandboxes wait for a server to adopt them; the rest are leftovers.
        bool is_saved = metadata.contains("snapshot") && fs::exists(entry.path() / "memory", ec);
        if (is_saved != saved) continue;
        std::string id = entry.path().filename().string();
        try {
            validate_id(id);
        } catch (const SpecError&) {
            continue;
        }
        if (!shared_->live.contains(state_root, id)) found.push_back(id);
    }
    std::sort(found.begin(), found.end());
    return found;
}

std::vector<std::string> MicrovmRuntime::list_leftovers(const fs::path& state_root) {
    return unowned(state_root, /*saved=*/false);
}

void MicrovmRuntime::cleanup_leftover(const fs::path& state_root, const std::string& id) {
    validate_id(id);
    if (shared_->live.contains(state_root, id))
        throw RuntimeError("sandbox " + id + " is live in this server; kill it instead");
    teardown(state_root, id, /*keep_state=*/false, shared_->options.stop_timeout);
}

std::vector<std::string> MicrovmRuntime::residue(const fs::path& state_root,
                                                 const std::string& id) const {
    return residue_of(state_root, id, true);
}

std::vector<std::string> MicrovmRuntime::list_snapshotted(const fs::path& state_root) {
    return unowned(state_root, /*saved=*/true);
}

// What a server left of sandbox `id` for the next one: its spec, image and sandbox, built
// from sandbox.json and registered as live (a throw after that tears it down). `saved`: a
// snapshot, else a running VM. Throws RuntimeError starting with `what`.
std::unique_ptr<MicrovmSandbox> MicrovmRuntime::adoptable(const fs::path& state_root,
                                                          const std::string& id, bool saved,
                                                          const std::string& what) {
    validate_id(id);
    MicrovmPaths paths(state_root, id);
    json metadata;
    SandboxSpec spec;
    try {
        metadata = read_json_file(paths.metadata);
        if (metadata.value("runtime", "") != kRuntimeName || metadata.contains("snapshot") != saved)
            throw RuntimeError(paths.metadata.string() + " is not a " +
                               (saved ? "saved" : "running") + " microVM sandbox");
        spec = spec_from_json(metadata.at("spec"));
    } catch (const json::exception& e) {
        throw RuntimeError(what + paths.metadata.string() + ": " + e.what());
    } catch (const RuntimeError& e) {
        throw RuntimeError(what + e.what());
    }
    spec.id = id;
    spec.state_root = state_root;
    MicrovmImage image;
    image.dir = metadata.value("image_dir", "");
    image.kernel = image.dir / "vmlinuz";
    image.initramfs = image.dir / "initramfs.img";
    image.rootfs = image.dir / "rootfs.ext4";
    Accelerator accel = parse_accelerator(metadata.value("accelerator", "tcg"));
    if (!shared_->live.insert(state_root, id))
        throw RuntimeError(what + "it is live in this server");
    auto sandbox = std::make_unique<MicrovmSandbox>(MicrovmSandbox::Key(), shared_, spec,
                                                    std::move(image), accel);
    sandbox->agent_connected_before_ = true;
    sandbox->tsc_khz_ = metadata.value("tsc_khz", std::uint64_t{0});
    std::string agent_image = metadata.value("agent_image", "");
    if (!agent_image.empty()) sandbox->agent_image_ = agent_image;
    std::string template_dir = metadata.value("template_snapshot", "");
    if (!template_dir.empty()) sandbox->template_dir_ = template_dir;
    return sandbox;
}

std::unique_ptr<MicrovmSandbox> MicrovmRuntime::adopt_snapshot(const fs::path& state_root,
                                                               const std::string& id) {
    const std::string what = "cannot adopt the snapshot of sandbox " + id + ": ";
    MicrovmPaths paths(state_root, id);
    std::error_code ec;
    if (!fs::is_regular_file(paths.memory, ec))
        throw RuntimeError(what + "no memory file " + paths.memory.string());
    auto sandbox = adoptable(state_root, id, /*saved=*/true, what);
    sandbox->snapshotted_ = true;
    return sandbox;
}

std::vector<std::string> MicrovmRuntime::list_running(const fs::path& state_root) {
    std::vector<std::string> running;
    for (const auto& id : unowned(state_root, /*saved=*/false)) {
        MicrovmPaths paths(state_root, id);
        if (is_our_qemu(read_pid_file(paths.pid_file), paths.dir)) running.push_back(id);
    }
    return running;
}

std::unique_ptr<MicrovmSandbox> MicrovmRuntime::adopt_running(const fs::path& state_root,
                                                              const std::string& id) {
    const std::string what = "cannot adopt the running microVM " + id + ": ";
    MicrovmPaths paths(state_root, id);
    const pid_t pid = read_pid_file(paths.pid_file);
    if (!is_our_qemu(pid, paths.dir)) throw RuntimeError(what + "its QEMU is not running");
    auto sandbox = adoptable(state_root, id, /*saved=*/false, what);
    // From here a throw destroys `sandbox`, which kills that QEMU: a VM we cannot drive is
    // broken, and is removed like any leftover.
    try {
        sandbox->qemu_ = QemuProcess::adopt(pid);
        // The pid was checked before the pidfd pinned it: check that it is still the same one.
        if (!is_our_qemu(pid, paths.dir)) throw RuntimeError("its QEMU ended");
        std::ifstream cmdline("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
        for (std::string arg; std::getline(cmdline, arg, '\0');) sandbox->command_.push_back(arg);
        std::error_code ec;
        if (!fs::exists(fs::symlink_status(paths.qmp_socket, ec)))
            throw RuntimeError("its QMP socket " + paths.qmp_socket.string() + " is gone");
        std::lock_guard lock(sandbox->mutex_);
        // A live QEMU answers at once; one that does not is not waited for long.
        auto deadline =
            Clock::now() + std::min<std::chrono::milliseconds>(shared_->options.start_timeout, 5s);
        MicrovmSandbox* vm = sandbox.get();
        sandbox->qmp_ = QmpClient::connect(paths.qmp_socket, deadline, [vm]() -> std::string {
            return vm->qemu_.running() ? std::string() : std::string("QEMU ended");
        });
        const std::string status = sandbox->qmp_.execute("query-status").value("status", "");
        if (status == "paused")
            sandbox->paused_ = true;
        else if (status != "running")
            throw RuntimeError("the VM is " + status + " (" +
                               console_excerpt(read_tail(paths.console_log, 4096), 3) + ")");
    } catch (const std::exception& e) {
        throw RuntimeError(what + e.what());
    }
    return sandbox;
}

std::string MicrovmRuntime::template_generation(const SandboxSpec& spec,
                                                const MicrovmImage& image) {
    Fnv64 hash;
    for (const auto& file : {image.kernel, image.initramfs, image.rootfs})
        hash.add(file_version(file));
    // A snapshot loads only into the QEMU that saved it (same version, same devices).
    std::string qemu = shared_->options.qemu;
    if (qemu.find('/') == std::string::npos) {
        std::lock_guard lock(shared_->mutex);
        if (shared_->qemu_path.empty())
            shared_->qemu_path =
                trim(run_tool({"sh", "-c", "command -v " + shell_quote(qemu)}, 5s, "sh").out);
        qemu = shared_->qemu_path;
    }
    hash.add(file_version(qemu));
    if (!spec.agent_dir.empty())
        hash.add(shared_->agent_image(spec.state_root, spec.agent_dir).filename().string());
    return hash.hex();
}

std::string MicrovmRuntime::template_key(const SandboxSpec& spec, const MicrovmImage& image,
                                         Accelerator accel) {
    const auto& options = shared_->options;
    Fnv64 hash;
    hash.add("deskbox template snapshot v1");
    hash.add(template_generation(spec, image));
    hash.add(to_string(accel));
    hash.add(std::to_string(accel == Accelerator::tcg ? shared_->tsc_khz_cached() : 0));
    hash.add(options.extra_kernel_args);
    hash.add(std::to_string(spec.limits.memory_mb));
    hash.add(std::to_string(std::max(1, static_cast<int>(std::ceil(spec.limits.cpus - 1e-9)))));
    hash.add(spec.network ? "network" : "no network");
    hash.add(std::to_string(spec.uid) + ':' + std::to_string(spec.gid));
    for (const auto& arg : spec.entry) hash.add(arg);
    // The guest's environment, except what names the sandbox (the host gives it afterwards).
    auto env = default_guest_env(spec);
    for (const auto& [key, value] : spec.env) env[key] = value;
    env.erase("DESKBOX_SANDBOX_ID");
    for (const auto& [key, value] : env) hash.add(key + '=' + value);
    return hash.hex();
}

fs::path MicrovmRuntime::template_snapshot_dir(const SandboxSpec& spec) {
    validate_spec(spec);
    MicrovmImage image = image_for(spec.template_rootfs);
    Accelerator accel = accelerator().accelerator;
    return spec.state_root / "microvm" / "templates" / template_key(spec, image, accel);
}

bool MicrovmRuntime::template_snapshot_complete(const fs::path& dir) {
    std::error_code ec;
    for (const char* name : {"snapshot.json", "memory", "disk.qcow2"})
        if (!fs::is_regular_file(dir / name, ec)) return false;
    return true;
}

bool MicrovmRuntime::has_template_snapshot(const fs::path& state_root,
                                           const fs::path& template_rootfs) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(state_root / "microvm" / "templates", ec)) {
        if (!template_snapshot_complete(entry.path())) continue;
        try {
            std::ifstream in(entry.path() / "snapshot.json");
            if (json::parse(in).value("template_rootfs", "") == template_rootfs.string())
                return true;
        } catch (const json::exception&) {
            // A damaged record: that snapshot is not usable for this template.
        }
    }
    return false;
}

fs::path MicrovmRuntime::ensure_template_snapshot(
    const SandboxSpec& spec, const std::function<void(MicrovmSandbox&)>& ready) {
    fs::path dir = template_snapshot_dir(spec);
    if (template_snapshot_complete(dir)) return dir;
    std::shared_ptr<std::mutex> maker;
    {
        std::lock_guard lock(shared_->mutex);
        auto& slot = shared_->template_makers[dir.string()];
        if (!slot) slot = std::make_shared<std::mutex>();
        maker = slot;
    }
    std::lock_guard making(*maker);
    if (template_snapshot_complete(dir)) return dir;

    SandboxSpec throwaway = spec;
    throwaway.id = "template-" + dir.filename().string().substr(0, 12) + "-" + random::hex(3);
    throwaway.hostname = "deskbox";
    fs::path temp = dir.parent_path() / ("." + dir.filename().string() + "." + random::hex(3));
    std::error_code ec;
    try {
        auto sandbox = start_microvm(throwaway);
        ready(*sandbox);
        sandbox->snapshot();
        fs::create_directories(temp);
        const auto& paths = sandbox->paths();
        fs::rename(paths.memory, temp / "memory");
        fs::rename(paths.disk, temp / "disk.qcow2");
        if (sandbox->agent_image_) link_or_copy(*sandbox->agent_image_, temp / "agent.img");
        // Restores only ever read these.
        for (const char* name : {"memory", "disk.qcow2", "agent.img"})
            ::chmod((temp / name).c_str(), 0444);
        json record = {{"key", dir.filename().string()},
                       {"template_rootfs", spec.template_rootfs.string()},
                       {"generation", template_generation(spec, image_for(spec.template_rootfs))},
                       {"memory_mb", spec.limits.memory_mb},
                       {"accelerator", to_string(sandbox->accelerator())},
                       {"tsc_khz", sandbox->tsc_khz_},
                       {"memory_bytes", file_size_or_zero(temp / "memory")},
                       {"saved_unix", static_cast<std::int64_t>(std::time(nullptr))}};
        write_file_atomic(temp / "snapshot.json", record.dump(2) + "\n", 0644,
                          atomic_file::Durability::power_loss);
        atomic_file::sync_with_directory(temp / "disk.qcow2");
        sandbox->kill();
        fs::remove_all(dir, ec);
        fs::rename(temp, dir);
        prune_template_snapshots(dir, record);
    } catch (const std::exception& e) {
        fs::remove_all(temp, ec);
        throw RuntimeError("cannot make the template snapshot " + dir.string() + ": " + e.what());
    }
    return dir;
}

void MicrovmRuntime::prune_template_snapshots(const fs::path& made, const json& record) {
    // Snapshots of the same template from an older image, QEMU or agent are never loaded
    // again. Copies restored from them hard-linked what they need, so removing is safe.
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(made.parent_path(), ec)) {
        if (entry.path() == made || entry.path().filename().string().rfind('.', 0) == 0) continue;
        std::ifstream in(entry.path() / "snapshot.json");
        auto other = json::parse(in, nullptr, false);
        if (!other.is_object() || other.value("template_rootfs", "") != record["template_rootfs"])
            continue;
        if (other.value("generation", "") != record["generation"]) fs::remove_all(entry.path(), ec);
    }
}

std::unique_ptr<MicrovmSandbox> MicrovmRuntime::start_from_template(const SandboxSpec& spec,
                                                                    const fs::path& dir) {
    if (!template_snapshot_complete(dir))
        throw RuntimeError("no template snapshot in " + dir.string());
    auto sandbox = prepare(spec);
    sandbox->launch_from_template(dir);
    return sandbox;
}

std::size_t MicrovmRuntime::remove_template_snapshots(const fs::path& state_root) {
    std::size_t removed = 0;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(state_root / "microvm" / "templates", ec)) {
        fs::remove_all(entry.path(), ec);
        ++removed;
    }
    return removed;
}

}  // namespace deskbox::runtime
