// Process-table helpers for tests that check nothing was left running.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <vector>

namespace deskbox::testing {

// Processes whose parent is `parent`, zombies included (read from /proc).
std::vector<pid_t> children_of(pid_t parent);
inline std::vector<pid_t> children_of_self() {
    return children_of(::getpid());
}
// Whether `pid` exists and is not a zombie waiting to be reaped.
bool process_alive(pid_t pid);

}  // namespace deskbox::testing
