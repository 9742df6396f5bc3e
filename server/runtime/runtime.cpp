#include "server/runtime/runtime.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "server/runtime/guest_env.hpp"

namespace deskbox::runtime {
namespace {

bool is_alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool has_nul(const std::string& s) {
    return s.find('\0') != std::string::npos;
}

void validate_hostname(const std::string& hostname) {
    if (hostname.empty()) return;
    if (hostname.size() > 64) throw SpecError("hostname", "longer than 64 characters");
    std::size_t label_start = 0;
    for (std::size_t i = 0; i <= hostname.size(); ++i) {
        if (i == hostname.size() || hostname[i] == '.') {
            std::size_t len = i - label_start;
            if (len == 0 || len > 63)
                throw SpecError("hostname", "'" + hostname + "' has an empty or too long label");
            if (hostname[label_start] == '-' || hostname[i - 1] == '-')
                throw SpecError("hostname", "'" + hostname + "': a label starts or ends with '-'");
            label_start = i + 1;
        } else if (!is_alnum(hostname[i]) && hostname[i] != '-') {
            throw SpecError("hostname",
                            "'" + hostname + "' may only hold letters, digits, '-', '.'");
        }
    }
}

}  // namespace

void validate_id(const std::string& id) {
    if (id.empty()) throw SpecError("id", "must not be empty");
    if (id.size() > 64) throw SpecError("id", "longer than 64 characters");
    if (!is_alnum(id[0])) throw SpecError("id", "'" + id + "' must start with a letter or digit");
    for (char c : id)
        if (!is_alnum(c) && c != '_' && c != '.' && c != '-')
            throw SpecError("id", "'" + id + "' may only hold letters, digits, '_', '.', '-'");
}

std::filesystem::path sandbox_dir(const std::filesystem::path& state_root, const std::string& id) {
    return state_root / "sandboxes" / id;
}

nlohmann::json limits_to_json(const ResourceLimits& limits) {
    return {{"memory_mb", limits.memory_mb},
            {"cpus", limits.cpus},
            {"pids", limits.pids},
            {"disk_mb", limits.disk_mb}};
}

ResourceLimits limits_from_json(const nlohmann::json& j) {
    ResourceLimits limits;
    limits.memory_mb = j.at("memory_mb");
    limits.cpus = j.at("cpus");
    limits.pids = j.at("pids");
    limits.disk_mb = j.value("disk_mb", 0);  // records older than the disk cap: none
    return limits;
}

std::string volume_path_problem(const std::string& path) {
    if (path.empty() || path[0] != '/') return "must be an absolute path";
    if (path.size() > 256) return "longer than 256 bytes";
    for (char c : path)
        if (c < 0x21 || c > 0x7e || c == ',' || c == ':')
            return "may hold only printable ASCII other than space, ',' and ':'";
    if (path.back() == '/') return "must not end with '/'";
    std::size_t start = 1;
    while (start <= path.size()) {
        std::size_t end = path.find('/', start);
        if (end == std::string::npos) end = path.size();
        const std::string_view part(path.data() + start, end - start);
        if (part.empty() || part == "." || part == "..")
            return "must be a normal path (no '//', '.' or '..')";
        start = end + 1;
    }
    auto at_or_under = [&](std::string_view root) {
        return path == root ||
               (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                path[root.size()] == '/');
    };
    if (at_or_under("/opt/deskbox") || path == "/opt")
        return "would cover /opt/deskbox, where the agent lives";
    for (std::string_view root :
         {"/data", "/workspace", "/mnt", "/media", "/srv", "/home/user", "/opt"})
        if (at_or_under(root)) return "";
    return "must be at or under /data, /workspace, /mnt, /media, /srv, /home/user or /opt";
}

void validate_spec(const SandboxSpec& spec) {
    validate_id(spec.id);
    if (spec.template_rootfs.empty()) throw SpecError("template_rootfs", "must be set");
    if (spec.state_root.empty() || !spec.state_root.is_absolute())
        throw SpecError("state_root", "must be an absolute path");
    if (spec.entry.empty() || spec.entry[0].empty())
        throw SpecError("entry", "needs at least the program to run");
    for (std::size_t i = 0; i < spec.entry.size(); ++i)
        if (has_nul(spec.entry[i]))
            throw SpecError("entry[" + std::to_string(i) + "]", "contains a NUL byte");
    for (const auto& [key, value] : spec.env) {
        bool valid_key = !key.empty() && !(key[0] >= '0' && key[0] <= '9');
        for (char c : key) valid_key = valid_key && (is_alnum(c) || c == '_');
        if (!valid_key)
            throw SpecError("env", "'" + key + "' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)");
        if (has_nul(value)) throw SpecError("env." + key, "contains a NUL byte");
    }
    if (spec.width < 64 || spec.width > 8192)
        throw SpecError("width", std::to_string(spec.width) + " is outside 64..8192");
    if (spec.height < 64 || spec.height > 8192)
        throw SpecError("height", std::to_string(spec.height) + " is outside 64..8192");
    if (spec.dpi < 24 || spec.dpi > 960)
        throw SpecError("dpi", std::to_string(spec.dpi) + " is outside 24..960");
    const auto& limits = spec.limits;
    if (limits.memory_mb < 64 || limits.memory_mb > (std::uint64_t{1} << 22))
        throw SpecError("limits.memory_mb",
                        std::to_string(limits.memory_mb) + " is outside 64..4194304 (MiB)");
    if (!std::isfinite(limits.cpus) || limits.cpus < 0.01 || limits.cpus > 1024)
        throw SpecError("limits.cpus", std::to_string(limits.cpus) + " is outside 0.01..1024");
    if (limits.pids < 16 || limits.pids > 4194304)
        throw SpecError("limits.pids", std::to_string(limits.pids) + " is outside 16..4194304");
    if (limits.disk_mb != 0 && (limits.disk_mb < 16 || limits.disk_mb > (std::uint64_t{1} << 22)))
        throw SpecError("limits.disk_mb",
                        std::to_string(limits.disk_mb) + " is outside 16..4194304 (MiB), or 0");
    validate_hostname(spec.hostname);
    for (std::size_t i = 0; i < spec.volumes.size(); ++i) {
        const std::string field = "volumes[" + std::to_string(i) + "]";
        if (auto problem = volume_path_problem(spec.volumes[i].destination); !problem.empty())
            throw SpecError(field + ".path", problem);
        if (spec.volumes[i].source.empty() || !spec.volumes[i].source.is_absolute())
            throw SpecError(field + ".source", "must be an absolute host path");
        for (std::size_t j = 0; j < i; ++j)
            if (spec.volumes[j].destination == spec.volumes[i].destination)
                throw SpecError(field + ".path", spec.volumes[i].destination + " is mounted twice");
    }
    if (spec.egress_ca) {
        std::error_code ec;
        if (spec.agent_dir.empty() ||
            !std::filesystem::is_regular_file(spec.agent_dir / kEgressCaFileName, ec) ||
            !std::filesystem::is_regular_file(spec.agent_dir / "bin" / "deskbox-agent", ec))
            throw SpecError("egress_ca", "needs agent_dir with " + std::string(kEgressCaFileName) +
                                             " and bin/deskbox-agent");
    }
}

const char* to_string(SandboxState state) {
    switch (state) {
        case SandboxState::running:
            return "running";
        case SandboxState::paused:
            return "paused";
        case SandboxState::exited:
            return "exited";
    }
    return "unknown";
}

const char* to_string(CopyKind kind) {
    return kind == CopyKind::memory ? "memory" : "filesystem";
}

UniqueFd connect_unix_retry(const std::filesystem::path& path,
                            std::chrono::steady_clock::time_point deadline,
                            const std::function<std::string()>& still_alive) {
    // The socket's directory may be writable by the guest (a container's /run/deskbox), so the
    // last component is never followed: it is opened O_PATH|O_NOFOLLOW beneath the directory,
    // must be a socket, and is connected through /proc/self/fd (which also lifts sun_path's
    // 107-byte limit). A symlink planted in place of the socket is refused, never connected to.
    auto parent = path.parent_path();
    auto name = path.filename().string();
    UniqueFd dir_fd(::open(parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dir_fd)
        throw RuntimeError("agent socket directory " + parent.string() + ": " +
                           std::strerror(errno));

    auto pause_for = std::chrono::milliseconds(2);
    int last_errno = 0;
    while (true) {
        UniqueFd node(::openat(dir_fd.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
        if (node) {
            struct stat st {};
            if (::fstat(node.get(), &st) != 0)
                throw RuntimeError("stat agent socket " + path.string() + ": " +
                                   std::strerror(errno));
            if (!S_ISSOCK(st.st_mode))
                throw RuntimeError("agent socket " + path.string() +
                                   " is not a socket (a symlink or file put there by the guest "
                                   "is never followed)");
            sockaddr_un addr{};
            addr.sun_family = AF_UNIX;
            std::string address = "/proc/self/fd/" + std::to_string(node.get());
            std::memcpy(addr.sun_path, address.c_str(), address.size() + 1);
            UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
            if (!sock) throw RuntimeError(std::string("socket: ") + std::strerror(errno));
            if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0)
                return sock;
        }
        last_errno = errno;
        if (last_errno != ENOENT && last_errno != ECONNREFUSED && last_errno != EAGAIN &&
            last_errno != EINTR)
            throw RuntimeError("connect to agent socket " + path.string() + ": " +
                               std::strerror(last_errno));
        if (std::string dead = still_alive ? still_alive() : std::string(); !dead.empty())
            throw RuntimeError("sandbox ended before its agent listened on " + path.string() +
                               ": " + dead);
        if (std::chrono::steady_clock::now() >= deadline)
            throw RuntimeError("agent did not listen on " + path.string() + " in time (" +
                               std::strerror(last_errno) + ")");
        std::this_thread::sleep_for(pause_for);
        pause_for = std::min(pause_for * 2, std::chrono::milliseconds(50));
    }
}

std::optional<ProcessCpuMemory> read_process_cpu_memory(int pid) {
    const std::string dir = "/proc/" + std::to_string(pid);
    std::ifstream stat_file(dir + "/stat");
    std::string stat;
    if (pid <= 0 || !std::getline(stat_file, stat)) return std::nullopt;
    // The name (field 2) may hold spaces and ')': the fields after the last ')' are plain.
    const auto close = stat.rfind(')');
    if (close == std::string::npos) return std::nullopt;
    std::istringstream fields(stat.substr(close + 1));
    std::string skip;
    for (int field = 3; field <= 13; ++field) fields >> skip;  // state .. cmajflt
    unsigned long long utime = 0, stime = 0;
    if (!(fields >> utime >> stime)) return std::nullopt;
    std::ifstream statm(dir + "/statm");
    unsigned long long size = 0, resident = 0;
    if (!(statm >> size >> resident)) return std::nullopt;
    const auto ticks = static_cast<std::uint64_t>(::sysconf(_SC_CLK_TCK));
    ProcessCpuMemory usage;
    usage.cpu_ns = (utime + stime) * (1'000'000'000ull / ticks);
    usage.resident_bytes = resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    return usage;
}

}  // namespace deskbox::runtime
