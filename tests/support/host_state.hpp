// What a sandbox network may leave on the host, for tests that check nothing is left: the
// network namespaces alive anywhere, the interfaces and nftables rules of the host's own
// namespace, and the network namespaces a process holds open.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "common/child_process.hpp"
#include "server/runtime/container/mounts.hpp"

namespace deskbox::test {

// Every network namespace a process, or an fd of one, holds on this machine.
inline std::set<ino_t> live_network_namespaces() {
    std::set<ino_t> out;
    std::error_code ec;
    for (const auto& proc : std::filesystem::directory_iterator("/proc", ec)) {
        struct stat st {};
        if (::stat((proc.path() / "ns/net").c_str(), &st) == 0) out.insert(st.st_ino);
        std::error_code fd_ec;
        for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", fd_ec)) {
            auto target = std::filesystem::read_symlink(fd.path(), fd_ec).string();
            if (target.rfind("net:[", 0) == 0 && ::stat(fd.path().c_str(), &st) == 0)
                out.insert(st.st_ino);
        }
    }
    return out;
}

// "PID:STARTTIME" of every process (but `except`) that is in one of `namespaces` or holds one
// through an fd. Namespace inode numbers are reused at once after a namespace dies (another
// test's new namespace may take it), so "is inode N still live" proves nothing later on; that
// the processes which kept a namespace alive are gone does. The start time tells a reused pid.
inline std::set<std::string> processes_with_namespaces(const std::set<ino_t>& namespaces,
                                                       pid_t except = -1) {
    std::set<std::string> out;
    std::error_code ec;
    for (const auto& proc : std::filesystem::directory_iterator("/proc", ec)) {
        const std::string name = proc.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        if (std::stoi(name) == except) continue;
        bool with = false;
        struct stat st {};
        if (::stat((proc.path() / "ns/net").c_str(), &st) == 0 && namespaces.count(st.st_ino))
            with = true;
        std::error_code fd_ec;
        for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", fd_ec)) {
            auto target = std::filesystem::read_symlink(fd.path(), fd_ec).string();
            if (target.rfind("net:[", 0) == 0 && ::stat(fd.path().c_str(), &st) == 0 &&
                namespaces.count(st.st_ino))
                with = true;
        }
        if (!with) continue;
        std::ifstream stat_file(proc.path() / "stat");
        std::string line((std::istreambuf_iterator<char>(stat_file)), {});
        auto close = line.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream fields(line.substr(close + 2));
        std::string field;
        for (int i = 3; i <= 22 && fields >> field; ++i) {
        }
        out.insert(name + ":" + field);  // field 22: start time
    }
    return out;
}

// Which of `processes` (from processes_with_namespaces) still run.
inline std::set<std::string> still_running(const std::set<std::string>& processes) {
    std::set<std::string> out;
    for (const auto& p : processes) {
        const std::string pid = p.substr(0, p.find(':'));
        std::ifstream stat_file("/proc/" + pid + "/stat");
        std::string line((std::istreambuf_iterator<char>(stat_file)), {});
        auto close = line.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream fields(line.substr(close + 2));
        std::string field, state;
        fields >> state;
        for (int i = 4; i <= 22 && fields >> field; ++i) {
        }
        if (state != "Z" && pid + ":" + field == p) out.insert(p);
    }
    return out;
}

// The network namespaces process `pid` holds through its fds (deskboxd holds its routers' this
// way) and, given deskboxd's state dir, those pinned by bind mounts under it (a container in a
// user namespace gets a network namespace that namespace owns, pinned at
// <state>/namespaces/<id>/net).
inline std::set<ino_t> namespaces_held_by(pid_t pid, const std::filesystem::path& state = {}) {
    std::set<ino_t> out;
    std::error_code ec;
    if (!state.empty())
        for (const auto& pin : runtime::mounts_under(state / "namespaces")) {
            struct stat st {};
            if (pin.filename() == "net" && ::stat(pin.c_str(), &st) == 0) out.insert(st.st_ino);
        }
    for (const auto& fd :
         std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
        struct stat st {};
        auto target = std::filesystem::read_symlink(fd.path(), ec).string();
        if (target.rfind("net:[", 0) == 0 && ::stat(fd.path().c_str(), &st) == 0)
            out.insert(st.st_ino);
    }
    return out;
}

// The host namespace's interfaces by name (test internets' own veths, "dbxinet*", left out:
// they come and go with other tests).
inline std::string host_interfaces() {
    auto r = run_process({"ip", "-o", "link", "show"}, std::chrono::seconds(10));
    std::string out;
    std::istringstream lines(r.out);
    std::string line;
    while (std::getline(lines, line)) {
        auto first = line.find(": ");
        if (first == std::string::npos) continue;
        auto name = line.substr(first + 2, line.find(':', first + 2) - first - 2);
        if (name.find("dbxinet") == std::string::npos) out += name + "\n";
    }
    return out;
}

inline std::string host_nft_ruleset() {
    return run_process({"nft", "list", "ruleset"}, std::chrono::seconds(10)).out;
}

}  // namespace deskbox::test
