// Replacing a file so a reader (or a server restarted after a crash) sees the old contents or
// the new, never a part: written to a temporary beside it, then renamed over it. The one
// write-then-rename of the tree; each caller says whether the result must survive a power loss.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string_view>

namespace deskbox::atomic_file {

enum class Durability {
    // Survives a crash of the process; after a power loss the file may be old or empty
    // (fine for anything that is rebuilt or disposable).
    process_crash,
    // The data and the rename are on disk when write() returns (records a restarted server
    // relies on: snapshots, sandbox records).
    power_loss,
};

struct Options {
    mode_t mode = 0644;
    Durability durability = Durability::process_crash;
};

// Throws std::system_error naming the path; the temporary is gone on failure.
void write(const std::filesystem::path& path, std::string_view data, const Options& options = {});

// fsync of a file and then of its directory (its name), e.g. after a rename done elsewhere.
// Throws std::system_error naming the file.
void sync_with_directory(const std::filesystem::path& file);

}  // namespace deskbox::atomic_file
