#include "guest-desktop/services/process_sweep.hpp"

#include <dirent.h>
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

namespace deskbox::services {
namespace {

struct StatLine {
    char state = 0;  // 0: the process is gone
    pid_t ppid = -1;
};

// Fields 3 and 4 of /proc/<pid>/stat; the command name (field 2) is in parentheses and may
// hold spaces or parentheses, so parsing starts after the last ')'.
StatLine read_stat(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(in, line)) return {};
    auto close = line.rfind(')');
    if (close == std::string::npos) return {};
    std::istringstream rest(line.substr(close + 1));
    StatLine s;
    rest >> s.state >> s.ppid;
    return rest ? s : StatLine{};
}

char state_of(pid_t pid) {
    return read_stat(pid).state;
}

// Processes under root (by ancestry), minus keep and the ancestors of keep.
std::set<pid_t> processes_to_end(pid_t root, const std::set<pid_t>& keep) {
    std::map<pid_t, pid_t> parent;
    for (auto [pid, ppid] : process_parents()) parent[pid] = ppid;
    std::set<pid_t> spared = keep;
    spared.insert(root);
    for (pid_t k : keep)
        for (pid_t p = k, hops = 0; p > 0 && hops < 4096; ++hops) {
            spared.insert(p);
            auto it = parent.find(p);
            p = it == parent.end() ? -1 : it->second;
        }
    std::set<pid_t> out;
    for (auto [pid, ppid] : parent) {
        if (spared.count(pid)) continue;
        // Walk up to root, at most as many hops as there are processes (no loop on a
        // pid reused mid-read).
        pid_t p = ppid;
        for (std::size_t hops = 0; p > 0 && p != root && hops < parent.size(); ++hops) {
            auto it = parent.find(p);
            p = it == parent.end() ? -1 : it->second;
        }
        if (p == root) out.insert(pid);
    }
    return out;
}

}  // namespace

std::vector<std::pair<pid_t, pid_t>> process_parents() {
    std::vector<std::pair<pid_t, pid_t>> out;
    DIR* dir = ::opendir("/proc");
    if (!dir) return out;
    while (dirent* e = ::readdir(dir)) {
        char* end = nullptr;
        long pid = std::strtol(e->d_name, &end, 10);
        if (*end != '\0' || pid <= 0) continue;
        StatLine stat = read_stat(static_cast<pid_t>(pid));
        // Zombies have ended already; they hold a slot only until their parent reaps them.
        if (stat.state != 0 && stat.state != 'Z')
            out.emplace_back(static_cast<pid_t>(pid), stat.ppid);
    }
    ::closedir(dir);
    return out;
}

SweepResult kill_processes_under(pid_t root, const std::set<pid_t>& keep) {
    SweepResult result;
    std::set<pid_t> stopped;
    std::set<pid_t> refused;
    // Bounded: a round finds the children forked since the last one; stopped ones fork no more.
    for (int round = 0; round < 200; ++round) {
        ++result.rounds;
        bool found_new = false;
        for (pid_t pid : processes_to_end(root, keep)) {
            if (stopped.count(pid) || refused.count(pid)) continue;
            if (::kill(pid, SIGSTOP) == 0) {
                stopped.insert(pid);
                found_new = true;
            } else if (errno == EPERM) {
                refused.insert(pid);
            }
        }
        if (!found_new) break;
    }
    // Every stopped process ends: by our SIGKILL or, a moment before it, on its own (a stopped
    // child wakes its parent with SIGCHLD, and a shell whose fork retry is interrupted gives
    // up and exits). So the count is of the processes stopped, whatever took the last step.
    for (pid_t pid : stopped) (void)::kill(pid, SIGKILL);
    result.killed = stopped.size();
    result.refused = refused.size();
    // Their parents (the exec service, init) reap them; answer once they have died, so the
    // caller's next command finds the slots free.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (pid_t pid : stopped)
        for (char state = state_of(pid);
             state != 'Z' && state != 0 && std::chrono::steady_clock::now() < deadline;
             state = state_of(pid))
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return result;
}

}  // namespace deskbox::services
