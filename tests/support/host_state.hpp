// What a sandbox network may leave on the host, for tests that check nothing is left: the
// network namespaces alive anywhere, the interfaces and nftables rules of the host's own
// namespace, and the network namespaces a process holds open.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <filesystem>
#include <set>
#include <sstream>
#include <string>

#include "common/child_process.hpp"

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

// The network namespaces process `pid` holds through its fds (deskboxd holds its sandboxes'
// this way).
inline std::set<ino_t> namespaces_held_by(pid_t pid) {
    std::set<ino_t> out;
    std::error_code ec;
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
