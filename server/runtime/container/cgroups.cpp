#include "server/runtime/container/cgroups.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "server/runtime/container/mounts.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> parts;
    std::stringstream in(s);
    std::string part;
    while (std::getline(in, part, sep)) parts.push_back(part);
    return parts;
}

bool write_file(const std::filesystem::path& file, const std::string& value) {
    std::ofstream out(file);
    if (!out) return false;
    out << value;
    out.flush();
    return static_cast<bool>(out);
}

// The cgroup dir and all its descendants, deepest first.
std::vector<std::filesystem::path> with_descendants(const std::filesystem::path& dir) {
    std::vector<std::filesystem::path> all;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        std::error_code type_ec;
        if (it->is_directory(type_ec) && !it->is_symlink(type_ec)) all.push_back(it->path());
    }
    all.push_back(dir);
    std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
        return std::distance(a.begin(), a.end()) > std::distance(b.begin(), b.end());
    });
    return all;
}

}  // namespace

std::vector<CgroupHierarchy> cgroup_hierarchies() {
    static const std::set<std::string> not_controllers = {"rw",
                                                          "ro",
                                                          "nosuid",
                                                          "nodev",
                                                          "noexec",
                                                          "relatime",
                                                          "noatime",
                                                          "xattr",
                                                          "clone_children",
                                                          "nsdelegate",
                                                          "memory_recursiveprot",
                                                          "memory_localevents"};
    std::vector<CgroupHierarchy> result;
    std::set<std::string> seen;
    for (const auto& mount : read_mountinfo()) {
        CgroupHierarchy h;
        h.mount_point = mount.mount_point;
        h.root = mount.root;
        if (mount.fstype == "cgroup2") {
            h.unified = true;
        } else if (mount.fstype == "cgroup") {
            for (auto& option : split(mount.super_options, ','))
                if (!not_controllers.count(option) && option.rfind("release_agent=", 0) != 0)
                    h.controllers.push_back(option);
        } else {
            continue;
        }
        // A hierarchy mounted twice is the same hierarchy: keep the first mount.
        std::string key = h.unified ? std::string("cgroup2") : mount.super_options;
        if (!seen.insert(key).second) continue;
        result.push_back(std::move(h));
    }
    return result;
}

std::optional<std::filesystem::path> cgroup_dir(const CgroupHierarchy& h,
                                                const std::string& cgroup) {
    std::string relative = cgroup;
    if (h.root != "/") {
        if (cgroup.rfind(h.root + "/", 0) != 0) return std::nullopt;
        relative = cgroup.substr(h.root.size());
    }
    while (!relative.empty() && relative.front() == '/') relative.erase(0, 1);
    return h.mount_point / relative;
}

std::optional<std::filesystem::path> controller_dir(const std::string& controller,
                                                    const std::string& cgroup) {
    auto hierarchies = cgroup_hierarchies();
    for (const auto& h : hierarchies)
        if (std::find(h.controllers.begin(), h.controllers.end(), controller) !=
            h.controllers.end())
            return cgroup_dir(h, cgroup);
    for (const auto& h : hierarchies)
        if (h.unified) return cgroup_dir(h, cgroup);
    return std::nullopt;
}

std::vector<std::filesystem::path> existing_cgroup_dirs(const std::string& cgroup) {
    std::vector<std::filesystem::path> dirs;
    for (const auto& h : cgroup_hierarchies()) {
        auto dir = cgroup_dir(h, cgroup);
        std::error_code ec;
        if (dir && std::filesystem::is_directory(*dir, ec)) dirs.push_back(*dir);
    }
    return dirs;
}

std::vector<std::string> child_cgroups(const std::string& parent) {
    std::set<std::string> names;
    for (const auto& dir : existing_cgroup_dirs(parent)) {
        std::error_code ec;
        for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
            std::error_code type_ec;
            if (entry.is_directory(type_ec)) names.insert(entry.path().filename().string());
        }
    }
    return {names.begin(), names.end()};
}

std::vector<pid_t> cgroup_procs(const std::filesystem::path& dir) {
    std::vector<pid_t> pids;
    std::ifstream in(dir / "cgroup.procs");
    pid_t pid;
    while (in >> pid) pids.push_back(pid);
    return pids;
}

std::optional<std::string> read_first_line(const std::filesystem::path& file) {
    std::ifstream in(file);
    std::string line;
    if (!in || !std::getline(in, line)) return std::nullopt;
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    return line;
}

void remove_cgroup(const std::string& cgroup) {
    std::vector<std::filesystem::path> dirs;
    for (const auto& top : existing_cgroup_dirs(cgroup))
        for (auto& dir : with_descendants(top)) dirs.push_back(std::move(dir));
    if (dirs.empty()) return;

    // A frozen task never handles SIGKILL (cgroup v1 freezer): thaw before killing.
    for (const auto& dir : dirs) {
        std::error_code ec;
        if (std::filesystem::exists(dir / "freezer.state", ec))
            write_file(dir / "freezer.state", "THAWED");
        if (std::filesystem::exists(dir / "cgroup.freeze", ec))
            write_file(dir / "cgroup.freeze", "0");
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::vector<pid_t> remaining;
    while (true) {
        remaining.clear();
        for (const auto& dir : dirs)
            for (pid_t pid : cgroup_procs(dir)) remaining.push_back(pid);
        if (remaining.empty() || std::chrono::steady_clock::now() >= deadline) break;
        for (pid_t pid : remaining) ::kill(pid, SIGKILL);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!remaining.empty())
        throw RuntimeError("cgroup " + cgroup + " still has " + std::to_string(remaining.size()) +
                           " process(es) after SIGKILL, e.g. pid " + std::to_string(remaining[0]));

    std::string failures;
    for (const auto& dir : dirs) {
        // The kernel may still be releasing the last task's charge: EBUSY for a moment.
        for (int attempt = 0;; ++attempt) {
            if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) break;
            if (errno != EBUSY || attempt >= 100) {
                failures += " " + dir.string() + " (" + std::strerror(errno) + ")";
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    if (!failures.empty()) throw RuntimeError("cannot remove cgroup dirs:" + failures);
}

}  // namespace deskbox::runtime
