// files.* on the guest's file system. Paths must be absolute; file contents travel as raw
// bytes (the message body), so any byte values round-trip. Errors name the path and carry a
// code derived from errno: not_found, permission_denied, is_a_directory, not_a_directory,
// already_exists, not_empty, too_large, io_error.
#pragma once

#include <cstddef>
#include <string_view>

#include <nlohmann/json.hpp>

#include "guest-desktop/services/service_error.hpp"

namespace deskbox::services {

struct FileLimits {
    // Both default to the agent channel's body limit (protocol::Limits::max_body_bytes).
    std::size_t max_read_bytes = std::size_t{64} << 20;
    std::size_t max_write_bytes = std::size_t{64} << 20;
    // A listing travels in the JSON header, which the channel bounds too.
    std::size_t max_list_entries = 10'000;
};

class FileService {
  public:
    explicit FileService(FileLimits limits = {}) : limits_(limits) {}

    // {"path"} → {"size","mode"} + the file's bytes. Regular files only.
    Reply read(const nlohmann::json& params) const;
    // {"path","mode"?,"append"?,"parents"?} + bytes → {"size"} (the file's size afterwards).
    // Without append the file is replaced atomically (temp file in the same directory, then
    // rename): readers see the old or the new contents, never a mix. A symlink is written
    // through, not replaced. mode: integer or octal string ("0644"); default: the existing
    // file's mode, else 0644 (exact, no umask).
    nlohmann::json write(const nlohmann::json& params, std::string_view body) const;
    // {"path"} → {"entries":[{"name","type","size","mode","mtime","target"?}],"truncated"?}
    // sorted by name; type is file|dir|symlink|other; mtime in seconds (fractional).
    nlohmann::json list(const nlohmann::json& params) const;
    // {"path","parents"?,"mode"?} → {}. With parents an existing directory is fine.
    nlohmann::json mkdir(const nlohmann::json& params) const;
    // {"path","recursive"?} → {}. Symlinks are removed, never followed.
    nlohmann::json remove(const nlohmann::json& params) const;
    // {"path"} → {"type","size","mode","mtime","target"?} of the path itself (lstat).
    nlohmann::json stat(const nlohmann::json& params) const;

  private:
    FileLimits limits_;
};

}  // namespace deskbox::services
