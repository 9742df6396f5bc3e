// Small helpers both sandbox runtimes (container, microvm) use: file tails for error
// messages, running host tools, file writes, links and sizes, directories with an exact mode,
// pidfds and signal names.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>

#include <vector>

#include "common/atomic_file.hpp"
#include "common/child_process.hpp"

namespace deskbox::runtime {

// The last `count` lines of `text` (trailing newlines and CRs dropped).
std::string last_lines(const std::string& text, std::size_t count);
// A console's last `count` lines, led by the kernel's "Kernel panic - not syncing" line when
// that fell out of them: a panic's call trace is longer than a tail, and the line says why.
std::string console_excerpt(const std::string& text, std::size_t count);
// `s` without leading and trailing whitespace.
std::string trim(std::string s);

// The last `max_bytes` of `file` (empty if it cannot be read).
std::string read_tail(const std::filesystem::path& file, std::size_t max_bytes);

// common/atomic_file's write, failing with a RuntimeError (what runtimes throw).
void write_file_atomic(const std::filesystem::path& path, const std::string& data, mode_t mode,
                       atomic_file::Durability durability = atomic_file::Durability::process_crash);

// run_process, with a missing program reported as a RuntimeError naming its package.
RunResult run_tool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                   const std::string& package);
// Throws RuntimeError "<what> failed: <why>" unless the tool exited 0 in time; why is "timed
// out", else its stderr and stdout, trimmed.
void check_tool(const RunResult& result, const std::string& what);

// A hard link (same file system: free), else a copy. Throws RuntimeError.
void link_or_copy(const std::filesystem::path& from, const std::filesystem::path& to);
// The size of `file`, 0 if it has none.
std::uintmax_t file_size_or_zero(const std::filesystem::path& file);

// Makes <state_root>/sandboxes/<id> (0700) for a new sandbox. RuntimeError if it exists
// already (a leftover) or cannot be made.
void make_new_sandbox_dir(const std::filesystem::path& state_root, const std::string& id);
// RuntimeError "sandbox <id> not fully removed: <left> (<problems>)" unless `left` is empty.
void require_removed(const std::string& id, const std::vector<std::string>& left,
                     const std::string& problems);

// mkdir with exactly `mode` (not narrowed by the umask). Throws RuntimeError.
void make_dir(const std::filesystem::path& dir, mode_t mode);
// syncfs of the filesystem holding `path`: everything written there is on disk (a tree of many
// files, where fsync of each would cost more). Throws RuntimeError.
void sync_filesystem(const std::filesystem::path& path);

// pidfd_open(2); -1 with errno on failure (ESRCH: already gone).
int pidfd_open(pid_t pid);
// True once the process behind `pidfd` has exited (zombie or reaped).
bool pidfd_exited(int pidfd);
// Waits up to `timeout` for the process behind `pidfd` to exit; true if it did. Works for
// processes that are not our children (a sandbox's init after its runc monitor died).
bool pidfd_wait_exit(int pidfd, std::chrono::milliseconds timeout);
// pidfd_send_signal(2); false with errno on failure.
bool pidfd_signal(int pidfd, int sig);
// "SIGKILL", or "signal N" for one without a name.
std::string signal_name(int sig);

}  // namespace deskbox::runtime
