#include "server/runtime/runtime_util.hpp"

#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string_view>
#include <system_error>

#include "common/unique_fd.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

RunResult run_tool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                   const std::string& package) {
    try {
        return run_process(argv, timeout);
    } catch (const std::system_error& e) {
        throw RuntimeError("cannot run " + argv[0] + ": " + e.what() + " (apt-get install " +
                           package + ")");
    }
}

void check_tool(const RunResult& result, const std::string& what) {
    if (!result.timed_out && result.status.exit_code == 0 && result.status.signal == 0) return;
    throw RuntimeError(
        what + " failed: " +
        (result.timed_out ? std::string("timed out") : trim(result.err + result.out)));
}

void link_or_copy(const std::filesystem::path& from, const std::filesystem::path& to) {
    std::error_code ec;
    std::filesystem::remove(to, ec);
    std::filesystem::create_hard_link(from, to, ec);
    if (!ec) return;
    std::filesystem::copy_file(from, to, ec);
    if (ec)
        throw RuntimeError("cannot copy " + from.string() + " to " + to.string() + ": " +
                           ec.message());
}

std::uintmax_t file_size_or_zero(const std::filesystem::path& file) {
    std::error_code ec;
    auto size = std::filesystem::file_size(file, ec);
    return ec ? 0 : size;
}

void make_new_sandbox_dir(const std::filesystem::path& state_root, const std::string& id) {
    std::error_code ec;
    std::filesystem::create_directories(state_root / "sandboxes", ec);
    if (ec)
        throw RuntimeError("cannot create " + (state_root / "sandboxes").string() + ": " +
                           ec.message());
    const std::filesystem::path dir = sandbox_dir(state_root, id);
    if (::mkdir(dir.c_str(), 0700) != 0) {
        if (errno == EEXIST)
            throw RuntimeError("sandbox directory " + dir.string() +
                               " already exists (a leftover? see list_leftovers)");
        throw RuntimeError("mkdir " + dir.string() + ": " + std::strerror(errno));
    }
}

void require_removed(const std::string& id, const std::vector<std::string>& left,
                     const std::string& problems) {
    if (left.empty()) return;
    std::string list;
    for (const auto& item : left) list += (list.empty() ? "" : ", ") + item;
    throw RuntimeError("sandbox " + id + " not fully removed: " + list +
                       (problems.empty() ? "" : " (" + problems + ")"));
}

void write_file_atomic(const std::filesystem::path& path, const std::string& data, mode_t mode,
                       atomic_file::Durability durability) {
    try {
        atomic_file::write(path, data, {.mode = mode, .durability = durability});
    } catch (const std::system_error& e) {
        throw RuntimeError(e.what());
    }
}

std::string trim(std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    std::size_t start = 0;
    while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
    return s.substr(start);
}

std::string read_tail(const std::filesystem::path& file, std::size_t max_bytes) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return {};
    in.seekg(0, std::ios::end);
    auto size = static_cast<std::size_t>(std::max<std::streamoff>(in.tellg(), 0));
    std::size_t take = std::min(size, max_bytes);
    in.seekg(static_cast<std::streamoff>(size - take));
    std::string data(take, '\0');
    in.read(data.data(), static_cast<std::streamsize>(take));
    data.resize(static_cast<std::size_t>(in.gcount()));
    return data;
}

void sync_filesystem(const std::filesystem::path& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd || ::syncfs(fd.get()) != 0)
        throw RuntimeError("cannot sync " + path.string() + ": " + std::strerror(errno));
}

void make_dir(const std::filesystem::path& dir, mode_t mode) {
    if (::mkdir(dir.c_str(), mode) != 0)
        throw RuntimeError("mkdir " + dir.string() + ": " + std::strerror(errno));
    ::chmod(dir.c_str(), mode);  // not narrowed by the umask
}

int pidfd_open(pid_t pid) {
    return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

bool pidfd_exited(int pidfd) {
    pollfd p{pidfd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
}

bool pidfd_wait_exit(int pidfd, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pollfd p{pidfd, POLLIN, 0};
        const int ready = ::poll(&p, 1, int(std::max<long>(0, left.count())));
        if (ready > 0) return true;
        if (ready == 0 || errno != EINTR) return false;
    }
}

bool pidfd_signal(int pidfd, int sig) {
    return ::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0;
}

std::string signal_name(int sig) {
    const char* abbrev = ::sigabbrev_np(sig);
    return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string last_lines(const std::string& text, std::size_t count) {
    std::size_t end = text.size();
    while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r')) --end;
    std::size_t start = end;
    for (std::size_t seen = 0; start > 0; --start) {
        if (text[start - 1] == '\n' && ++seen == count) break;
    }
    std::string out = text.substr(start, end - start);
    out.erase(std::remove(out.begin(), out.end(), '\r'), out.end());
    return out;
}

std::string console_excerpt(const std::string& text, std::size_t count) {
    std::string tail = last_lines(text, count);
    static constexpr std::string_view kPanic = "Kernel panic - not syncing";
    const std::size_t at = text.rfind(kPanic);
    if (at == std::string::npos || tail.find(kPanic) != std::string::npos) return tail;
    std::size_t start = text.rfind('\n', at);
    start = start == std::string::npos ? 0 : start + 1;
    std::string line = text.substr(start, text.find('\n', at) - start);
    line.erase(std::remove(line.begin(), line.end(), '\r'), line.end());
    return line + "\n[...]\n" + tail;
}

}  // namespace deskbox::runtime
