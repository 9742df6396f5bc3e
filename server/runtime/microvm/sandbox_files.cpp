#include "server/runtime/microvm/sandbox_files.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "server/runtime/microvm/qemu_command.hpp"
#include "server/runtime/runtime_util.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

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

namespace {

json volumes_json(const std::vector<VolumeMount>& volumes) {
    json list = json::array();
    for (const auto& v : volumes)
        list.push_back({{"source", v.source.string()},
                        {"destination", v.destination},
                        {"read_only", v.read_only}});
    return list;
}

}  // namespace

json spec_to_json(const SandboxSpec& spec) {
    return {{"id", spec.id},
            {"template_rootfs", spec.template_rootfs.string()},
            {"agent_dir", spec.agent_dir.string()},
            {"egress_ca", spec.egress_ca},
            {"entry", spec.entry},
            {"env", spec.env},
            {"width", spec.width},
            {"height", spec.height},
            {"dpi", spec.dpi},
            {"limits", limits_to_json(spec.limits)},
            {"network", spec.network},
            {"hostname", spec.hostname},
            {"uid", spec.uid},
            {"gid", spec.gid},
            {"volumes", volumes_json(spec.volumes)}};
}

SandboxSpec spec_from_json(const json& j) {
    SandboxSpec spec;
    spec.id = j.at("id").get<std::string>();
    spec.template_rootfs = j.at("template_rootfs").get<std::string>();
    spec.agent_dir = j.at("agent_dir").get<std::string>();
    spec.egress_ca = j.value("egress_ca", false);  // records from before it: none
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
    for (const auto& v : j.value("volumes", json::array()))
        spec.volumes.push_back({v.at("source").get<std::string>(),
                                v.at("destination").get<std::string>(), v.at("read_only")});
    return spec;
}

json read_json_file(const fs::path& file) {
    std::ifstream in(file);
    if (!in) throw RuntimeError("cannot read " + file.string() + ": " + std::strerror(errno));
    auto parsed = json::parse(in, nullptr, false);
    if (!parsed.is_object()) throw RuntimeError(file.string() + " is not a JSON object");
    return parsed;
}

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

pid_t read_pid_file(const fs::path& file) {
    std::ifstream in(file);
    long pid = 0;
    if (!(in >> pid) || pid <= 1 || pid > (1L << 22)) return -1;
    return static_cast<pid_t>(pid);
}

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

namespace {

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

}  // namespace

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
    require_removed(id, left, problems);
}

}  // namespace deskbox::runtime
