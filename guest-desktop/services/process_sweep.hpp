// Ends every process of the sandbox but the desktop session, so a sandbox at its process or
// memory limit (a fork bomb, a runaway build) comes back without a re-create. A fork bomb
// must not outrun it: everything to end is stopped first, round after round until a round
// finds nothing new (a stopped process cannot fork), and only then killed.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <set>
#include <vector>

namespace deskbox::services {

struct SweepResult {
    std::size_t killed = 0;   // processes stopped and ended
    std::size_t rounds = 0;   // stop rounds until nothing new was found
    std::size_t refused = 0;  // processes that would not take the signal (another user's)
};

// Every process in /proc whose ancestry reaches `root` (root itself excluded), minus `keep`
// and their ancestors, is stopped and then SIGKILLed. `root` is PID 1 when the agent is the
// sandbox's init (the whole pid namespace or VM), else the agent itself.
SweepResult kill_processes_under(pid_t root, const std::set<pid_t>& keep);

// (pid, parent) of every live process in /proc (gone ones and zombies skipped).
std::vector<std::pair<pid_t, pid_t>> process_parents();

}  // namespace deskbox::services
